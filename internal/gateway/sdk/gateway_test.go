package sdk

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The error codes the fake gateway answers for the tool "fail", with
// the HTTP status of each.
var errorCodes = map[string]int{
	"invalid_argument":    http.StatusBadRequest,
	"permission_denied":   http.StatusForbidden,
	"not_found":           http.StatusNotFound,
	"failed_precondition": http.StatusConflict,
	"resource_exhausted":  http.StatusTooManyRequests,
	"rate_limited":        http.StatusTooManyRequests,
	"canceled":            499,
	"internal":            http.StatusInternalServerError,
	"unavailable":         http.StatusServiceUnavailable,
	"timeout":             http.StatusGatewayTimeout,
	"teapot":              http.StatusTeapot, // a code the libraries do not know
}

// fakeTools is what the fake gateway's GET /v1/tools answers.
const fakeTools = `{"tools":[
 {"name":"echo","description":"Echo the arguments back.","input_schema":{"type":"object",
   "properties":{"text":{"type":"string"},"count":{"type":"integer"},"ratio":{"type":"number"},
     "flag":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"}},"meta":{"type":"object"},
     "level":{"enum":["low","high"]},"note":{"type":["string","null"]}},
   "required":["text"],"additionalProperties":false},
  "output_schema":{"type":"object","properties":{"tool":{"type":"string"},"args":{"type":"object"}},"required":["tool"]}},
 {"name":"sleep","description":"Wait 100 ms.","input_schema":{"type":"object"}},
 {"name":"fail","description":"Fail with the code asked for.","input_schema":{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}},
 {"name":"hang","description":"Answer after 10 s.","input_schema":{"type":"object"}},
 {"name":"big","description":"Answer 17 MiB.","input_schema":{"type":"object"}},
 {"name":"garbage","description":"Answer a body that is not JSON.","input_schema":{"type":"object"}},
 {"name":"bare","description":"Answer 500 without an error body.","input_schema":{"type":"object"}},
 {"name":"keyword_args","description":"Has an argument named from.","input_schema":{"type":"object","properties":{"from":{"type":"string"}}}},
 {"name":"time","description":"Named like a module the libraries use.","input_schema":{"type":"object"}}
]}`

// fakeGateway implements the gateway endpoint's protocol with the tools
// of fakeTools, and counts what it saw.
type fakeGateway struct {
	srv      *httptest.Server
	inFlight atomic.Int32
	maxSleep atomic.Int32 // most sleep calls in flight at once
	calls    atomic.Int32
	conns    atomic.Int32 // connections opened
	bad      atomic.Value // the first protocol violation seen, a string
}

// newFakeGateway starts one; idle, when not 0, is how long it keeps an
// idle connection open.
func newFakeGateway(t *testing.T, idle time.Duration) *fakeGateway {
	g := &fakeGateway{}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(g.serve))
	g.srv.Config.IdleTimeout = idle
	g.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			g.conns.Add(1)
		}
	}
	g.srv.Start()
	t.Cleanup(func() {
		g.srv.CloseClientConnections()
		g.srv.Close()
		if v, _ := g.bad.Load().(string); v != "" {
			t.Errorf("the fake gateway saw a bad request: %s", v)
		}
	})
	return g
}

func (g *fakeGateway) fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (g *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/tools":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(fakeTools))
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/call":
	default:
		g.bad.CompareAndSwap(nil, r.Method+" "+r.URL.String())
		g.fail(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		g.bad.CompareAndSwap(nil, "content type "+ct)
	}
	var req struct {
		Tool string         `json:"tool"`
		Args map[string]any `json:"args"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.Args == nil {
		g.bad.CompareAndSwap(nil, fmt.Sprintf("call body: %v (args %v)", err, req.Args))
		g.fail(w, http.StatusBadRequest, "invalid_argument", "bad body")
		return
	}
	g.calls.Add(1)
	w.Header().Set("Content-Type", "application/json")
	switch req.Tool {
	case "echo", "keyword_args", "time":
		_ = json.NewEncoder(w).Encode(map[string]any{"result": map[string]any{"tool": req.Tool, "args": req.Args}})
	case "sleep":
		n := g.inFlight.Add(1)
		for {
			m := g.maxSleep.Load()
			if n <= m || g.maxSleep.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
		g.inFlight.Add(-1)
		_, _ = w.Write([]byte(`{"result":{"slept":true}}`))
	case "fail":
		code, _ := req.Args["code"].(string)
		status, ok := errorCodes[code]
		if !ok {
			status = http.StatusInternalServerError
		}
		g.fail(w, status, code, "refused: "+code)
	case "hang":
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		_, _ = w.Write([]byte(`{"result":null}`))
	case "big":
		_, _ = w.Write([]byte(`{"result":"`))
		_, _ = w.Write([]byte(strings.Repeat("x", 17<<20)))
		_, _ = w.Write([]byte(`"}`))
	case "garbage":
		_, _ = w.Write([]byte("<html>not json</html>"))
	case "bare":
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{}`))
	default:
		g.fail(w, http.StatusForbidden, "permission_denied", "tool "+req.Tool+" is not granted to this sandbox")
	}
}

// deadProxy is a listener that stands for an HTTP proxy set in the
// sandbox's environment: it counts the connections made to it and
// closes them, so a library that used it would fail and be caught.
type deadProxy struct {
	ln   net.Listener
	hits atomic.Int32
}

func newDeadProxy(t *testing.T) *deadProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &deadProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.hits.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		if n := p.hits.Load(); n > 0 {
			t.Errorf("%d connections went to the HTTP proxy; the libraries must bypass it", n)
		}
	})
	return p
}

// requireInterpreter returns the path of an interpreter the tests run
// the libraries with. CI installs them (.ci/run); where one is missing
// the test skips, unless AIRLOCK_REQUIRE_SDK_TESTS is set.
func requireInterpreter(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("AIRLOCK_REQUIRE_SDK_TESTS") != "" {
			t.Fatalf("%s is not installed and AIRLOCK_REQUIRE_SDK_TESTS is set: %v", name, err)
		}
		t.Skipf("%s is not installed (apt-get install python3 nodejs): the in-sandbox libraries cannot be run", name)
	}
	return p
}

// sdkEnv is a sandbox's view: the libraries written by WriteDir into
// lib, the gateway's URL, and every proxy variable pointing at a proxy
// that must not be used.
type sdkEnv struct {
	lib string
	gw  *fakeGateway
	env []string
}

func newSDKEnv(t *testing.T, idle time.Duration) *sdkEnv {
	lib := filepath.Join(t.TempDir(), "lib")
	if err := WriteDir(lib); err != nil {
		t.Fatal(err)
	}
	gw := newFakeGateway(t, idle)
	proxy := "http://" + newDeadProxy(t).ln.Addr().String()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "NODE_USE_ENV_PROXY", "NODE_OPTIONS",
			"PYTHONPATH", "NODE_PATH", "AIRLOCK_TOOLS_URL", "AIRLOCK_TOOLS_TIMEOUT", "PYTHONSTARTUP":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"AIRLOCK_TOOLS_URL="+gw.srv.URL,
		"PYTHONPATH="+filepath.Join(lib, "python"),
		"PYTHONDONTWRITEBYTECODE=1",
		"NODE_PATH="+filepath.Join(lib, "node"),
		"HTTP_PROXY="+proxy, "http_proxy="+proxy, "HTTPS_PROXY="+proxy, "https_proxy="+proxy,
		"ALL_PROXY="+proxy, "all_proxy="+proxy, "NO_PROXY=", "no_proxy=", "NODE_USE_ENV_PROXY=1",
	)
	return &sdkEnv{lib: lib, gw: gw, env: env}
}

// run runs argv with the sandbox's environment and stdin, under a
// minute's timeout, and returns its stdout, stderr and exit status.
func (e *sdkEnv) run(t *testing.T, stdin string, argv ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = e.env
	cmd.Dir = t.TempDir()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not finish within a minute; stderr:\n%s", argv, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// script writes a program into a file of its own and runs it with
// interp, failing the test unless it exits 0 and prints "ok" last.
func (e *sdkEnv) script(t *testing.T, interp, name, src string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.run(t, "", interp, p)
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "ok") {
		t.Fatalf("%s exited %d\nstdout:\n%s\nstderr:\n%s", name, code, out, errOut)
	}
}

// codesJSON is errorCodes' keys as a JSON list, for the scripts.
func codesJSON(t *testing.T) string {
	var codes []string
	for c := range errorCodes {
		codes = append(codes, c)
	}
	b, err := json.Marshal(codes)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkConcurrency checks, after the cases that make 100 concurrent
// calls (threads, asyncio, concurrent), that the gateway saw them all in
// flight at once: a client that queued them (a small thread pool or
// socket pool) would still finish fast enough to pass a time check.
func checkConcurrency(t *testing.T, name string, g *fakeGateway) {
	t.Helper()
	switch name {
	case "threads", "asyncio", "concurrent":
	default:
		return
	}
	if n := g.maxSleep.Load(); n < 90 {
		t.Errorf("at most %d of 100 concurrent calls were in flight at once, want at least 90", n)
	}
}
