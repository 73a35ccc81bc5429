package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func newTestRelay(t *testing.T, cfg RelayConfig) *Relay {
	t.Helper()
	r, err := NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitPending waits until the sandbox has n calls waiting and returns them.
func waitRelayed(t *testing.T, r *Relay, tenant, sandbox string, n int) []RelayedCall {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := r.Pending(tenant, sandbox)
		if len(p) == n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls pending, want %d", len(p), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// relayedTool is a caller-executed tool whose output must be an object
// with a number n.
func relayedTool(name string) Tool {
	return Tool{Owner: "tenant-a", Name: name,
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`),
		Upstream:     Upstream{Kind: UpstreamCaller}, Governance: Governance{TimeoutS: 2, Redact: []string{"x"}}}
}

// TestRelayThroughPipeline calls a caller-executed tool through the
// gateway while a caller answers it: the caller sees the real
// arguments (the record the redacted ones), its output goes through the
// output schema, and its error reaches the program.
func TestRelayThroughPipeline(t *testing.T) {
	relay := newTestRelay(t, RelayConfig{})
	h := newHarness(t, func(c *Config) { c.Relay = relay }, relayedTool("local"))
	c := caller("local")
	ch, stop := relay.Subscribe(c.Sandbox)
	defer stop()

	type result struct {
		res Result
		err error
	}
	call := func(args string) chan result {
		done := make(chan result, 1)
		go func() {
			res, err := h.g.Call(context.Background(), c, "local", json.RawMessage(args))
			done <- result{res, err}
		}()
		return done
	}

	done := call(`{"x":41}`)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal for the waiting call")
	}
	p := waitRelayed(t, relay, "tenant-a", c.Sandbox, 1)[0]
	if p.Tool != "local" || string(p.Args) != `{"x":41}` || !strings.HasPrefix(p.ID, "tc-") || len(p.ID) != 19 {
		t.Fatalf("pending call %+v", p)
	}
	if err := relay.Answer("tenant-a", c.Sandbox, p.ID, json.RawMessage(`{"n":42}`), ""); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || string(r.res.Output) != `{"n":42}` {
		t.Fatalf("call: %s, %v", r.res.Output, r.err)
	}
	rec := h.rec.last(t)
	wantRecord(t, rec, OutcomeOK, "")
	if strings.Contains(string(rec.Args), "41") {
		t.Errorf("the record shows a redacted argument: %s", rec.Args)
	}
	if err := relay.Answer("tenant-a", c.Sandbox, p.ID, json.RawMessage(`{"n":1}`), ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a second answer: %v, want not found", err)
	}

	// The caller's error.
	done = call(`{"x":1}`)
	p = waitRelayed(t, relay, "tenant-a", c.Sandbox, 1)[0]
	if err := relay.Answer("tenant-a", c.Sandbox, p.ID, nil, "no such employee"); err != nil {
		t.Fatal(err)
	}
	r = <-done
	wantErr(t, r.err, errdefs.ErrFailedPrecondition, "tool local failed at its caller: no such employee")
	wantRecord(t, h.rec.last(t), OutcomeError, StageUpstream)

	// An answer that breaks the output schema.
	done = call(`{"x":2}`)
	p = waitRelayed(t, relay, "tenant-a", c.Sandbox, 1)[0]
	if err := relay.Answer("tenant-a", c.Sandbox, p.ID, json.RawMessage(`"text"`), ""); err != nil {
		t.Fatal(err)
	}
	r = <-done
	wantErr(t, r.err, errdefs.ErrFailedPrecondition, "does not match its output schema")
	wantRecord(t, h.rec.last(t), OutcomeError, StageOutput)

	// Arguments that break the input schema never reach the caller.
	_, err := h.g.Call(context.Background(), c, "local", json.RawMessage(`{"x":"one"}`))
	wantErr(t, err, errdefs.ErrInvalidArgument)
	if n := len(relay.Pending("tenant-a", c.Sandbox)); n != 0 {
		t.Errorf("%d calls pending after a refusal", n)
	}
}

// TestRelayTimeoutAndCancel: no answer within the tool's timeout fails
// the call (class timeout); a call whose program goes away is withdrawn.
func TestRelayTimeoutAndCancel(t *testing.T) {
	relay := newTestRelay(t, RelayConfig{})
	tool := relayedTool("local")
	tool.Governance.TimeoutS = 1
	h := newHarness(t, func(c *Config) { c.Relay = relay }, tool)
	c := caller("local")
	start := time.Now()
	_, err := h.g.Call(context.Background(), c, "local", json.RawMessage(`{"x":1}`))
	wantErr(t, err, errdefs.ErrTimeout, "its caller did not answer within 1s")
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	if n := len(relay.Pending("tenant-a", c.Sandbox)); n != 0 {
		t.Errorf("%d calls pending after the timeout", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.g.Call(ctx, c, "local", json.RawMessage(`{"x":1}`))
		done <- err
	}()
	p := waitRelayed(t, relay, "tenant-a", c.Sandbox, 1)[0]
	cancel()
	wantErr(t, <-done, errdefs.ErrCanceled)
	if err := relay.Answer("tenant-a", c.Sandbox, p.ID, json.RawMessage(`{"n":1}`), ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("answering a withdrawn call: %v, want not found", err)
	}
}

// TestRelayConfinement: a call is seen and answered only by a caller
// naming its tenant and its sandbox; answers are checked; the bound on
// waiting calls holds.
func TestRelayConfinement(t *testing.T) {
	relay := newTestRelay(t, RelayConfig{MaxPending: 2, MaxOutputBytes: 64})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := Caller{Tenant: "t1", Sandbox: "sb-1"}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 2 {
		wg.Go(func() {
			_, err := relay.Execute(ctx, c, "local", json.RawMessage(`{}`), time.Minute)
			errs <- err
		})
	}
	calls := waitRelayed(t, relay, "t1", "sb-1", 2)
	// The third waits nowhere: the bound is reached.
	_, err := relay.Execute(ctx, Caller{Tenant: "t2", Sandbox: "sb-2"}, "local", nil, time.Minute)
	wantErr(t, err, errdefs.ErrResourceExhausted, "at most 2")

	if n := len(relay.Pending("t2", "sb-1")) + len(relay.Pending("t1", "sb-2")); n != 0 {
		t.Errorf("another tenant or sandbox sees %d calls", n)
	}
	id := calls[0].ID
	for _, tt := range []struct {
		tenant, sandbox, id string
		out                 string
		errMsg              string
		class               error
	}{
		{"t2", "sb-1", id, `1`, "", errdefs.ErrNotFound},
		{"t1", "sb-2", id, `1`, "", errdefs.ErrNotFound},
		{"t1", "sb-1", "tc-aaaaaaaaaaaaaaaa", `1`, "", errdefs.ErrNotFound},
		{"t1", "sb-1", id, ``, "", errdefs.ErrInvalidArgument},
		{"t1", "sb-1", id, `1`, "both", errdefs.ErrInvalidArgument},
		{"t1", "sb-1", id, `{"a":`, "", errdefs.ErrInvalidArgument},
		{"t1", "sb-1", id, `"` + strings.Repeat("x", 64) + `"`, "", errdefs.ErrInvalidArgument},
		{"t1", "sb-1", id, ``, strings.Repeat("e", MaxRelayError+1), errdefs.ErrInvalidArgument},
		{"t1", "sb-1", id, ``, "\xff", errdefs.ErrInvalidArgument},
	} {
		err := relay.Answer(tt.tenant, tt.sandbox, tt.id, json.RawMessage(tt.out), tt.errMsg)
		if !errors.Is(err, tt.class) {
			t.Errorf("Answer(%s, %s, %s, %q, %.10q) = %v, want %v", tt.tenant, tt.sandbox, tt.id, tt.out, tt.errMsg, err, tt.class)
		}
	}
	if n := len(relay.Pending("t1", "sb-1")); n != 2 {
		t.Fatalf("%d calls pending after refused answers, want 2", n)
	}
	for _, p := range calls {
		if err := relay.Answer("t1", "sb-1", p.ID, json.RawMessage(`true`), ""); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("an answered call: %v", err)
		}
	}
}

// TestObserve: an observer sees the records of its sandbox's calls, and
// none after it stops.
func TestObserve(t *testing.T) {
	srv := echoServer(t, 0, nil)
	h := newHarness(t, nil, httpTool("echo", srv.URL))
	var mu sync.Mutex
	var seen []Record
	stop := h.g.Observe("sb-1", func(r Record) { mu.Lock(); seen = append(seen, r); mu.Unlock() })
	other := caller("echo")
	other.Sandbox = "sb-2"
	for _, c := range []Caller{caller("echo"), other, caller()} {
		_, _ = h.g.Call(context.Background(), c, "echo", json.RawMessage(`{}`))
	}
	stop()
	_, _ = h.g.Call(context.Background(), caller("echo"), "echo", json.RawMessage(`{}`))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0].Outcome != OutcomeOK || seen[1].Stage != StageGrant || seen[0].Caller.Sandbox != "sb-1" {
		t.Fatalf("observed %+v", seen)
	}
}
