package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// toolsRuntime wraps the fake runtime so that its instances have a tools
// socket (runtime.Tools) in dir, one per sandbox, which a test dials as
// the sandbox's bridge would.
type toolsRuntime struct {
	runtime.Runtime
	dir string
}

func (r toolsRuntime) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	inst, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return toolsInstance{inst, r.dir}, nil
}

func (r toolsRuntime) Recover(ctx context.Context) ([]runtime.Instance, error) {
	insts, err := r.Runtime.Recover(ctx)
	for i, inst := range insts {
		insts[i] = toolsInstance{inst, r.dir}
	}
	return insts, err
}

type toolsInstance struct {
	runtime.Instance
	dir string
}

func (i toolsInstance) ListenTools() (net.Listener, error) {
	path := filepath.Join(i.dir, i.ID()+".sock")
	os.Remove(path)
	return net.Listen("unix", path)
}

// recordingCalls is a gateway that answers every call with who made it.
type recordingCalls struct {
	mu    sync.Mutex
	calls []gateway.Caller
}

func (g *recordingCalls) Granted(ctx context.Context, c gateway.Caller) ([]gateway.Tool, error) {
	var out []gateway.Tool
	for _, n := range c.Tools {
		out = append(out, gateway.Tool{Name: n, InputSchema: json.RawMessage(`{}`)})
	}
	return out, nil
}

func (g *recordingCalls) Call(ctx context.Context, c gateway.Caller, name string, args json.RawMessage) (gateway.Result, error) {
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"tenant": c.Tenant, "sandbox": c.Sandbox, "key": c.KeyID, "tools": c.Tools, "tool": name})
	return gateway.Result{Output: out}, nil
}

// toolsEnvT is an env whose sandboxes have tools sockets in sockDir.
type toolsEnvT struct {
	*env
	sockDir string
	gw      *recordingCalls
}

func newToolsEnv(t *testing.T) *toolsEnvT {
	t.Helper()
	e := newEnv(t)
	// Unix socket paths are short: a directory of its own under /tmp.
	dir, err := os.MkdirTemp("", "tools")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &toolsEnvT{env: e, sockDir: dir, gw: &recordingCalls{}}
}

// manager starts a manager (recovering what a previous one left) over
// the tools runtime, with gw as its gateway.
func (e *toolsEnvT) manager(gw gateway.Calls, cfg Config) *Manager {
	e.t.Helper()
	cfg.StateDir, cfg.HealthInterval, cfg.Gateway = e.stateDir, -1, gw
	m, err := New(toolsRuntime{e.rt, e.sockDir}, e.templates, cfg, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = m.Close(context.Background()) })
	if err := m.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitRecovered(ctx); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// call posts body to sandbox id's tools socket with the headers hdr, as
// code in the sandbox would through its bridge.
func (e *toolsEnvT) call(id, body string, hdr map[string]string) (int, string, error) {
	sock := filepath.Join(e.sockDir, id+".sock")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest("POST", "http://"+runtime.ToolsBridgeAddr+"/v1/call", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// Each sandbox's calls reach the gateway as that sandbox, its tenant,
// its key and its grants, whatever the request claims.
func TestToolsCallerPerSandbox(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(e.gw, Config{})
	a, err := m.Create(ctx, Spec{Owner: "acme", KeyID: "key-a", Tools: []string{"search", "echo", "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, Spec{Owner: "globex", KeyID: "key-b", Tools: []string{"other"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Tools, ",") != "echo,search" {
		t.Errorf("granted tools = %q, want sorted without duplicates", a.Tools)
	}
	want := map[string]string{
		a.ID: fmt.Sprintf(`{"result":{"key":"key-a","sandbox":%q,"tenant":"acme","tool":"echo","tools":["echo","search"]}}`, a.ID),
		b.ID: fmt.Sprintf(`{"result":{"key":"key-b","sandbox":%q,"tenant":"globex","tool":"echo","tools":["other"]}}`, b.ID),
	}
	for id, w := range want {
		other := a.ID
		if id == a.ID {
			other = b.ID
		}
		// A header naming the other sandbox, tenant or key changes nothing.
		status, body, err := e.call(id, `{"tool":"echo","args":{}}`, map[string]string{
			"X-Airlock-Sandbox": other, "X-Airlock-Tenant": "acme", "Authorization": "Bearer key-a"})
		if err != nil || status != 200 || body != w {
			t.Errorf("call from %s = %d %s %v, want %s", id, status, body, err, w)
		}
		// A body naming another sandbox is refused before the gateway.
		n := len(e.gw.calls)
		status, body, err = e.call(id, fmt.Sprintf(`{"tool":"echo","args":{},"sandbox":%q}`, other), nil)
		if err != nil || status != 400 || !strings.Contains(body, "invalid_argument") {
			t.Errorf("call claiming %s from %s = %d %s %v, want 400", other, id, status, body, err)
		}
		if len(e.gw.calls) != n {
			t.Error("a call claiming another sandbox reached the gateway")
		}
	}
}

// The grants and the creating key are kept with the sandbox: a
// restarted daemon serves the same; between the two nothing listens.
func TestToolsGrantsAfterRestart(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(e.gw, Config{})
	sb, err := m.Create(ctx, Spec{Owner: "acme", KeyID: "key-a", Tools: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.call(sb.ID, `{"tool":"echo"}`, nil); err == nil {
		t.Error("a closed manager still serves the tools socket")
	}
	m2 := e.manager(e.gw, Config{})
	got, err := m2.Get(sb.ID)
	if err != nil || strings.Join(got.Tools, ",") != "echo" {
		t.Fatalf("adopted sandbox's tools = %q, %v", got.Tools, err)
	}
	status, body, err := e.call(sb.ID, `{"tool":"echo"}`, nil)
	w := fmt.Sprintf(`{"result":{"key":"key-a","sandbox":%q,"tenant":"acme","tool":"echo","tools":["echo"]}}`, sb.ID)
	if err != nil || status != 200 || body != w {
		t.Errorf("call after restart = %d %s %v, want %s", status, body, err, w)
	}
}

// Destroy stops the server and removes the socket; a call in flight
// ends with it.
func TestToolsStoppedAtDestroy(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(e.gw, Config{})
	sb, err := m.Create(ctx, Spec{Owner: "acme", Tools: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err := e.call(sb.ID, `{"tool":"echo"}`, nil); err != nil || status != 200 {
		t.Fatalf("call = %d %v", status, err)
	}
	m.mu.Lock()
	rec := m.records[sb.ID]
	m.mu.Unlock()
	// An idle kept-alive connection is closed by the destroy.
	idle, err := net.Dial("unix", filepath.Join(e.sockDir, sb.ID+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if rec.tools.serving() {
		t.Error("the tools server still runs after destroy")
	}
	if _, _, err := e.call(sb.ID, `{"tool":"echo"}`, nil); err == nil {
		t.Error("a destroyed sandbox's tools socket still answers")
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Errorf("an open connection survived the destroy: %d %v", n, err)
	}
}

// Without a gateway nothing listens; a runtime without tools sockets
// refuses a sandbox granted tools and makes one granted none.
func TestToolsWithoutGatewayOrSocket(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(nil, Config{})
	sb, err := m.Create(ctx, Spec{Tools: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.sockDir, sb.ID+".sock")); err == nil {
		t.Error("a manager without a gateway made a tools socket")
	}

	plain := newEnv(t).manager(Config{Gateway: e.gw})
	if _, err := plain.Create(ctx, Spec{Tools: []string{"echo"}}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("granting tools on a runtime without tools sockets = %v, want not supported", err)
	}
	if n := len(plain.List(Filter{Live: true})); n != 0 {
		t.Errorf("%d sandboxes left after the refused create", n)
	}
	if _, err := plain.Create(ctx, Spec{}); err != nil {
		t.Errorf("a sandbox without tools on a runtime without tools sockets: %v", err)
	}
}

// A pooled sandbox gets its grants at the claim.
func TestToolsPooled(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(e.gw, Config{PoolSize: map[string]int{"host": 1}})
	eventually(t, 10*time.Second, "the pool to fill", func() bool { return m.PoolStats()[0].Ready == 1 })
	sb, err := m.Create(ctx, Spec{Owner: "acme", Tools: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	status, body, err := e.call(sb.ID, `{"tool":"echo"}`, nil)
	if err != nil || status != 200 || !strings.Contains(body, `"tools":["echo"]`) || !strings.Contains(body, sb.ID) {
		t.Errorf("call from a pooled sandbox = %d %s %v", status, body, err)
	}
}

func TestToolsSpecChecks(t *testing.T) {
	ctx := context.Background()
	m := newToolsEnv(t).manager(nil, Config{})
	many := make([]string, MaxTools+1)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	for _, tools := range [][]string{many, {""}, {"a\x00b"}, {strings.Repeat("x", MaxKeyBytes+1)}} {
		if _, err := m.Create(ctx, Spec{Tools: tools}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("tools %.40q: %v, want invalid argument", tools, err)
		}
	}
	if _, err := m.Create(ctx, Spec{KeyID: "k\x00"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("key id with NUL: %v", err)
	}
}

// Every process gets AIRLOCK_TOOLS_URL, whatever the network mode, and
// the proxy settings of allowlist mode leave its address alone.
func TestToolsEnv(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(nil, Config{})
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = m.Exec(ctx, sb.ID, agentclient.ExecRequest{Shell: `echo "$AIRLOCK_TOOLS_URL"`, Stdout: &out})
	skipWithoutProcesses(t, err)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "http://127.0.0.1:3129" {
		t.Errorf("AIRLOCK_TOOLS_URL = %q", got)
	}
	if !strings.Contains(proxyEnv["NO_PROXY"], "127.0.0.1") || !strings.Contains(proxyEnv["no_proxy"], "127.0.0.1") {
		t.Errorf("NO_PROXY %q does not exempt the tools address", proxyEnv["NO_PROXY"])
	}
}

// A connection beyond the cap waits, and gets in when a connection kept
// alive idle is closed for it.
func TestConnLimiter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := newConnLimiter(ln, 2)
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ConnState: cl.connState,
	}
	go srv.Serve(cl)
	defer srv.Close()
	get := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if !bytes.Contains(buf[:n], []byte("ok")) {
			return fmt.Errorf("answer %q", buf[:n])
		}
		return nil
	}
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := get(c); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// Both slots hold idle kept-alive connections: a third waits, and
	// gets in once they are closed for it.
	third, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	start := time.Now()
	if err := get(third); err != nil {
		t.Fatalf("the third connection: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the third connection waited %v", d)
	}
	conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); err == nil {
		t.Error("an idle connection was not closed for the waiting one")
	}
	// At the cap with every connection busy, nothing more is accepted.
	cl.mu.Lock()
	waiting := cl.waiting
	cl.mu.Unlock()
	if waiting != 0 || len(cl.slots) > 2 {
		t.Errorf("waiting %d, slots %d", waiting, len(cl.slots))
	}
}
