package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Bounds of the sessions with upstream MCP servers.
const (
	// DefaultMaxMCPSessions caps the sessions with upstream MCP servers
	// open at once, all tenants together (Config.MaxMCPSessions 0).
	DefaultMaxMCPSessions = 64
	// DefaultMCPIdle is how long a session no call uses stays open
	// (Config.MCPIdle 0); a stdio server's process ends with it.
	DefaultMCPIdle = 5 * time.Minute
	// mcpDialTimeout bounds starting a session (the process, the
	// handshake), whatever the waiting calls' timeouts.
	mcpDialTimeout = 30 * time.Second
	// mcpTerminateGrace is how long a stdio server has to exit once its
	// stdin is closed before its process group is killed.
	mcpTerminateGrace = 2 * time.Second
	// mcpMaxListPages caps the pages of tools/list read to find a tool.
	mcpMaxListPages = 64
	// mcpMaxErrorText caps the text of an isError result quoted in the
	// call's error.
	mcpMaxErrorText = 1000
	// mcpDefaultPath is the PATH of a stdio server that sets none.
	mcpDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// mcpPool keeps the gateway's sessions with upstream MCP servers: one
// per tenant and upstream (its command, args and env, or its URL and
// headers, secrets' values included, so that a rotated secret starts a
// new session), shared by every tool and call of it. A session is
// started by the first call that needs it, reused while it lives,
// dropped when it dies (the next call starts another), closed when no
// call has used it for idle and when the gateway closes. At most max
// are open: past it the one idle longest is closed, and a call finds
// none idle is refused. It is safe for concurrent use.
type mcpPool struct {
	client *mcp.Client
	// http is the transport of Streamable HTTP upstreams: the gateway's
	// SSRF-guarded one.
	http    http.RoundTripper
	max     int
	idle    time.Duration
	maxMsg  int
	life    context.Context // canceled by close: ends dials
	stopAll context.CancelFunc

	mu       sync.Mutex
	sessions map[string]*mcpSession
	closed   bool
	reaper   sync.WaitGroup
}

// mcpSession is one session with an upstream MCP server.
type mcpSession struct {
	key   string
	ready chan struct{} // closed once the dial ended: cs or err is set
	cs    *mcp.ClientSession
	err   error
	cmd   *exec.Cmd // a stdio server's process
	dead  atomic.Bool
	// inflight and lastUsed are the pool's, under its mu.
	inflight int
	lastUsed time.Time
	once     sync.Once
	closed   chan struct{} // closed once close has run
}

func newMCPPool(rt http.RoundTripper, max int, idle time.Duration, maxMsg int) *mcpPool {
	life, stop := context.WithCancel(context.Background())
	p := &mcpPool{
		client: mcp.NewClient(&mcp.Implementation{Name: "airlock-gateway", Version: "1"},
			// No roots, sampling or elicitation: an upstream asks the
			// gateway nothing.
			&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}),
		http: rt, max: max, idle: idle, maxMsg: maxMsg,
		life: life, stopAll: stop,
		sessions: make(map[string]*mcpSession),
	}
	p.reaper.Add(1)
	go p.reap()
	return p
}

// reap closes the sessions idle for longer than p.idle until the pool
// closes.
func (p *mcpPool) reap() {
	defer p.reaper.Done()
	every := min(max(p.idle/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.life.Done():
			return
		case now := <-t.C:
			var idle []*mcpSession
			p.mu.Lock()
			for k, s := range p.sessions {
				if s.inflight == 0 && now.Sub(s.lastUsed) >= p.idle {
					delete(p.sessions, k)
					idle = append(idle, s)
				}
			}
			p.mu.Unlock()
			for _, s := range idle {
				s.close()
			}
		}
	}
}

// close closes every session (a stdio server's process group is
// killed if it does not exit in mcpTerminateGrace) and stops the pool:
// later calls are refused.
func (p *mcpPool) close() {
	p.mu.Lock()
	p.closed = true
	all := make([]*mcpSession, 0, len(p.sessions))
	for _, s := range p.sessions {
		all = append(all, s)
	}
	clear(p.sessions)
	p.mu.Unlock()
	p.stopAll()
	p.reaper.Wait()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(s.close)
	}
	wg.Wait()
}

// len returns the sessions open or opening.
func (p *mcpPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// acquire returns the session key names, started by dial if there is
// none (or it died), and marks it used until release is called. The
// dial runs on its own (bounded by mcpDialTimeout), so a call that
// gives up waiting leaves it to the next.
func (p *mcpPool) acquire(ctx context.Context, key string, dial func(ctx context.Context) (*mcp.ClientSession, *exec.Cmd, error)) (*mcpSession, func(), error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, errors.New("the gateway is closing")
	}
	s := p.sessions[key]
	if s != nil && s.dead.Load() {
		delete(p.sessions, key)
		go s.close()
		s = nil
	}
	if s == nil {
		if len(p.sessions) >= p.max && !p.evictLocked() {
			p.mu.Unlock()
			return nil, nil, errMCPSessions
		}
		s = &mcpSession{key: key, ready: make(chan struct{}), closed: make(chan struct{})}
		p.sessions[key] = s
		go p.dial(s, dial)
	}
	s.inflight++
	s.lastUsed = time.Now()
	p.mu.Unlock()
	release := func() {
		p.mu.Lock()
		s.inflight--
		s.lastUsed = time.Now()
		p.mu.Unlock()
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
	if s.err != nil {
		release()
		p.drop(s)
		return nil, nil, s.err
	}
	return s, release, nil
}

// errMCPSessions is acquire's refusal when every session is in use.
var errMCPSessions = errors.New("too many upstream MCP sessions in use")

// evictLocked closes the session idle longest (none in flight); false
// if every session is in use. p.mu is held.
func (p *mcpPool) evictLocked() bool {
	var oldest *mcpSession
	for _, s := range p.sessions {
		if s.inflight == 0 && (oldest == nil || s.lastUsed.Before(oldest.lastUsed)) {
			oldest = s
		}
	}
	if oldest == nil {
		return false
	}
	delete(p.sessions, oldest.key)
	go oldest.close()
	return true
}

// dial starts s's session and watches it: once the upstream ends it (a
// stdio server exits), the session is dropped.
func (p *mcpPool) dial(s *mcpSession, dial func(ctx context.Context) (*mcp.ClientSession, *exec.Cmd, error)) {
	ctx, cancel := context.WithTimeout(p.life, mcpDialTimeout)
	defer cancel()
	s.cs, s.cmd, s.err = dial(ctx)
	close(s.ready)
	if s.err != nil {
		return
	}
	go func() {
		_ = s.cs.Wait()
		s.dead.Store(true)
		p.drop(s)
	}()
}

// drop removes s from the pool, if it is still there, and closes it.
func (p *mcpPool) drop(s *mcpSession) {
	p.mu.Lock()
	if p.sessions[s.key] == s {
		delete(p.sessions, s.key)
	}
	p.mu.Unlock()
	s.close()
}

// close ends the session once: its connection closed and, for a stdio
// server, its process reaped, its group killed if it has not exited
// within mcpTerminateGrace (and after, for what it left behind). It
// waits for a dial in progress.
func (s *mcpSession) close() {
	s.once.Do(func() {
		defer close(s.closed)
		<-s.ready
		if s.cs != nil {
			_ = s.cs.Close() // closes the server's stdin
		}
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		pgid := s.cmd.Process.Pid
		select {
		case <-done:
		case <-time.After(mcpTerminateGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		// Whatever the server started in its group goes with it.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	<-s.closed
}

// mcpTarget is an MCP upstream with its secrets filled in: what a
// session is started with.
type mcpTarget struct {
	m       *MCPUpstream
	env     []string
	headers map[string]string
}

// key is the pool's key of the target's session for tenant: a digest of
// everything the session is started with.
func (t mcpTarget) key(tenant string) string {
	h := sha256.New()
	w := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) }
	w(tenant)
	w(t.m.Command)
	w(strings.Join(t.m.Args, "\x00"))
	w(strings.Join(t.env, "\x00"))
	w(t.m.URL)
	for _, k := range slices.Sorted(mapsKeys(t.headers)) {
		w(k)
		w(t.headers[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// mcpTarget fills the secrets of the tool's MCP upstream in (revealed
// for this call: scrubbed from what it returns and wiped when it ends).
func (cl *call) mcpTarget(ctx context.Context) (mcpTarget, error) {
	m := cl.tool.Upstream.MCP
	if m == nil {
		return mcpTarget{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s has no MCP upstream", cl.name)
	}
	t := mcpTarget{m: m}
	secret := func(name string) (string, error) {
		v, err := cl.reveal(ctx, name)
		if err != nil {
			return "", err
		}
		// exec and net/http keep these as strings, which cannot be
		// wiped; the Value itself is wiped when the call ends.
		return string(v.Bytes()), nil
	}
	noArgs := func(string) (string, error) { return "", errors.New("only secrets may stand here") }
	if m.Stdio() {
		hasPath := false
		for _, k := range sortedKeys(m.Env) {
			v, err := expand(m.Env[k], noArgs, secret)
			if err != nil {
				return mcpTarget{}, cl.templateError("env "+k, err)
			}
			if strings.ContainsRune(v, 0) {
				return mcpTarget{}, failure(StageUpstream, errdefs.ErrInvalidArgument, "tool %s: env %s would hold a NUL (from a secret)", cl.name, k)
			}
			hasPath = hasPath || k == "PATH"
			t.env = append(t.env, k+"="+v)
		}
		if !hasPath {
			t.env = append(t.env, "PATH="+mcpDefaultPath)
		}
		return t, nil
	}
	t.headers = make(map[string]string, len(m.Headers))
	for k, tmpl := range m.Headers {
		v, err := expand(tmpl, noArgs, secret)
		if err != nil {
			return mcpTarget{}, cl.templateError("header "+k, err)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			return mcpTarget{}, failure(StageUpstream, errdefs.ErrInvalidArgument, "tool %s: header %s would hold a control character (from a secret)", cl.name, k)
		}
		t.headers[k] = v
	}
	return t, nil
}

// dial starts a session with the target: a stdio server's process (in
// its own process group, killed if the daemon dies, with only t.env for
// environment and / for directory, its stderr discarded), or a
// Streamable HTTP session through the pool's guarded transport, with
// t.headers on every request, no redirect followed and every answer
// capped at maxMsg bytes.
func (p *mcpPool) dialTarget(t mcpTarget) func(ctx context.Context) (*mcp.ClientSession, *exec.Cmd, error) {
	return func(ctx context.Context) (*mcp.ClientSession, *exec.Cmd, error) {
		if !t.m.Stdio() {
			hc := &http.Client{
				Transport:     &mcpHTTPTransport{base: p.http, headers: t.headers, max: int64(p.maxMsg)},
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
			tr := &mcp.StreamableClientTransport{
				Endpoint: t.m.URL, HTTPClient: hc, MaxRetries: -1,
				// Every call lists the tools itself; no stream stays open.
				DisableStandaloneSSE: true,
				MaxEventSize:         p.maxMsg,
			}
			cs, err := p.client.Connect(ctx, tr, nil)
			return cs, nil, err
		}
		cmd := exec.Command(t.m.Command, t.m.Args...)
		cmd.Env = t.env
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, &mcpStartError{err: err}
		}
		cs, err := p.client.Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin, MaxLineLength: p.maxMsg}, nil)
		if err != nil {
			_ = stdin.Close()
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, nil, err
		}
		return cs, cmd, nil
	}
}

// mcpStartError is a stdio server's command that could not be started.
type mcpStartError struct{ err error }

func (e *mcpStartError) Error() string { return "start: " + e.err.Error() }
func (e *mcpStartError) Unwrap() error { return e.err }

// mcpHTTPTransport adds an upstream's headers to every request of its
// session and caps every answer's body.
type mcpHTTPTransport struct {
	base    http.RoundTripper
	headers map[string]string
	max     int64
}

func (t *mcpHTTPTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	r.Header.Set("User-Agent", "airlock-gateway")
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, left: t.max}
	return resp, nil
}

// cappedBody fails a read past its cap.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("the upstream's answer is over the size limit")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// mcpCall calls the tool's MCP upstream with args, within timeout: it
// takes (or starts) the upstream's session, lists the upstream tool and
// refuses the call if it is not as pinned, then calls it. Its errors
// are *stageError.
func (cl *call) mcpCall(ctx context.Context, args map[string]any, timeout time.Duration) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := cl.tool.Upstream.MCP
	if m == nil {
		return answer{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s has no MCP upstream", cl.name)
	}
	if m.Pinned == nil {
		e := refuse(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s's upstream tool was never pinned: re-register the tool", cl.name)
		e.ignore = true
		return answer{}, e
	}
	s, release, err := cl.mcpSession(ctx, timeout)
	if err != nil {
		return answer{}, err
	}
	defer release()
	name := m.ToolName(cl.name)
	listed, err := listMCPTool(ctx, s.cs, name)
	if err != nil {
		return answer{}, cl.mcpError(ctx, s, err, timeout)
	}
	if listed == nil {
		e := refuse(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s: the upstream no longer lists tool %s: re-register to accept the change", cl.name, clip(name))
		e.ignore = true
		return answer{}, e
	}
	if what := pinOf(listed, time.Time{}).differs(*m.Pinned); what != "" {
		e := refuse(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s: the upstream tool changed since it was registered (%s): re-register to accept", cl.name, what)
		e.ignore = true
		return answer{}, e
	}
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return answer{}, cl.mcpError(ctx, s, err, timeout)
	}
	if res.IsError {
		text := cl.scrub([]byte(mcpText(res)))
		if len(text) == 0 {
			text = []byte("no message")
		}
		// The upstream answered: no fault of its circuit.
		return answer{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s's upstream reported an error: %q", cl.name, shorten(string(text), mcpMaxErrorText))
	}
	body, err := mcpResult(res)
	if err != nil {
		return answer{}, failure(StageOutput, errdefs.ErrInternal, "the answer of tool %s could not be encoded", cl.name)
	}
	if max := cl.g.cfg.MaxOutputBytes; len(body) > max {
		return answer{}, failure(StageOutput, errdefs.ErrResourceExhausted, "the answer of tool %s is over the limit of %d bytes", cl.name, max)
	}
	return answer{body: body}, nil
}

// mcpSession takes the session of the tool's upstream, started if need
// be, within the call's timeout.
func (cl *call) mcpSession(ctx context.Context, timeout time.Duration) (*mcpSession, func(), error) {
	t, err := cl.mcpTarget(ctx)
	if err != nil {
		return nil, nil, err
	}
	pool := cl.g.mcp
	s, release, err := pool.acquire(ctx, t.key(cl.c.Tenant), pool.dialTarget(t))
	switch {
	case errors.Is(err, errMCPSessions):
		return nil, nil, failure(StageUpstream, errdefs.ErrResourceExhausted, "tool %s: every one of the gateway's %d upstream MCP sessions is in use; retry later", cl.name, pool.max)
	case err != nil:
		return nil, nil, cl.mcpError(ctx, nil, err, timeout)
	}
	return s, release, nil
}

// mcpError turns a failed session or request into the call's error:
// a JSON-RPC error answer is the upstream's refusal (quoted, scrubbed);
// anything else drops the session (the next call starts another) and
// reads like an HTTP upstream's failure.
func (cl *call) mcpError(ctx context.Context, s *mcpSession, err error, timeout time.Duration) error {
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) && rpc.Code != mcpCodeRejected {
		msg := cl.scrub([]byte(rpc.Message))
		return failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s's upstream refused the call: %q", cl.name, shorten(string(msg), mcpMaxErrorText))
	}
	if ctx.Err() == nil && s != nil {
		// The session failed, not the call's time: start another next.
		s.dead.Store(true)
		go cl.g.mcp.drop(s)
	}
	var start *mcpStartError
	if errors.As(err, &start) {
		e := failure(StageUpstream, errdefs.ErrUnavailable, "tool %s's upstream command could not be started", cl.name)
		e.fault = true
		return e
	}
	return cl.transportError(ctx, err, timeout)
}

// mcpCodeRejected is the JSON-RPC code the SDK wraps its transport's
// failures in (jsonrpc2.ErrRejected): not an answer of the upstream.
const mcpCodeRejected = -32005

// listMCPTool returns the upstream's tool name as tools/list shows it,
// nil if it lists none of that name.
func listMCPTool(ctx context.Context, cs *mcp.ClientSession, name string) (*mcp.Tool, error) {
	params := &mcp.ListToolsParams{}
	for range mcpMaxListPages {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if t != nil && t.Name == name {
				return t, nil
			}
		}
		if res.NextCursor == "" {
			return nil, nil
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	return nil, nil
}

// pinOf is the pin of an upstream tool as listed.
func pinOf(t *mcp.Tool, at time.Time) MCPPin {
	p := MCPPin{Title: t.Title, Description: t.Description, InputSchemaSHA256: canonicalSHA256(t.InputSchema), PinnedAt: at}
	if t.Annotations != nil {
		p.Annotations = mcpCanonical(t.Annotations)
	}
	if t.OutputSchema != nil {
		p.OutputSchemaSHA256 = canonicalSHA256(t.OutputSchema)
	}
	return p
}

// differs names what of p (the upstream now) is not as pinned; "" if
// nothing.
func (p MCPPin) differs(pinned MCPPin) string {
	var what []string
	if p.Title != pinned.Title {
		what = append(what, "title")
	}
	if p.Description != pinned.Description {
		what = append(what, "description")
	}
	if !bytes.Equal(mcpCanonical(p.Annotations), mcpCanonical(pinned.Annotations)) {
		what = append(what, "annotations")
	}
	if p.InputSchemaSHA256 != pinned.InputSchemaSHA256 {
		what = append(what, "input schema")
	}
	if p.OutputSchemaSHA256 != pinned.OutputSchemaSHA256 {
		what = append(what, "output schema")
	}
	return strings.Join(what, ", ")
}

// mcpCanonical is v as JSON with object keys sorted (nil for nothing).
func mcpCanonical(v any) []byte {
	if raw, ok := v.(json.RawMessage); ok {
		if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil
		}
		var x any
		if json.Unmarshal(raw, &x) != nil {
			return raw
		}
		v = x
	}
	b, err := json.Marshal(v)
	if err != nil || bytes.Equal(b, []byte("null")) {
		return nil
	}
	var x any
	if json.Unmarshal(b, &x) == nil {
		b, _ = json.Marshal(x) // maps marshal with sorted keys
	}
	return b
}

// canonicalSHA256 is the hex sha256 of mcpCanonical(v).
func canonicalSHA256(v any) string {
	sum := sha256.Sum256(mcpCanonical(v))
	return hex.EncodeToString(sum[:])
}

// mcpText joins the text content of a result.
func mcpText(res *mcp.CallToolResult) string {
	var texts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// mcpResult is a result as the call's answer: its structured content
// if it has any, else its text content joined (JSON if it parses as
// JSON, else a string: see call.output), else its content as a JSON
// array.
func mcpResult(res *mcp.CallToolResult) ([]byte, error) {
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	hasText := slices.ContainsFunc(res.Content, func(c mcp.Content) bool { _, ok := c.(*mcp.TextContent); return ok })
	if hasText {
		return []byte(mcpText(res)), nil
	}
	if len(res.Content) == 0 {
		return []byte("null"), nil
	}
	return json.Marshal(res.Content)
}

// PinMCP returns the pin of t's upstream MCP tool as tenant's upstream
// lists it now, for the registry (StoreRegistry.SetPinner): it starts
// (or reuses) the upstream's session, with the tenant's secrets, within
// t's timeout. An upstream that cannot be reached, or lists no such
// tool, is an error naming it.
func (g *Gateway) PinMCP(ctx context.Context, tenant string, t Tool) (*MCPPin, error) {
	m := t.Upstream.MCP
	if t.Upstream.Kind != UpstreamMCP || m == nil {
		return nil, fmt.Errorf("tool %s has no MCP upstream: %w", t.Name, errdefs.ErrInvalidArgument)
	}
	cl := &call{g: g, c: Caller{Tenant: tenant}, name: t.Name, tool: t, start: time.Now()}
	defer cl.end()
	timeout := time.Duration(min(t.Governance.Timeout(), MaxTimeoutS)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, release, err := cl.mcpSession(ctx, timeout)
	if err != nil {
		return nil, pinError(err)
	}
	defer release()
	name := m.ToolName(t.Name)
	listed, err := listMCPTool(ctx, s.cs, name)
	if err != nil {
		return nil, pinError(cl.mcpError(ctx, s, err, timeout))
	}
	if listed == nil {
		return nil, fmt.Errorf("upstream.mcp.tool: the upstream MCP server lists no tool %q: %w", clip(name), errdefs.ErrInvalidArgument)
	}
	p := pinOf(listed, time.Now().UTC())
	return &p, nil
}

// pinError is a failed pin's error: the stage error's message (fit for
// the caller), with its class.
func pinError(err error) error {
	return errdefs.Publicf(errdefs.Class(err), "the upstream MCP server could not be asked for its tool: %s", msgOf(err))
}

// mcpMaxMessage caps one message from an upstream MCP server: room for
// an answer of maxOutput bytes as JSON text, escaped, in a text block
// and again as structured content.
func mcpMaxMessage(maxOutput int) int { return 4*maxOutput + 64<<10 }
