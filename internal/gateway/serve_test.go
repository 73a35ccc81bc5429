package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fakeCalls records the calls it gets and answers them: tool "echo"
// returns its args, "fail" the error err, "slow" its args after delay.
type fakeCalls struct {
	mu    sync.Mutex
	calls []fakeCall
	err   error
	delay time.Duration
}

type fakeCall struct {
	Caller Caller
	Tool   string
	Args   string
}

func (f *fakeCalls) Granted(ctx context.Context, c Caller) ([]Tool, error) {
	var out []Tool
	for _, name := range c.Tools {
		out = append(out, Tool{Owner: c.Tenant, Name: name, Description: "the " + name + " tool",
			InputSchema: json.RawMessage(`{"type":"object"}`),
			Upstream:    Upstream{Kind: UpstreamHTTP, HTTP: &HTTPUpstream{Method: "GET", URL: "http://upstream.example/{secret.KEY}"}}})
	}
	return out, nil
}

func (f *fakeCalls) Call(ctx context.Context, c Caller, name string, args json.RawMessage) (Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{c, name, string(args)})
	f.mu.Unlock()
	switch name {
	case "fail":
		return Result{}, f.err
	case "slow":
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return Result{}, fmt.Errorf("call: %w", errdefs.ErrCanceled)
		}
	case "nothing":
		return Result{}, nil
	}
	return Result{Output: args}, nil
}

func (f *fakeCalls) last(t *testing.T) fakeCall {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		t.Fatal("no call reached the gateway")
	}
	return f.calls[len(f.calls)-1]
}

var testCaller = Caller{Tenant: "acme", Sandbox: "sb-aaaaaaaaaaaaaaaa", KeyID: "key-1", Tools: []string{"echo", "slow"}}

func do(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: content type %q", method, path, ct)
	}
	return w.Code, w.Body.String()
}

func TestHandlerList(t *testing.T) {
	h := Handler(&fakeCalls{}, testCaller)
	code, body := do(t, h, "GET", "/v1/tools", "", nil)
	if code != 200 {
		t.Fatalf("GET /v1/tools = %d %s", code, body)
	}
	var list ToolList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 2 || list.Tools[0].Name != "echo" || list.Tools[1].Name != "slow" || string(list.Tools[0].InputSchema) != `{"type":"object"}` {
		t.Errorf("tools = %+v", list.Tools)
	}
	// Nothing of the upstream (which may name secrets) or governance.
	for _, leak := range []string{"upstream", "secret", "governance", "owner"} {
		if strings.Contains(body, leak) {
			t.Errorf("the list shows %q: %s", leak, body)
		}
	}
	// An empty grant is an empty list, not null.
	_, body = do(t, Handler(&fakeCalls{}, Caller{Sandbox: "sb-x"}), "GET", "/v1/tools", "", nil)
	if strings.TrimSpace(body) != `{"tools":[]}` {
		t.Errorf("empty list = %s", body)
	}
}

func TestHandlerCall(t *testing.T) {
	f := &fakeCalls{}
	h := Handler(f, testCaller)
	code, body := do(t, h, "POST", "/v1/call", `{"tool":"echo","args":{"a":[1,2]}}`, nil)
	if code != 200 || strings.TrimSpace(body) != `{"result":{"a":[1,2]}}` {
		t.Fatalf("call = %d %s", code, body)
	}
	if c := f.last(t); c.Tool != "echo" || c.Args != `{"a":[1,2]}` || c.Caller.Sandbox != testCaller.Sandbox || c.Caller.Tenant != "acme" || c.Caller.KeyID != "key-1" {
		t.Errorf("the gateway got %+v", c)
	}
	// No args are {}; no output is null.
	code, body = do(t, h, "POST", "/v1/call", `{"tool":"nothing"}`, nil)
	if code != 200 || strings.TrimSpace(body) != `{"result":null}` || f.last(t).Args != "{}" {
		t.Errorf("call without args = %d %s (args %s)", code, body, f.last(t).Args)
	}
}

// The caller is the one the handler was made for, whatever the request
// claims.
func TestHandlerCallerNotSpoofable(t *testing.T) {
	f := &fakeCalls{}
	h := Handler(f, testCaller)
	code, body := do(t, h, "POST", "/v1/call", `{"tool":"echo","args":{}}`, map[string]string{
		"X-Airlock-Sandbox": "sb-bbbbbbbbbbbbbbbb", "X-Airlock-Tenant": "other", "Authorization": "Bearer key-2",
	})
	if code != 200 {
		t.Fatalf("call = %d %s", code, body)
	}
	if c := f.last(t); c.Caller.Sandbox != testCaller.Sandbox || c.Caller.Tenant != "acme" || c.Caller.KeyID != "key-1" {
		t.Errorf("headers changed the caller: %+v", c.Caller)
	}
	n := len(f.calls)
	code, body = do(t, h, "POST", "/v1/call", `{"tool":"echo","args":{},"sandbox":"sb-bbbbbbbbbbbbbbbb"}`, nil)
	if code != 400 || !strings.Contains(body, `"invalid_argument"`) || !strings.Contains(body, "sandbox") {
		t.Errorf("a body naming a sandbox = %d %s, want 400", code, body)
	}
	if len(f.calls) != n {
		t.Error("a refused body reached the gateway")
	}
}

func TestHandlerRefusals(t *testing.T) {
	f := &fakeCalls{}
	h := Handler(f, testCaller)
	for _, tt := range []struct {
		method, path, body string
		status             int
		code, msg          string
	}{
		{"POST", "/v1/call", ``, 400, "invalid_argument", "empty"},
		{"POST", "/v1/call", `{"tool":`, 400, "invalid_argument", "not a valid call"},
		{"POST", "/v1/call", `{"tool":"echo"} {}`, 400, "invalid_argument", "after its JSON object"},
		{"POST", "/v1/call", `{"args":{}}`, 400, "invalid_argument", "names no tool"},
		{"POST", "/v1/call", `{"tool":"echo","args":[1]}`, 400, "invalid_argument", "must be a JSON object"},
		{"POST", "/v1/call", `{"tool":"echo","args":"x"}`, 400, "invalid_argument", "must be a JSON object"},
		{"POST", "/v1/call", `{"tool":"` + strings.Repeat("x", 300) + `"}`, 400, "invalid_argument", "at most 256"},
		{"POST", "/v1/call", `{"tool":"echo","args":{"x":"` + strings.Repeat("x", MaxCallBytes) + `"}}`, 413, "request_too_large", "1048576"},
		{"GET", "/v1/call", ``, 405, "method_not_allowed", "POST"},
		{"POST", "/v1/tools", ``, 405, "method_not_allowed", "GET"},
		{"GET", "/v1/other", ``, 404, "not_found", "/v1/tools"},
	} {
		code, body := do(t, h, tt.method, tt.path, tt.body, nil)
		var e ErrorResponse
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Errorf("%s %s %.40s: %d %s", tt.method, tt.path, tt.body, code, body)
			continue
		}
		if code != tt.status || e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.msg) {
			t.Errorf("%s %s %.40s = %d %+v, want %d %s (%q)", tt.method, tt.path, tt.body, code, e.Error, tt.status, tt.code, tt.msg)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("refused requests reached the gateway: %+v", f.calls)
	}
}

// The gateway's errors reach the program with the REST API's codes; an
// internal one says nothing of the host.
func TestHandlerErrors(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{fmt.Errorf("tool fail is not granted to this sandbox: %w", errdefs.ErrPermissionDenied), 403, "permission_denied", "tool fail is not granted to this sandbox: permission denied"},
		{fmt.Errorf("args.id: want a string: %w", errdefs.ErrInvalidArgument), 400, "invalid_argument", "args.id: want a string"},
		{fmt.Errorf("rate of 10 calls a minute exceeded: %w", errdefs.ErrResourceExhausted), 429, "resource_exhausted", "rate of 10 calls a minute exceeded"},
		{fmt.Errorf("approval timed out: %w", errdefs.ErrTimeout), 504, "timeout", "approval timed out"},
		{fmt.Errorf("open /var/lib/airlock/secrets: broken"), 500, "internal", "internal error"},
	} {
		f := &fakeCalls{err: tt.err}
		code, body := do(t, Handler(f, testCaller), "POST", "/v1/call", `{"tool":"fail","args":{}}`, nil)
		var e ErrorResponse
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != tt.status || e.Error.Code != tt.code || e.Error.Message != tt.msg {
			t.Errorf("%v: %d %s, want %d %s %q", tt.err, code, body, tt.status, tt.code, tt.msg)
		}
	}
}

// Calls over one server run side by side, over kept-alive connections.
func TestHandlerConcurrent(t *testing.T) {
	f := &fakeCalls{delay: 200 * time.Millisecond}
	srv := httptest.NewServer(Handler(f, testCaller))
	defer srv.Close()
	const n = 50
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			resp, err := http.Post(srv.URL+"/v1/call", "application/json", strings.NewReader(fmt.Sprintf(`{"tool":"slow","args":{"i":%d}}`, i)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf(`{"result":{"i":%d}}`, i); resp.StatusCode != 200 || strings.TrimSpace(string(b)) != want {
				errs <- fmt.Errorf("call %d = %d %s", i, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if took := time.Since(start); took > 10*200*time.Millisecond {
		t.Errorf("%d calls of 200 ms took %v: serialized", n, took)
	}
}
