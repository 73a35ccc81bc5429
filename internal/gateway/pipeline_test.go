package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// memRegistry is a Registry over a map, counting lookups.
type memRegistry struct {
	mu      sync.Mutex
	tools   map[string]Tool // by tenant "/" name
	lookups atomic.Int64
}

func (r *memRegistry) Tool(_ context.Context, tenant, name string) (Tool, error) {
	r.lookups.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tools[tenant+"/"+name]
	if !ok {
		return Tool{}, fmt.Errorf("tool %s: %w", name, errdefs.ErrNotFound)
	}
	return t, nil
}

func (r *memRegistry) Toolset(_ context.Context, tenant, name string) (Toolset, error) {
	return Toolset{}, fmt.Errorf("toolset %s: %w", name, errdefs.ErrNotFound)
}

func (r *memRegistry) put(t Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]Tool{}
	}
	if t.Owner == "" {
		t.Owner = "tenant-a"
	}
	r.tools[t.Owner+"/"+t.Name] = t
}

// memSecrets is a SecretReader over a map; it keeps the values it
// handed out, to check that they were wiped.
type memSecrets struct {
	mu     sync.Mutex
	values map[string]string
	given  []secrets.Value
}

func (m *memSecrets) Reveal(_ context.Context, tenant, name string) (secrets.Value, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.values[tenant+"/"+name]
	if !ok {
		return secrets.Value{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	v := secrets.NewValue([]byte(s))
	m.given = append(m.given, v)
	return v, nil
}

// recorder keeps the records a gateway hands out.
type recorder struct {
	mu   sync.Mutex
	recs []Record
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *recorder) all() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

func (r *recorder) last(t *testing.T) Record {
	t.Helper()
	all := r.all()
	if len(all) == 0 {
		t.Fatal("no record")
	}
	return all[len(all)-1]
}

// echoed is what echoServer answers: the request it got.
type echoed struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	RawPath string            `json:"raw_path"`
	Query   string            `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// echoServer answers every request with the request (echoed), after
// delay; hits counts them.
func echoServer(t *testing.T, delay time.Duration, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		b, _ := io.ReadAll(r.Body)
		e := echoed{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery, Headers: map[string]string{}, Body: string(b)}
		for k := range r.Header {
			e.Headers[k] = r.Header.Get(k)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(e)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// allowLoopback is the tests' Config.AllowUpstream: 127.0.0.1 only.
func allowLoopback(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }

const objSchema = `{"type":"object"}`

// harness is a gateway over a memRegistry, with its records.
type harness struct {
	g   *Gateway
	reg *memRegistry
	rec *recorder
	sec *memSecrets
}

func newHarness(t *testing.T, tune func(*Config), tools ...Tool) *harness {
	t.Helper()
	h := &harness{reg: &memRegistry{}, rec: &recorder{}, sec: &memSecrets{values: map[string]string{}}}
	for _, tl := range tools {
		h.reg.put(tl)
	}
	cfg := Config{Registry: h.reg, Secrets: h.sec, Record: h.rec.add, AllowUpstream: allowLoopback}
	if tune != nil {
		tune(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	h.g = g
	return h
}

// httpTool is a tool named name that POSTs its arguments to url.
func httpTool(name, url string) Tool {
	return Tool{Owner: "tenant-a", Name: name, InputSchema: json.RawMessage(objSchema),
		Upstream: Upstream{Kind: UpstreamHTTP, HTTP: &HTTPUpstream{Method: "POST", URL: url}}}
}

func caller(tools ...string) Caller {
	return Caller{Tenant: "tenant-a", Sandbox: "sb-1", KeyID: "key-1", Tools: tools}
}

// wantErr checks err's class and that its message holds each of want.
func wantErr(t *testing.T, err error, class error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", class)
	}
	if !errors.Is(err, class) {
		t.Fatalf("error %q is not %v", err, class)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// wantRecord checks a record's outcome and stage.
func wantRecord(t *testing.T, r Record, outcome, stage string) {
	t.Helper()
	if r.Outcome != outcome || r.Stage != stage {
		t.Errorf("record outcome %q stage %q (reason %q), want %q %q", r.Outcome, r.Stage, r.Reason, outcome, stage)
	}
}

func TestCallOK(t *testing.T) {
	var hits atomic.Int64
	srv := echoServer(t, 0, &hits)
	h := newHarness(t, nil, httpTool("echo", srv.URL+"/echo"))
	res, err := h.g.Call(context.Background(), caller("echo"), "echo", json.RawMessage(`{"msg":"hi","n":3}`))
	if err != nil {
		t.Fatal(err)
	}
	var e echoed
	if err := json.Unmarshal(res.Output, &e); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if e.Method != "POST" || e.Path != "/echo" || e.Body != `{"msg":"hi","n":3}` || e.Headers["Content-Type"] != "application/json" {
		t.Errorf("upstream got %+v", e)
	}
	r := h.rec.last(t)
	wantRecord(t, r, OutcomeOK, "")
	if r.Tool != "echo" || r.Status != 200 || r.OutputBytes != len(res.Output) || string(r.Args) != `{"msg":"hi","n":3}` || r.Caller.Sandbox != "sb-1" {
		t.Errorf("record %+v", r)
	}
	if res.Duration <= 0 || r.Duration <= 0 {
		t.Errorf("durations %v %v", res.Duration, r.Duration)
	}
	if len(h.rec.all()) != 1 || hits.Load() != 1 {
		t.Errorf("%d records, %d hits", len(h.rec.all()), hits.Load())
	}
}

func TestCallNotGranted(t *testing.T) {
	var hits atomic.Int64
	srv := echoServer(t, 0, &hits)
	h := newHarness(t, nil, httpTool("echo", srv.URL), httpTool("secret_tool", srv.URL))
	_, errRegistered := h.g.Call(context.Background(), caller("echo"), "secret_tool", nil)
	_, errMissing := h.g.Call(context.Background(), caller("echo"), "no_such_tool", nil)
	wantErr(t, errRegistered, errdefs.ErrPermissionDenied, "tool secret_tool is not granted to this sandbox")
	wantErr(t, errMissing, errdefs.ErrPermissionDenied, "tool no_such_tool is not granted to this sandbox")
	if strings.Replace(errRegistered.Error(), "secret_tool", "X", 1) != strings.Replace(errMissing.Error(), "no_such_tool", "X", 1) {
		t.Errorf("a registered and a missing tool read differently: %q, %q", errRegistered, errMissing)
	}
	if n := h.reg.lookups.Load(); n != 0 {
		t.Errorf("the registry was asked %d times about ungranted tools", n)
	}
	for _, r := range h.rec.all() {
		wantRecord(t, r, OutcomeDenied, StageGrant)
	}
	if len(h.rec.all()) != 2 || hits.Load() != 0 {
		t.Errorf("%d records, %d hits", len(h.rec.all()), hits.Load())
	}
	// Granted but since deleted.
	_, err := h.g.Call(context.Background(), caller("gone"), "gone", nil)
	wantErr(t, err, errdefs.ErrNotFound, "no longer registered")
}

func TestCallSchema(t *testing.T) {
	var hits atomic.Int64
	srv := echoServer(t, 0, &hits)
	tl := httpTool("get_user", srv.URL)
	tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}},"required":["id"],"additionalProperties":false}`)
	tl.Governance.Redact = []string{"name"}
	h := newHarness(t, nil, tl)
	big := `{"name":"` + strings.Repeat("x", MaxArgsBytes) + `"}`
	for _, tt := range []struct {
		args string
		want []string
	}{
		{`[1,2]`, []string{"must be a JSON object"}},
		{`{"id":`, []string{"not valid JSON"}},
		{`{"id":1} {"id":2}`, []string{"not valid JSON"}},
		{big, []string{"over the limit"}},
		{`{"name":"x"}`, []string{"do not match its input schema", "missing property 'id'"}},
		{`{"id":"seven"}`, []string{"at '/id'", "want integer"}},
		{`{"id":1,"extra":true}`, []string{"additional properties 'extra'"}},
	} {
		_, err := h.g.Call(context.Background(), caller("get_user"), "get_user", json.RawMessage(tt.args))
		wantErr(t, err, errdefs.ErrInvalidArgument, tt.want...)
		r := h.rec.last(t)
		wantRecord(t, r, OutcomeDenied, StageSchema)
		if len(r.Args) > 1024 {
			t.Errorf("record holds %d bytes of args", len(r.Args))
		}
	}
	if hits.Load() != 0 {
		t.Errorf("the upstream was called %d times", hits.Load())
	}
	// A schema violation records the arguments, redacted.
	_, err := h.g.Call(context.Background(), caller("get_user"), "get_user", json.RawMessage(`{"id":"x","name":"Ann"}`))
	wantErr(t, err, errdefs.ErrInvalidArgument)
	if a := string(h.rec.last(t).Args); a != `{"id":"x","name":"[redacted]"}` {
		t.Errorf("record args %s", a)
	}
	// Absent arguments are {}.
	_, err = h.g.Call(context.Background(), caller("get_user"), "get_user", nil)
	wantErr(t, err, errdefs.ErrInvalidArgument, "missing property 'id'")
	if _, err := h.g.Call(context.Background(), caller("get_user"), "get_user", json.RawMessage(`{"id":7}`)); err != nil {
		t.Fatal(err)
	}
}

func TestCallPolicy(t *testing.T) {
	srv := echoServer(t, 0, nil)
	pay := httpTool("pay", srv.URL)
	drop := httpTool("drop_table", srv.URL)
	drop.Governance.Destructive = true
	var policy atomic.Value
	h := newHarness(t, func(c *Config) {
		c.Policies = func(_ context.Context, tenant string) (string, error) {
			if tenant != "tenant-a" || policy.Load() == "unreadable" {
				return "", errors.New("the store is down")
			}
			return policy.Load().(string), nil
		}
	}, pay, drop)
	ctx := context.Background()
	c := caller("pay", "drop_table")
	call := func(name, args string) error {
		_, err := h.g.Call(ctx, c, name, json.RawMessage(args))
		return err
	}

	policy.Store("")
	if err := call("drop_table", `{}`); err != nil {
		t.Fatalf("no policy: %v", err)
	}

	policy.Store(`
permit(principal, action == Airlock::Action::"call", resource);
@id("no-big-payments")
forbid(principal, action, resource == Airlock::Tool::"pay") when { context.args.amount > 500 };
forbid(principal, action, resource) when { resource.destructive };
forbid(principal, action, resource) when { principal.key == "key-banned" || principal.tenant != "tenant-a" };
forbid(principal, action, resource == Airlock::Tool::"pay") when { context.args has price && context.args.price.greaterThan(decimal("9.99")) };
forbid(principal, action, resource == Airlock::Tool::"pay") when { context.args has to && context.args.to.contains("blocked") };
`)
	if err := call("pay", `{"amount":100}`); err != nil {
		t.Fatalf("small payment: %v", err)
	}
	wantErr(t, call("pay", `{"amount":1000}`), errdefs.ErrPermissionDenied, "denied by policy", "no-big-payments (line 3)")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StagePolicy)
	wantErr(t, call("drop_table", `{}`), errdefs.ErrPermissionDenied, "policy2 (line 5)")
	if err := call("pay", `{"amount":1,"price":9.5}`); err != nil {
		t.Fatalf("price 9.5: %v", err)
	}
	wantErr(t, call("pay", `{"amount":1,"price":10.25}`), errdefs.ErrPermissionDenied, "policy4")
	wantErr(t, call("pay", `{"amount":1,"to":["ok","blocked"]}`), errdefs.ErrPermissionDenied, "policy5")
	// A forbid that cannot be evaluated (no amount) denies: fail closed.
	wantErr(t, call("pay", `{}`), errdefs.ErrPermissionDenied, "no-big-payments", "could not be evaluated")

	c.KeyID = "key-banned"
	wantErr(t, call("pay", `{"amount":1}`), errdefs.ErrPermissionDenied, "policy3")
	c.KeyID = "key-1"

	// Policies that exist but permit nothing deny.
	policy.Store(`permit(principal, action, resource == Airlock::Tool::"other");`)
	wantErr(t, call("pay", `{"amount":1}`), errdefs.ErrPermissionDenied, "no policy permits it")

	// The call count is in the context.
	policy.Store(`permit(principal, action, resource) when { context.calls < 2 };`)
	c.Sandbox = "sb-counted"
	for i := range 2 {
		if err := call("drop_table", `{}`); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	wantErr(t, call("drop_table", `{}`), errdefs.ErrPermissionDenied, "no policy permits it")

	// Policies that cannot be read deny every call.
	policy.Store("unreadable")
	wantErr(t, call("pay", `{"amount":1}`), errdefs.ErrUnavailable, "policies for tool pay could not be read")
	wantRecord(t, h.rec.last(t), OutcomeError, StagePolicy)

	// Policies that do not parse deny every call.
	policy.Store(`permit(principal, action, resource`)
	wantErr(t, call("pay", `{"amount":1}`), errdefs.ErrPermissionDenied, "do not parse")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StagePolicy)
	if err := CheckPolicies(`permit(principal, action, resource`); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CheckPolicies of a broken text: %v", err)
	}
	if err := CheckPolicies(`permit(principal, action, resource);`); err != nil {
		t.Errorf("CheckPolicies: %v", err)
	}
}

func TestCedarValue(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"i":42,"f":2.5,"e":1e3,"tiny":0.00001,"huge":1e300,"s":"x","b":true,"n":null,"a":[1,"two",null],"o":{"k":-0.25}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := cedarValue(v).(interface{ MarshalCedar() []byte }).MarshalCedar()
	want := `{"a":[1, "two"], "b":true, "e":1000, "f":decimal("2.5"), "huge":"1e300", "i":42, "o":{"k":decimal("-0.25")}, "s":"x", "tiny":"0.00001"}`
	if string(got) != want {
		t.Errorf("cedar value\n got %s\nwant %s", got, want)
	}
}

func TestCallBudgets(t *testing.T) {
	ctx := context.Background()
	t.Run("count", func(t *testing.T) {
		srv := echoServer(t, 0, nil)
		tl := httpTool("echo", srv.URL)
		tl.Governance.MaxCallsPerSandbox = 2
		h := newHarness(t, nil, tl)
		c := caller("echo")
		for range 2 {
			if _, err := h.g.Call(ctx, c, "echo", nil); err != nil {
				t.Fatal(err)
			}
		}
		_, err := h.g.Call(ctx, c, "echo", nil)
		wantErr(t, err, errdefs.ErrResourceExhausted, "called 2 times by this sandbox")
		wantRecord(t, h.rec.last(t), OutcomeDenied, StageBudget)
		other := c
		other.Sandbox = "sb-2"
		if _, err := h.g.Call(ctx, other, "echo", nil); err != nil {
			t.Fatalf("another sandbox: %v", err)
		}
		h.g.Forget("sb-1")
		if _, err := h.g.Call(ctx, c, "echo", nil); err != nil {
			t.Fatalf("after Forget: %v", err)
		}
	})
	t.Run("rate", func(t *testing.T) {
		srv := echoServer(t, 0, nil)
		tl := httpTool("echo", srv.URL)
		tl.Governance.RatePerMinute = 3
		h := newHarness(t, nil, tl)
		c := caller("echo")
		for range 3 {
			if _, err := h.g.Call(ctx, c, "echo", nil); err != nil {
				t.Fatal(err)
			}
		}
		_, err := h.g.Call(ctx, c, "echo", nil)
		wantErr(t, err, errdefs.ErrResourceExhausted, "3 times a minute", "retry after 20 s")
		wantRecord(t, h.rec.last(t), OutcomeDenied, StageBudget)
	})
	t.Run("concurrency", func(t *testing.T) {
		release := make(chan struct{})
		var started atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started.Add(1)
			<-release
			_, _ = io.WriteString(w, `{}`)
		}))
		defer srv.Close()
		defer close(release)
		tl := httpTool("slow", srv.URL)
		tl.Governance.MaxConcurrent = 2
		h := newHarness(t, nil, tl)
		c := caller("slow")
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := h.g.Call(ctx, c, "slow", nil)
				errs <- err
			}()
		}
		for deadline := time.Now().Add(5 * time.Second); started.Load() < 2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the two calls did not reach the upstream")
			}
		}
		_, err := h.g.Call(ctx, c, "slow", nil)
		wantErr(t, err, errdefs.ErrResourceExhausted, "2 calls in flight")
		wantRecord(t, h.rec.last(t), OutcomeDenied, StageBudget)
		release <- struct{}{}
		release <- struct{}{}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		// The places are given back.
		go func() {
			_, err := h.g.Call(ctx, c, "slow", nil)
			errs <- err
		}()
		release <- struct{}{}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("evict", func(t *testing.T) {
		srv := echoServer(t, 0, nil)
		tl := httpTool("echo", srv.URL)
		tl.Governance.MaxCallsPerSandbox = 1
		h := newHarness(t, func(c *Config) { c.MaxSandboxes = 2 }, tl)
		for _, sb := range []string{"sb-1", "sb-2", "sb-3"} {
			c := caller("echo")
			c.Sandbox = sb
			if _, err := h.g.Call(ctx, c, "echo", nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(h.g.budgets.sandboxes); n != 2 {
			t.Errorf("%d sandboxes tracked, want 2", n)
		}
		if _, ok := h.g.budgets.sandboxes["sb-1"]; ok {
			t.Error("the sandbox idle longest was kept")
		}
	})
}

func TestCallApproval(t *testing.T) {
	srv := echoServer(t, 0, nil)
	tl := httpTool("delete_user", srv.URL)
	tl.Governance.Approval = true
	tl.Governance.Redact = []string{"token"}
	ctx := context.Background()
	args := json.RawMessage(`{"id":1,"token":"tok-123"}`)

	h := newHarness(t, nil, tl)
	_, err := h.g.Call(ctx, caller("delete_user"), "delete_user", args)
	wantErr(t, err, errdefs.ErrPermissionDenied, "requires approval but no approver is configured")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StageApproval)

	var seen json.RawMessage
	decide := func(ok bool, reason string, err error) func(*Config) {
		return func(c *Config) {
			c.Approve = func(_ context.Context, c Caller, tl Tool, args json.RawMessage) (bool, string, error) {
				if c.Sandbox != "sb-1" || tl.Name != "delete_user" {
					return false, "", errors.New("wrong call")
				}
				seen = args
				return ok, reason, err
			}
		}
	}
	h = newHarness(t, decide(false, "not on a Friday", nil), tl)
	_, err = h.g.Call(ctx, caller("delete_user"), "delete_user", args)
	wantErr(t, err, errdefs.ErrPermissionDenied, "denied by its approver: not on a Friday")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StageApproval)
	if string(seen) != `{"id":1,"token":"[redacted]"}` {
		t.Errorf("the approver saw %s", seen)
	}

	h = newHarness(t, decide(false, "", fmt.Errorf("approval 7: %w", errdefs.ErrTimeout)), tl)
	_, err = h.g.Call(ctx, caller("delete_user"), "delete_user", args)
	wantErr(t, err, errdefs.ErrTimeout, "not approved in time")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StageApproval)

	h = newHarness(t, decide(true, "fine", nil), tl)
	if _, err := h.g.Call(ctx, caller("delete_user"), "delete_user", args); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, h.rec.last(t), OutcomeOK, "")
}

func TestCallCircuit(t *testing.T) {
	var failing atomic.Bool
	var hits atomic.Int64
	failing.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	h := newHarness(t, func(c *Config) { c.BreakerFailures = 3; c.BreakerOpen = 300 * time.Millisecond }, httpTool("flaky", srv.URL))
	ctx := context.Background()
	c := caller("flaky")
	for range 3 {
		_, err := h.g.Call(ctx, c, "flaky", nil)
		wantErr(t, err, errdefs.ErrUnavailable, "answered 502 Bad Gateway")
		wantRecord(t, h.rec.last(t), OutcomeError, StageUpstream)
		if r := h.rec.last(t); r.Status != 502 {
			t.Errorf("record status %d", r.Status)
		}
	}
	_, err := h.g.Call(ctx, c, "flaky", nil)
	wantErr(t, err, errdefs.ErrUnavailable, "tool flaky's upstream is failing; retry after 1 s")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StageCircuit)
	if hits.Load() != 3 {
		t.Errorf("the upstream was called %d times with the circuit open", hits.Load())
	}
	failing.Store(false)
	time.Sleep(350 * time.Millisecond)
	if _, err := h.g.Call(ctx, c, "flaky", nil); err != nil {
		t.Fatalf("after the open period: %v", err)
	}

	// Answers of 4xx do not open it: the upstream is up.
	srv4 := httptest.NewServer(http.NotFoundHandler())
	defer srv4.Close()
	h = newHarness(t, func(c *Config) { c.BreakerFailures = 2 }, httpTool("missing", srv4.URL))
	for range 4 {
		_, err := h.g.Call(ctx, caller("missing"), "missing", nil)
		wantErr(t, err, errdefs.ErrNotFound, "answered 404 Not Found")
	}
}

func TestCallSecret(t *testing.T) {
	const canary = "sk-canary-7f3a9c\"quoted"
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		if r.URL.Path == "/fail" {
			// An upstream that repeats the secret in its error body.
			http.Error(w, "bad token "+r.Header.Get("Authorization"), http.StatusUnauthorized)
			return
		}
		// An upstream that echoes the secret in its answer.
		_ = json.NewEncoder(w).Encode(map[string]string{"auth": r.Header.Get("Authorization"), "plain": "ok"})
	}))
	defer srv.Close()
	tl := httpTool("api", srv.URL+"/ok")
	tl.Upstream.HTTP.Headers = map[string]string{"Authorization": "Bearer {secret.api_key}", "X-User": "{args.user}"}
	fail := httpTool("api_fail", srv.URL+"/fail")
	fail.Upstream.HTTP.Headers = tl.Upstream.HTTP.Headers
	nosecret := httpTool("api_unset", srv.URL+"/ok")
	nosecret.Upstream.HTTP.Headers = map[string]string{"Authorization": "Bearer {secret.unset}"}
	h := newHarness(t, nil, tl, fail, nosecret)
	h.sec.values["tenant-a/api_key"] = canary
	ctx := context.Background()
	c := caller("api", "api_fail", "api_unset")

	// The sandbox passes the canary as an argument too: the record
	// must not show it.
	res, err := h.g.Call(ctx, c, "api", json.RawMessage(`{"user":"ann","guess":"`+strings.ReplaceAll(canary, `"`, `\"`)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Load() != "Bearer "+canary {
		t.Errorf("the upstream got Authorization %q", got.Load())
	}
	_, err2 := h.g.Call(ctx, c, "api_fail", json.RawMessage(`{"user":"ann"}`))
	wantErr(t, err2, errdefs.ErrFailedPrecondition, "answered 401 Unauthorized")
	_, err3 := h.g.Call(ctx, c, "api_unset", nil)
	wantErr(t, err3, errdefs.ErrFailedPrecondition, "needs secret unset, which is not set")

	var out map[string]string
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if out["auth"] != "Bearer [redacted]" || out["plain"] != "ok" {
		t.Errorf("output %v", out)
	}
	recs, _ := json.Marshal(h.rec.all())
	seen := string(res.Output) + err2.Error() + err3.Error() + string(recs)
	for _, r := range h.rec.all() {
		seen += r.Reason + string(r.Args)
	}
	for _, form := range []string{canary, strings.ReplaceAll(canary, `"`, `\"`), "sk-canary"} {
		if strings.Contains(seen, form) {
			t.Errorf("the canary (%q) shows in an output, error or record: %s", form, seen)
		}
	}
	if a := string(h.rec.all()[0].Args); !strings.Contains(a, `"guess":"[redacted]"`) {
		t.Errorf("record args %s", a)
	}
	h.sec.mu.Lock()
	defer h.sec.mu.Unlock()
	if len(h.sec.given) != 2 {
		t.Fatalf("%d values revealed, want 2", len(h.sec.given))
	}
	for _, v := range h.sec.given {
		if strings.Trim(string(v.Bytes()), "\x00") != "" {
			t.Error("a revealed value was not wiped")
		}
	}
}

func TestCallTemplates(t *testing.T) {
	srv := echoServer(t, 0, nil)
	get := httpTool("find", srv.URL+"/users/{args.id}/items?q={args.q}&n={args.n}")
	get.Upstream.HTTP.Method = "GET"
	get.Upstream.HTTP.Headers = map[string]string{"X-Q": "{args.q}", "X-Missing": "[{args.none}]"}
	put := httpTool("put", srv.URL+"/items")
	put.Upstream.HTTP.Method = "PUT"
	put.Upstream.HTTP.Body = `{"item": {args.item}, "n": {args.n}, "note": "{literal}", "none": {args.none}}`
	h := newHarness(t, nil, get, put)
	ctx := context.Background()
	res, err := h.g.Call(ctx, caller("find"), "find", json.RawMessage(`{"id":"../admin","q":"a b&x=1/?#","n":5}`))
	if err != nil {
		t.Fatal(err)
	}
	var e echoed
	_ = json.Unmarshal(res.Output, &e)
	if e.Method != "GET" || e.RawPath != "/users/%2E%2E%2Fadmin/items" || e.Query != "q=a%20b%26x%3D1%2F%3F%23&n=5" || e.Body != "" {
		t.Errorf("GET upstream got %+v", e)
	}
	if e.Headers["X-Q"] != "a b&x=1/?#" || e.Headers["X-Missing"] != "[]" {
		t.Errorf("headers %v", e.Headers)
	}
	res, err = h.g.Call(ctx, caller("put"), "put", json.RawMessage(`{"item":{"k":"v\"q"},"n":2.5}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(res.Output, &e)
	if e.Method != "PUT" || e.Body != `{"item": {"k":"v\"q"}, "n": 2.5, "note": "{literal}", "none": null}` {
		t.Errorf("PUT upstream got %+v", e)
	}
	// A header argument with a line break is refused, not sent.
	_, err = h.g.Call(ctx, caller("find"), "find", json.RawMessage(`{"id":"1","q":"a\r\nX-Evil: 1"}`))
	wantErr(t, err, errdefs.ErrInvalidArgument, "control character")
}

func TestCallOutput(t *testing.T) {
	body := atomic.Value{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := body.Load().(string)
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush() // no Content-Length: read up to the cap
		}
		_, _ = io.WriteString(w, b)
	}))
	defer srv.Close()
	typed := httpTool("typed", srv.URL)
	typed.OutputSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	h := newHarness(t, func(c *Config) { c.MaxOutputBytes = 100 }, typed, httpTool("plain", srv.URL), httpTool("chunked", srv.URL+"/chunked"))
	ctx := context.Background()

	body.Store(`{"n":"x"}`)
	_, err := h.g.Call(ctx, caller("typed"), "typed", nil)
	wantErr(t, err, errdefs.ErrFailedPrecondition, "does not match its output schema", "at '/n'")
	wantRecord(t, h.rec.last(t), OutcomeError, StageOutput)
	body.Store(`{"n":3}`)
	if res, err := h.g.Call(ctx, caller("typed"), "typed", nil); err != nil || string(res.Output) != `{"n":3}` {
		t.Fatalf("typed: %s, %v", res.Output, err)
	}

	body.Store("plain text")
	if res, err := h.g.Call(ctx, caller("plain"), "plain", nil); err != nil || string(res.Output) != `"plain text"` {
		t.Fatalf("plain: %s, %v", res.Output, err)
	}
	body.Store("")
	if res, err := h.g.Call(ctx, caller("plain"), "plain", nil); err != nil || string(res.Output) != `null` {
		t.Fatalf("empty: %s, %v", res.Output, err)
	}

	body.Store(strings.Repeat("x", 101))
	for _, name := range []string{"plain", "chunked"} {
		_, err = h.g.Call(ctx, caller(name), name, nil)
		wantErr(t, err, errdefs.ErrResourceExhausted, "over the limit of 100 bytes")
		wantRecord(t, h.rec.last(t), OutcomeError, StageOutput)
	}
	body.Store(strings.Repeat("x", 98))
	if _, err := h.g.Call(ctx, caller("chunked"), "chunked", nil); err != nil {
		t.Fatalf("at the cap: %v", err)
	}
}

func TestCallSSRF(t *testing.T) {
	var hits atomic.Int64
	srv := echoServer(t, 0, &hits)
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	tools := []Tool{
		httpTool("loop", srv.URL),
		httpTool("loop_name", "http://localhost"+port),
		httpTool("metadata", "http://169.254.169.254/latest/meta-data/"),
		httpTool("private", "http://10.0.0.1:9/"),
		httpTool("mapped", "http://[::ffff:127.0.0.1]"+port),
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	h := newHarness(t, func(c *Config) { c.AllowUpstream = nil }, tools...)
	ctx := context.Background()
	for _, tt := range []struct{ tool, class string }{
		{"loop", "loopback"}, {"loop_name", "loopback"}, {"metadata", "metadata"}, {"private", "private"}, {"mapped", "loopback"},
	} {
		start := time.Now()
		_, err := h.g.Call(ctx, caller(names...), tt.tool, nil)
		wantErr(t, err, errdefs.ErrPermissionDenied, "a "+tt.class+" address, which tools may not reach")
		wantRecord(t, h.rec.last(t), OutcomeDenied, StageUpstream)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %v (did it dial?)", tt.tool, d)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("the loopback server was reached %d times", hits.Load())
	}
	// Refusals do not open the circuit: the guard is not the upstream
	// failing.
	for range DefaultBreakerFailures + 1 {
		_, err := h.g.Call(ctx, caller(names...), "loop", nil)
		wantErr(t, err, errdefs.ErrPermissionDenied)
	}

	// AllowUpstream admits an address the guard would refuse.
	h = newHarness(t, nil, tools...)
	if _, err := h.g.Call(ctx, caller(names...), "loop", nil); err != nil {
		t.Fatal(err)
	}
	_, err := h.g.Call(ctx, caller(names...), "metadata", nil)
	wantErr(t, err, errdefs.ErrPermissionDenied, "metadata")
}

func TestCallRedirectNotFollowed(t *testing.T) {
	var targetHits atomic.Int64
	target := echoServer(t, 0, &targetHits)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	}))
	defer srv.Close()
	tl := httpTool("moved", srv.URL)
	tl.Upstream.HTTP.Headers = map[string]string{"X-Key": "{secret.k}"}
	h := newHarness(t, nil, tl)
	h.sec.values["tenant-a/k"] = "v"
	_, err := h.g.Call(context.Background(), caller("moved"), "moved", nil)
	wantErr(t, err, errdefs.ErrFailedPrecondition, "answered 302 Found")
	if targetHits.Load() != 0 {
		t.Error("the redirect was followed")
	}
}

func TestCallUpstreamFailures(t *testing.T) {
	slow := echoServer(t, 2*time.Second, nil)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	timeout := httpTool("slow", slow.URL)
	timeout.Governance.TimeoutS = 1
	h := newHarness(t, nil, timeout, httpTool("closed", closedURL), Tool{Owner: "tenant-a", Name: "local", Upstream: Upstream{Kind: UpstreamCaller}})
	ctx := context.Background()
	c := caller("slow", "closed", "local")
	start := time.Now()
	_, err := h.g.Call(ctx, c, "slow", nil)
	wantErr(t, err, errdefs.ErrTimeout, "did not answer within 1s")
	if d := time.Since(start); d > 1900*time.Millisecond {
		t.Errorf("the timeout took %v", d)
	}
	_, err = h.g.Call(ctx, c, "closed", nil)
	wantErr(t, err, errdefs.ErrUnavailable, "refused the connection")
	if strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("the error names the address: %v", err)
	}
	wantRecord(t, h.rec.last(t), OutcomeError, StageUpstream)
	_, err = h.g.Call(ctx, c, "local", nil)
	wantErr(t, err, errdefs.ErrNotSupported, "this server relays no calls to callers")
	wantRecord(t, h.rec.last(t), OutcomeError, StageUpstream)

	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = h.g.Call(cctx, c, "slow", nil)
	wantErr(t, err, errdefs.ErrCanceled)
}

func TestCallDryRun(t *testing.T) {
	var hits atomic.Int64
	srv := echoServer(t, 0, &hits)
	tl := httpTool("echo", srv.URL)
	tl.Governance.DryRun = true
	tl.Governance.MaxCallsPerSandbox = 1
	h := newHarness(t, func(c *Config) {
		c.Policies = func(context.Context, string) (string, error) {
			return `permit(principal, action, resource); forbid(principal, action, resource) when { context.args.x == 1 };`, nil
		}
	}, tl)
	ctx := context.Background()
	if _, err := h.g.Call(ctx, caller("echo"), "echo", json.RawMessage(`{"x":1}`)); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	r := h.rec.last(t)
	if !r.DryRun || r.Outcome != OutcomeOK || r.Stage != StagePolicy || !strings.Contains(r.Reason, "forbidden by policy1") {
		t.Errorf("record %+v", r)
	}
	// Over the count: recorded, not refused.
	if _, err := h.g.Call(ctx, caller("echo"), "echo", json.RawMessage(`{"x":2}`)); err != nil {
		t.Fatalf("dry run over budget: %v", err)
	}
	r = h.rec.last(t)
	if !r.DryRun || r.Stage != StageBudget || !strings.Contains(r.Reason, "called 1 times") {
		t.Errorf("record %+v", r)
	}
	if hits.Load() != 2 {
		t.Errorf("%d upstream calls, want 2", hits.Load())
	}
	// Without dry run the same is refused, and a passing call is not
	// marked.
	tl.Governance.DryRun = false
	h.reg.put(tl)
	_, err := h.g.Call(ctx, caller("echo"), "echo", json.RawMessage(`{"x":1}`))
	wantErr(t, err, errdefs.ErrPermissionDenied)
	if h.rec.last(t).DryRun {
		t.Error("a refusal outside dry run is marked dry run")
	}
}

func TestGranted(t *testing.T) {
	h := newHarness(t, nil, httpTool("b", "http://x"), httpTool("a", "http://x"), Tool{Owner: "tenant-b", Name: "c"})
	tools, err := h.g.Granted(context.Background(), caller("b", "deleted", "a", "c", "a"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("granted %v", names)
	}
}

func TestCallConcurrentNotSerialized(t *testing.T) {
	const n, delay = 100, 50 * time.Millisecond
	srv := echoServer(t, delay, nil)
	h := newHarness(t, nil, httpTool("echo", srv.URL))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := h.g.Call(context.Background(), caller("echo"), "echo", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > n*delay/5 {
		t.Errorf("%d calls of %v took %v: serialized", n, delay, d)
	} else {
		t.Logf("%d concurrent calls of %v: %v", n, delay, d)
	}
}

func TestNewConfig(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no registry: %v", err)
	}
	if _, err := New(Config{Registry: &memRegistry{}, MaxOutputBytes: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative cap: %v", err)
	}
}

func TestBudgetRateRefusalTakesNoToken(t *testing.T) {
	b := newBudgets(10)
	now := time.Unix(1_000_000, 0)
	b.now = func() time.Time { return now }
	g := Governance{RatePerMinute: 60} // one a second, a burst of 60
	take := func() *stageError {
		release, err := b.acquire("sb", "t", g, 10, false)
		release()
		return err
	}
	for i := range 60 {
		if err := take(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for range 3 {
		if err := take(); err == nil || !strings.Contains(err.Error(), "retry after 1 s") {
			t.Fatalf("over the rate: %v", err)
		}
	}
	now = now.Add(time.Second)
	if err := take(); err != nil {
		t.Fatalf("a second later (refused calls must not have used the token): %v", err)
	}
}

func TestBreakerIgnoresCanceledCalls(t *testing.T) {
	bs := newBreakers(1, 50*time.Millisecond)
	b := bs.get("tenant-a", "t")
	fault := failure(StageUpstream, errdefs.ErrUnavailable, "down")
	fault.fault = true
	if _, err := b.execute("t", func() (answer, error) { return answer{}, fault }); err != fault {
		t.Fatalf("first failure: %v", err)
	}
	time.Sleep(60 * time.Millisecond) // half-open: one call tests the upstream
	canceled := failure(StageUpstream, errdefs.ErrCanceled, "canceled")
	canceled.ignore = true
	if _, err := b.execute("t", func() (answer, error) { return answer{}, canceled }); err != canceled {
		t.Fatalf("canceled test call: %v", err)
	}
	// The canceled call proved nothing: the circuit is still half-open,
	// not closed; the next test call that fails opens it again.
	if s := b.cb.State(); s.String() != "half-open" {
		t.Fatalf("after a canceled test call the circuit is %s", s)
	}
	_, _ = b.execute("t", func() (answer, error) { return answer{}, fault })
	_, err := b.execute("t", func() (answer, error) { return answer{}, nil })
	wantErr(t, err, errdefs.ErrUnavailable, "retry after 1 s")
}

// TestCallPolicyDryRun: a forbid policy annotated @dry_run never denies;
// a call it would have denied goes ahead and its record names it. An
// enforced forbid still denies beside it; a dry-run permit is refused as
// a text.
func TestCallPolicyDryRun(t *testing.T) {
	srv := echoServer(t, 0, nil)
	pay := httpTool("pay", srv.URL)
	text := `
permit(principal, action, resource);
@id("watch-big")
@dry_run("")
forbid(principal, action, resource) when { context.args.amount > 500 };
forbid(principal, action, resource) when { context.args.amount > 5000 };
`
	h := newHarness(t, func(c *Config) {
		c.Policies = func(context.Context, string) (string, error) { return text, nil }
	}, pay)
	ctx := context.Background()
	if _, err := h.g.Call(ctx, caller("pay"), "pay", json.RawMessage(`{"amount":100}`)); err != nil {
		t.Fatal(err)
	}
	if r := h.rec.last(t); r.DryRun || r.Reason != "" {
		t.Errorf("a call no policy would refuse: %+v", r)
	}
	if _, err := h.g.Call(ctx, caller("pay"), "pay", json.RawMessage(`{"amount":1000}`)); err != nil {
		t.Fatalf("a call only the dry-run policy refuses: %v", err)
	}
	r := h.rec.last(t)
	wantRecord(t, r, OutcomeOK, StagePolicy)
	if !r.DryRun || !strings.Contains(r.Reason, "dry run, would be refused at policy") || !strings.Contains(r.Reason, "watch-big (line 3)") {
		t.Errorf("the dry-run refusal's record: %+v", r)
	}
	_, err := h.g.Call(ctx, caller("pay"), "pay", json.RawMessage(`{"amount":9000}`))
	wantErr(t, err, errdefs.ErrPermissionDenied, "policy2 (line 6)")

	for _, bad := range []string{
		`@dry_run("") permit(principal, action, resource);`,
	} {
		if err := CheckPolicies(bad); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "only forbid policies") {
			t.Errorf("CheckPolicies(%q) = %v", bad, err)
		}
	}
}
