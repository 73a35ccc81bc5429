package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/api"
)

// maxPTYWrite is the largest frame PTY.Write sends (the server accepts up
// to 256 KiB).
const maxPTYWrite = 64 << 10

// PTYOptions describe an interactive terminal session.
type PTYOptions struct {
	// Cols and Rows are the terminal size; zero means 80x24.
	Cols, Rows uint16
	// Command is a shell command line; empty means a login shell.
	Command string
	// User is "user" (the default) or "root".
	User string
	// Token, if set, authenticates the session with a PTY token (see
	// Client.PTYToken) instead of the client's API key, as a browser
	// does.
	Token string
}

// PTYExit is how the process of a terminal session ended.
type PTYExit struct {
	// Status is one of the Status constants of Exec.
	Status   string
	ExitCode int
	Signal   int
	Duration time.Duration
	// Error says why the process could not be started, if it could not.
	Error string
}

// ptyExitFrom is the PTYExit that the wire form e describes.
func ptyExitFrom(e *api.PtyExit) *PTYExit {
	return &PTYExit{Status: e.Status, ExitCode: e.ExitCode, Signal: e.Signal,
		Duration: time.Duration(e.DurationMS) * time.Millisecond, Error: e.Error}
}

// PTY is an interactive terminal session in a sandbox. Read returns the
// terminal's output and io.EOF once the session has ended; Write sends
// keyboard input. The output must be read (or drained): a session whose
// output nobody reads stalls, and the server ends it after a minute.
// Close ends the session and kills the process; Wait returns how the
// process ended.
type PTY struct {
	conn   *websocket.Conn
	pr     *io.PipeReader
	pw     *io.PipeWriter
	cancel context.CancelFunc
	write  func(typ websocket.MessageType, b []byte) error
	done   chan struct{}

	mu   sync.Mutex
	exit *PTYExit
	err  error
}

// PTY opens an interactive terminal in sandbox id over a WebSocket.
func (c *Client) PTY(ctx context.Context, id string, opts PTYOptions) (*PTY, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q := ptyQuery(opts)
	hdr := http.Header{}
	if opts.Token != "" {
		q.Set("token", opts.Token)
	} else {
		hdr.Set("Authorization", "Bearer "+c.key)
	}
	if c.userAgent != "" {
		hdr.Set("User-Agent", c.userAgent)
	}
	hc := *c.hc
	hc.Timeout = 0 // the session may last; ctx bounds the handshake
	conn, resp, err := websocket.Dial(ctx, c.endpoint(sandboxPath(id, "/pty"), q), &websocket.DialOptions{
		HTTPClient: &hc,
		HTTPHeader: hdr,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("airlock: pty: %w", err)
	}
	conn.SetReadLimit(1 << 20)
	life, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	p := &PTY{conn: conn, pr: pr, pw: pw, cancel: cancel, done: make(chan struct{})}
	p.write = func(typ websocket.MessageType, b []byte) error {
		return conn.Write(life, typ, b)
	}
	go p.readLoop(life)
	return p, nil
}

// ptyQuery is the query of a PTY request for opts, without a token.
func ptyQuery(opts PTYOptions) url.Values {
	q := url.Values{}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(int(opts.Cols)))
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(int(opts.Rows)))
	}
	if opts.Command != "" {
		q.Set("cmd", opts.Command)
	}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	return q
}

// readLoop receives the server's frames until the connection ends.
func (p *PTY) readLoop(ctx context.Context) {
	var err error
	for {
		var typ websocket.MessageType
		var data []byte
		typ, data, err = p.conn.Read(ctx)
		if err != nil {
			break
		}
		switch typ {
		case websocket.MessageBinary:
			// Fails only once the reader was closed: drop the output.
			_, _ = p.pw.Write(data)
		case websocket.MessageText:
			p.frame(data)
		}
	}
	p.mu.Lock()
	if p.exit == nil && p.err == nil {
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			p.err = fmt.Errorf("airlock: pty: session closed before the process exited: %w", ErrUnavailable)
		} else {
			p.err = fmt.Errorf("airlock: pty: connection lost: %w", err)
		}
	}
	p.mu.Unlock()
	_ = p.pw.Close()
	close(p.done)
}

// frame handles a text frame: the exit report or an error.
func (p *PTY) frame(data []byte) {
	var f api.PtyFrame
	if json.Unmarshal(data, &f) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f.Type {
	case "exit":
		x := f.PtyExit
		if len(f.Error) > 0 {
			_ = json.Unmarshal(f.Error, &x.Error)
		}
		p.exit = ptyExitFrom(&x)
	case "error":
		e := streamError(parseErrorDetail(f.Error), "the terminal session failed")
		e.Status = http.StatusSwitchingProtocols
		p.err = e
	}
}

// Read reads terminal output. It returns io.EOF once the session has
// ended and all output was read.
func (p *PTY) Read(b []byte) (int, error) { return p.pr.Read(b) }

// Write sends keyboard input to the terminal.
func (p *PTY) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), maxPTYWrite)]
		if err := p.write(websocket.MessageBinary, chunk); err != nil {
			return n, fmt.Errorf("airlock: pty write: %w", err)
		}
		n += len(chunk)
		b = b[len(chunk):]
	}
	return n, nil
}

// Resize changes the terminal size.
func (p *PTY) Resize(ctx context.Context, cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("airlock: pty resize: cols and rows must be positive: %w", ErrInvalid)
	}
	b, _ := json.Marshal(api.PtyResize{Cols: int(cols), Rows: int(rows), Type: "resize"})
	if err := p.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("airlock: pty resize: %w", err)
	}
	return nil
}

// Close ends the session; the server kills the process if it still runs.
// It is safe to call more than once and after the process exited.
func (p *PTY) Close() error {
	_ = p.conn.Close(websocket.StatusNormalClosure, "")
	p.cancel()
	<-p.done
	return p.pr.Close()
}

// Wait blocks until the session has ended and returns how the process
// ended; the error says why the session ended otherwise (the server's
// error, or a lost connection).
func (p *PTY) Wait(ctx context.Context) (*PTYExit, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit != nil {
		return p.exit, nil
	}
	return nil, p.err
}
