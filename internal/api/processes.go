package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The processes of a sandbox: every process in it, whoever started it (a
// command's children, daemons, orphans, a fork bomb's copies), listed
// from the agent's view of /proc; a signal to one of them; "kill
// everything but the agent", which makes a sandbox whose processes took
// every pid usable again; and the output of a running process from now
// on (a background process, a code context's kernel: those the agent
// started itself, which carry a tag and the background flag).

// The audit actions of the process routes.
const (
	ActionProcessSignal  = "process.signal"
	ActionProcessKillAll = "process.kill_all"
)

// maxKillAllTimeout caps timeout_s of a kill-all (the agent's limit).
const maxKillAllTimeout = agentclient.MaxKillAllWait

// stateNames spells out /proc's state letters.
var stateNames = map[string]string{
	"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop",
	"Z": "zombie", "X": "dead", "I": "idle", "P": "parked", "W": "waking", "K": "wakekill",
}

// processOf is the wire form of p.
func processOf(p agentclient.SandboxProcess) wire.SandboxProcess {
	state := stateNames[p.State]
	if state == "" {
		state = "unknown"
	}
	cmd := p.Argv
	if cmd == nil {
		cmd = []string{}
	}
	return wire.SandboxProcess{
		PID: p.PID, PPID: p.PPID, Cmd: cmd, CmdTruncated: p.ArgvTruncated, Name: p.Name,
		UID: p.UID, User: p.User, State: state, Cgroup: p.Cgroup, Session: p.Session,
		StartedAt: p.StartedAt.UTC(), StartedByAgent: p.Tracked, Tag: p.Tag, Background: p.Background,
	}
}

// listProcesses serves GET /v1/sandboxes/{id}/processes.
func (h *Handler) listProcesses(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	l, err := h.mgr.ListAllProcesses(c.r.Context(), sb.ID)
	if err != nil {
		return err
	}
	out := wire.ProcessList{Processes: make([]wire.SandboxProcess, 0, len(l.Processes)), Total: l.Total, Truncated: l.Truncated}
	for _, p := range l.Processes {
		out.Processes = append(out.Processes, processOf(p))
	}
	return c.json(http.StatusOK, out)
}

// pathPID parses the {pid} of the path.
func (c *call) pathPID() (int, error) {
	s := c.r.PathValue("pid")
	pid, err := strconv.Atoi(s)
	if err != nil || pid < 1 || pid > 1<<22 || strconv.Itoa(pid) != s {
		return 0, invalidf("malformed pid; want a process id of the sandbox (a positive integer)")
	}
	return pid, nil
}

// signalNames are the signals known by name; others by number.
var signalNames = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "ILL": syscall.SIGILL,
	"TRAP": syscall.SIGTRAP, "ABRT": syscall.SIGABRT, "BUS": syscall.SIGBUS, "FPE": syscall.SIGFPE,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "SEGV": syscall.SIGSEGV, "USR2": syscall.SIGUSR2,
	"PIPE": syscall.SIGPIPE, "ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM, "CHLD": syscall.SIGCHLD,
	"CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP, "TTIN": syscall.SIGTTIN,
	"TTOU": syscall.SIGTTOU, "URG": syscall.SIGURG, "XCPU": syscall.SIGXCPU, "XFSZ": syscall.SIGXFSZ,
	"VTALRM": syscall.SIGVTALRM, "PROF": syscall.SIGPROF, "WINCH": syscall.SIGWINCH, "IO": syscall.SIGIO,
	"SYS": syscall.SIGSYS,
}

// parseSignal reads a signal given as a name (TERM, SIGTERM, sigterm) or
// a number (1..64).
func parseSignal(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, invalidf("signal %d is out of range 1..64", n)
		}
		return n, nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := signalNames[name]; ok {
		return int(sig), nil
	}
	return 0, invalidf("unknown signal %q; give a name such as TERM or KILL, or a number 1..64", capText(s, 32))
}

// parseSignalJSON reads the signal field: a JSON string or number.
func parseSignalJSON(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, invalidf("signal is required: a name such as TERM or KILL, or a number 1..64")
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, invalidf("malformed signal")
		}
		return parseSignal(s)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, invalidf("signal must be a name or an integer 1..64")
	}
	if n < 1 || n > 64 {
		return 0, invalidf("signal %d is out of range 1..64", n)
	}
	return n, nil
}

// signalProcess serves POST /v1/sandboxes/{id}/processes/{pid}/signal.
func (h *Handler) signalProcess(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	pid, err := c.pathPID()
	if err != nil {
		return err
	}
	var req wire.SignalRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	sig, err := parseSignalJSON(req.Signal)
	if err != nil {
		return err
	}
	c.ev.Details = map[string]any{"pid": pid, "signal": sig}
	// A sandbox that is not running refuses before the intent.
	if err := sb.CheckRunning(); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.mgr.SignalAnyProcess(c.r.Context(), sb.ID, pid, sig); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// ActionProcessStdin is the audit action of input sent to a process:
// its record holds the pid, the bytes' size and SHA-256 (never the
// bytes), and whether stdin was closed.
const ActionProcessStdin = "process.stdin"

// maxProcessInput caps the bytes of one POST .../stdin.
const maxProcessInput = 1 << 20

// processStdin serves POST /v1/sandboxes/{id}/processes/{pid}/stdin:
// bytes for the stdin of a process started with it kept open, and
// optionally its close.
func (h *Handler) processStdin(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	pid, err := c.pathPID()
	if err != nil {
		return err
	}
	var req wire.ProcessInputRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	if req.Data != nil && req.DataB64 != nil {
		return invalidf("give either data or data_b64, not both")
	}
	data := req.DataB64
	if req.Data != nil {
		data = []byte(*req.Data)
	}
	if len(data) > maxProcessInput {
		return invalidf("the input is %d bytes, at most %d are allowed in one request", len(data), maxProcessInput)
	}
	if len(data) == 0 && !req.Close {
		return invalidf("give data, data_b64 or close")
	}
	c.ev.Details = map[string]any{"pid": pid, "close": req.Close}
	addStdinDetails(c.ev.Details, data)
	if err := sb.CheckRunning(); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.mgr.SendProcessInput(c.r.Context(), sb.ID, pid, data, req.Close); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// resizeProcess serves POST /v1/sandboxes/{id}/processes/{pid}/resize:
// the new size of the terminal of a process started with pty.
func (h *Handler) resizeProcess(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	pid, err := c.pathPID()
	if err != nil {
		return err
	}
	var req wire.PtySize
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	size, err := ptySize(req)
	if err != nil {
		return err
	}
	if err := h.mgr.ResizeProcess(c.r.Context(), sb.ID, pid, size); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// killAllProcesses serves POST /v1/sandboxes/{id}/processes/kill.
func (h *Handler) killAllProcesses(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	var req wire.KillAllRequest
	if err := c.decodeJSON(&req, true); err != nil {
		return err
	}
	if req.TimeoutS < 0 || req.TimeoutS > int64(maxKillAllTimeout/time.Second) {
		return invalidf("timeout_s must be between 0 and %d", int64(maxKillAllTimeout/time.Second))
	}
	c.ev.Details = map[string]any{}
	if req.TimeoutS > 0 {
		c.ev.Details["timeout_s"] = req.TimeoutS
	}
	if err := sb.CheckRunning(); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	n, err := h.mgr.KillAllProcesses(c.r.Context(), sb.ID, time.Duration(req.TimeoutS)*time.Second)
	if err != nil {
		return err
	}
	c.ev.Details["killed"] = n
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.KillAllResult{Killed: n})
}

// processOutput serves GET /v1/sandboxes/{id}/processes/{pid}/output: the
// output of a process the agent started (a background one, typically),
// from now on, as NDJSON lines like a streamed exec's, then its exit
// line. It does not change the process, and ending the request leaves it
// running. The stream ends after Limits.MaxExecTimeout with an error line
// (code timeout) if the process has not exited by then.
func (h *Handler) processOutput(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	pid, err := c.pathPID()
	if err != nil {
		return err
	}
	release, err := c.admit(sb.ID, streamCost)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(c.r.Context(), h.lim.MaxExecTimeout)
	defer cancel()
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	emit := func(ev wire.OutputLine) error { return nw.writeLine(ev) }
	stdoutW := &streamWriter{emit: emit, typ: wire.StreamStdout}
	stderrW := &streamWriter{emit: emit, typ: wire.StreamStderr}
	p, err := h.mgr.ConnectProcess(ctx, sb.ID, pid, stdoutW, stderrW)
	if err != nil {
		return err
	}
	if err := nw.start(); err != nil {
		return nil // the client is gone; ending ctx detaches
	}
	res, err := p.Wait()
	if res == nil {
		if err == nil {
			err = fmt.Errorf("process output: no result: %w", errdefs.ErrInternal)
		}
		if ctx.Err() == context.DeadlineExceeded && c.r.Context().Err() == nil {
			err = fmt.Errorf("the process is still running after %v: %w", h.lim.MaxExecTimeout, errdefs.ErrTimeout)
		}
		nw.endWithError(err)
		nw.abortIfFailed()
		return nil
	}
	stdoutW.flushRest()
	stderrW.flushRest()
	_ = nw.writeLine(wire.ExecExit{Type: "exit", ExecResult: resultJSON(res)})
	nw.abortIfFailed()
	return nil
}
