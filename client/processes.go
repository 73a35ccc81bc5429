package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
)

// Process is one process of a sandbox: any process in it, not only those
// started through Exec. FollowProcess works on one with StartedByAgent
// set.
type Process = api.SandboxProcess

// ProcessList is what ListProcesses returns, in the API's wire form.
type ProcessList = api.ProcessList

// ListProcesses lists every process of sandbox id but its agent, ordered
// by pid.
func (c *Client) ListProcesses(ctx context.Context, id string) (*ProcessList, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	l := &ProcessList{}
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/processes"), nil, nil, l, http.StatusOK); err != nil {
		return nil, err
	}
	return l, nil
}

// checkPID refuses a pid that cannot name a process.
func checkPID(pid int) error {
	if pid < 1 {
		return fmt.Errorf("airlock: pid %d is not a process id: %w", pid, ErrInvalid)
	}
	return nil
}

// processPath is the path of process pid of sandbox id plus suffix.
func processPath(id string, pid int, suffix string) string {
	return sandboxPath(id, "/processes/"+strconv.Itoa(pid)+suffix)
}

// SignalProcess sends a signal to process pid of sandbox id, whoever
// started it. signal is a name (TERM, SIGKILL) or a number (1..64); the
// server checks it. SIGKILL to a process the agent started kills its whole
// tree.
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, signal string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkPID(pid); err != nil {
		return err
	}
	if signal == "" {
		return fmt.Errorf("airlock: a signal is required: %w", ErrInvalid)
	}
	sig, err := json.Marshal(signal)
	if err != nil {
		return fmt.Errorf("airlock: encode request: %w", err)
	}
	in := api.SignalRequest{Signal: sig}
	return c.doJSON(ctx, http.MethodPost, processPath(id, pid, "/signal"), nil, in, nil, http.StatusNoContent)
}

// KillAllProcesses kills every process of sandbox id but its agent and
// returns how many it killed once all of them are gone: a sandbox whose
// processes took every pid (a fork bomb) runs commands again. wait bounds
// the server's wait for the last one (0: 10 s; at most 60 s, rounded up
// to seconds); past it the error is ErrTimeout.
func (c *Client) KillAllProcesses(ctx context.Context, id string, wait time.Duration) (int, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	if wait < 0 || wait > time.Minute {
		return 0, fmt.Errorf("airlock: kill-all wait %v is not within 0..1m: %w", wait, ErrInvalid)
	}
	in := api.KillAllRequest{TimeoutS: seconds(wait)}
	var out api.KillAllResult
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/processes/kill"), nil, in, &out, http.StatusOK); err != nil {
		return 0, err
	}
	return out.Killed, nil
}

// FollowProcess attaches to process pid of sandbox id, which its agent
// started (Process.StartedByAgent: a background process, a code context's
// kernel), and calls onOutput with the output it writes from now on, as
// ExecStream does, until it exits; it returns the process's result
// (without output). Ending ctx, or onOutput failing, detaches: the
// process keeps running.
func (c *Client) FollowProcess(ctx context.Context, id string, pid int, onOutput func(s Stream, data []byte) error) (*ExecResult, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPID(pid); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, processPath(id, pid, "/output"), nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res *ExecResult
	err = readStream(resp.Body, "process output", maxStreamLine, outputLines(onOutput, &res, "process output stream failed"))
	if err != nil {
		return nil, err
	}
	return res, nil
}

// SendProcessInput writes data (at most 1 MiB) to the stdin of process
// pid of sandbox id, started by ExecStream with KeepStdin, and closes
// its stdin after when closeStdin is set.
func (c *Client) SendProcessInput(ctx context.Context, id string, pid int, data []byte, closeStdin bool) error {
	if err := checkID(id); err != nil {
		return err
	}
	if pid < 1 {
		return fmt.Errorf("airlock: pid %d is not valid: %w", pid, ErrInvalid)
	}
	in := api.ProcessInputRequest{Close: closeStdin}
	if len(data) > 0 {
		if utf8.Valid(data) {
			s := string(data)
			in.Data = &s
		} else {
			in.DataB64 = data
		}
	}
	return c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/processes/"+strconv.Itoa(pid)+"/stdin"), nil, in, nil, http.StatusNoContent)
}

// ResizeProcess sets the terminal size of process pid of sandbox id,
// started by ExecStream with Pty.
func (c *Client) ResizeProcess(ctx context.Context, id string, pid, cols, rows int) error {
	if err := checkID(id); err != nil {
		return err
	}
	if pid < 1 {
		return fmt.Errorf("airlock: pid %d is not valid: %w", pid, ErrInvalid)
	}
	return c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/processes/"+strconv.Itoa(pid)+"/resize"), nil, api.PtySize{Cols: cols, Rows: rows}, nil, http.StatusNoContent)
}
