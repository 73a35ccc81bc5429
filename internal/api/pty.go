package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The PTY protocol (GET /v1/sandboxes/{id}/pty?cols=C&rows=R&cmd=CMD&user=U,
// upgraded to a WebSocket; authenticated by the Authorization header or,
// for a browser, by &token=T from POST .../pty/token, see ptytoken.go):
//
//   - Binary frames, both ways, carry terminal bytes: client to server is
//     keyboard input, server to client is terminal output.
//   - A text frame from the client is a JSON control message; the only
//     one is {"type":"resize","cols":C,"rows":R}. Anything else closes the
//     session with 1008 (policy violation).
//   - When the process ends, the server sends one text frame
//     {"type":"exit","status":...,"exit_code":...,"signal":...,
//     "duration_ms":...} and closes with 1000 and the reason
//     "exit_code=N". If the process cannot be started or the sandbox
//     fails, it sends {"type":"error","error":{"code","message"}} and
//     closes with 1011 and the error code as reason (1001 when the
//     daemon's graceful stop ended the session).
//   - The client closing the WebSocket (or going away) kills the process.
//
// cmd is a shell command line (run with /bin/sh -c); it defaults to a
// login shell. cols and rows default to 80 and 24. user is "user" (the
// default) or "root".
const (
	defaultPTYCommand = "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"
	defaultPTYCols    = 80
	defaultPTYRows    = 24
	maxPTYDim         = 1000
	maxPTYCommand     = 16 << 10
	// maxPTYFrame caps one frame from the client.
	maxPTYFrame = 256 << 10
)

// ptyParams are the validated query parameters of a PTY request.
type ptyParams struct {
	cols, rows uint16
	cmd        string
	user       string // "" (the default user), "user" or "root"
}

// parsePTYQuery validates the query of a PTY request.
func parsePTYQuery(raw string) (ptyParams, error) {
	out := ptyParams{cols: defaultPTYCols, rows: defaultPTYRows, cmd: defaultPTYCommand}
	q, err := parseQuery(raw, "cols", "rows", "cmd", "user")
	if err != nil {
		return out, err
	}
	dim := func(name string, def uint16) (uint16, error) {
		s := q.Get(name)
		if s == "" {
			return def, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPTYDim {
			return 0, invalidf("%s must be an integer from 1 to %d", name, maxPTYDim)
		}
		return uint16(n), nil
	}
	if out.cols, err = dim("cols", defaultPTYCols); err != nil {
		return out, err
	}
	if out.rows, err = dim("rows", defaultPTYRows); err != nil {
		return out, err
	}
	switch out.user = q.Get("user"); out.user {
	case "", "user", "root":
	default:
		return out, invalidf("user must be \"user\" or \"root\"")
	}
	if q.Has("cmd") {
		cmd := q.Get("cmd")
		switch {
		case strings.TrimSpace(cmd) == "":
			return out, invalidf("cmd must not be empty")
		case len(cmd) > maxPTYCommand:
			return out, invalidf("cmd is longer than %d bytes", maxPTYCommand)
		case strings.IndexByte(cmd, 0) >= 0 || !utf8.ValidString(cmd):
			return out, invalidf("cmd must be UTF-8 without NUL bytes")
		}
		out.cmd = cmd
	}
	return out, nil
}

// checkUpgrade answers, in the JSON error envelope, a request for a
// WebSocket route that is not a WebSocket handshake (websocket.Accept
// would answer it in plain text).
func checkUpgrade(r *http.Request) error {
	hasToken := func(header, token string) bool {
		for _, v := range r.Header.Values(header) {
			for _, t := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(t), token) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case !hasToken("Connection", "upgrade") || !hasToken("Upgrade", "websocket"):
		return &apiError{status: http.StatusUpgradeRequired, code: CodeUpgradeRequired,
			msg: "this route is a WebSocket: open it with a WebSocket client (Connection: Upgrade, Upgrade: websocket)"}
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return &apiError{status: http.StatusUpgradeRequired, code: CodeUpgradeRequired,
			msg: "this route speaks WebSocket version 13 (Sec-WebSocket-Version: 13)"}
	case r.Header.Get("Sec-WebSocket-Key") == "":
		return invalidf("the WebSocket handshake lacks Sec-WebSocket-Key")
	}
	return nil
}

// pty serves GET /v1/sandboxes/{id}/pty (see the protocol above).
// Everything that can be checked is checked before the upgrade, so that
// such errors are ordinary JSON responses.
func (h *Handler) pty(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	params, err := parsePTYQuery(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	if sb.State != sandbox.StateRunning {
		return fmt.Errorf("sandbox %s is %s: %w", sb.ID, sb.State, errdefs.ErrFailedPrecondition)
	}
	cmdText := params.cmd
	if len(cmdText) > maxAuditBytes {
		cmdText = strings.ToValidUTF8(cmdText[:maxAuditBytes], "") + "...(truncated)"
	}
	c.ev.Details = map[string]any{"command": cmdText}
	if params.user != "" {
		c.ev.Details["user"] = params.user
	}
	if c.viaToken {
		c.ev.Details["auth"] = "pty_token"
	}
	if err := checkUpgrade(c.r); err != nil {
		return err
	}
	// A command policy judges the terminal's command (by default the
	// login shell), never what is typed into it.
	if err := h.checkCommandPolicy(c, sb, &execRequest{Command: params.cmd}); err != nil {
		return err
	}
	release, err := c.admit(sb.ID, streamCost)
	if err != nil {
		return err
	}
	defer release()
	if err := c.begin(); err != nil {
		return err
	}
	// A browser sends its page's Origin, and the WebSocket library
	// refuses an origin other than this server's: a defence for sites
	// whose cookies a foreign page's WebSocket would carry. Airlock has
	// no ambient credentials; a token is the credential, and a page that
	// holds one was given it (a web console served from elsewhere).
	conn, err := websocket.Accept(c.w, c.r, &websocket.AcceptOptions{InsecureSkipVerify: c.viaToken})
	if err != nil {
		// Accept has answered with an HTTP error.
		c.w.status = http.StatusBadRequest
		c.record(CodeInvalidArgument)
		return nil
	}
	c.w.status = http.StatusSwitchingProtocols
	conn.SetReadLimit(maxPTYFrame)
	// ctx bounds the agent stream: ending it kills the process.
	ctx, cancel := context.WithCancel(c.r.Context())
	defer cancel()
	// The WebSocket's reads and writes outlive ctx, so that the last
	// frame still goes out when the graceful stop ends the session
	// (coder/websocket closes a connection whose read or write context
	// ends); the connection's closing ends them.
	wsCtx, wsCancel := context.WithCancel(context.WithoutCancel(c.r.Context()))
	defer wsCancel()

	out := wsWriter(wsCtx, conn, h.lim.WriteIdleTimeout)
	p, err := h.mgr.StartProcess(ctx, sb.ID, agentclient.ExecRequest{
		Shell:     params.cmd,
		User:      params.user,
		Env:       map[string]string{"TERM": "xterm-256color"},
		Pty:       &agentclient.PtySize{Cols: params.cols, Rows: params.rows},
		OpenStdin: true,
		Stdout:    out,
	})
	if err != nil {
		h.ptyFail(ctx, c, conn, err)
		return nil
	}

	pr, pw := io.Pipe()
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		var err error
		if p.PID != 0 {
			err = p.StreamInput(ctx, pr)
		}
		_ = pr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
	}()
	input := &inputDigest{h: sha256.New()}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer cancel() // the client left: end the process
		h.ptyReadLoop(ctx, wsCtx, conn, p, pw, input)
	}()

	res, werr := p.Wait()
	_ = pw.Close()
	// Input that arrives from now on reaches no process.
	input.addTo(c.ev.Details)
	if res == nil {
		if werr == nil {
			werr = fmt.Errorf("pty: no result: %w", errdefs.ErrInternal)
		}
		if ctx.Err() != nil && context.Cause(c.r.Context()) != errShuttingDown {
			c.record(CodeCanceled) // the client ended the session
		} else {
			h.ptyFail(ctx, c, conn, werr)
		}
	} else {
		addExitDetails(c, res)
		c.record("ok")
		b, _ := json.Marshal(wire.PtyExit{Type: "exit", Status: string(res.Status), ExitCode: res.ExitCode,
			Signal: res.Signal, DurationMS: res.Duration.Milliseconds(), Error: clean(res.Error)})
		wctx, wcancel := context.WithTimeout(wsCtx, 5*time.Second)
		_ = conn.Write(wctx, websocket.MessageText, b)
		wcancel()
		_ = conn.Close(websocket.StatusNormalClosure, "exit_code="+strconv.Itoa(res.ExitCode))
	}
	cancel()
	_ = conn.CloseNow()
	<-readDone
	<-inDone
	return nil
}

// ptyFail reports err on the WebSocket and closes it: with 1001 (going
// away) when the daemon's graceful stop ended the session, else 1011.
func (h *Handler) ptyFail(ctx context.Context, c *call, conn *websocket.Conn, err error) {
	err = c.explain(err)
	_, code, msg := h.publicError(err)
	h.log.Warn("pty session failed", "err", err)
	c.record(code)
	b, _ := json.Marshal(wire.StreamError{Type: "error", Error: wire.ErrorDetail{Code: code, Message: msg}})
	// ctx may have ended with the session: the last frame gets its own
	// time.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = conn.Write(wctx, websocket.MessageText, b)
	status := websocket.StatusInternalError
	if context.Cause(c.r.Context()) == errShuttingDown {
		status = websocket.StatusGoingAway
	}
	_ = conn.Close(status, code)
}

// ptyReadLoop forwards the client's frames until the connection ends:
// input into the process's terminal through in, resize messages to the
// process p (bounded by ctx). Frames are read under wsCtx.
func (h *Handler) ptyReadLoop(ctx, wsCtx context.Context, conn *websocket.Conn, p *agentclient.Process, in *io.PipeWriter, digest *inputDigest) {
	for {
		typ, data, err := conn.Read(wsCtx)
		if err != nil {
			return
		}
		switch typ {
		case websocket.MessageBinary:
			// A failed write means the input stream ended (the process
			// closed its terminal); later input is dropped.
			n, _ := in.Write(data)
			digest.add(data[:n])
		case websocket.MessageText:
			var ctl wire.PtyResize
			dec := json.NewDecoder(strings.NewReader(string(data)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ctl); err != nil || ctl.Type != "resize" ||
				ctl.Cols < 1 || ctl.Cols > maxPTYDim || ctl.Rows < 1 || ctl.Rows > maxPTYDim {
				_ = conn.Close(websocket.StatusPolicyViolation, "invalid control message")
				return
			}
			if p.PID != 0 {
				if err := p.Resize(ctx, agentclient.PtySize{Cols: uint16(ctl.Cols), Rows: uint16(ctl.Rows)}); err != nil {
					h.log.Debug("pty resize failed", "err", err)
				}
			}
		}
	}
}

// writerFunc adapts a function to io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// wsWriter sends terminal output as binary frames. A frame the client
// does not take within idle ends the session.
func wsWriter(ctx context.Context, conn *websocket.Conn, idle time.Duration) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		wctx, cancel := context.WithTimeout(ctx, idle)
		defer cancel()
		if err := conn.Write(wctx, websocket.MessageBinary, p); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

// inputDigest is the sha256 and size of the input a session has passed
// to its process so far. It is safe for concurrent use.
type inputDigest struct {
	mu sync.Mutex
	h  hash.Hash
	n  int64
}

func (d *inputDigest) add(p []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.h.Write(p)
	d.n += int64(len(p))
}

// addTo records the input so far in an audit event's details as
// stdin_sha256 and stdin_bytes (as for an exec's stdin).
func (d *inputDigest) addTo(details map[string]any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	details["stdin_sha256"] = hex.EncodeToString(d.h.Sum(nil))
	details["stdin_bytes"] = d.n
}
