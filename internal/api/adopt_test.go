package api

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestRequestsWaitForAdoption checks that the first requests after a
// daemon restart, sent while the restarted manager is still adopting
// their sandbox, wait for the adoption and succeed rather than failing
// 503 "retry": an exec (the manager's own check) and a kill of every
// process (the API's check before the audit intent).
func TestRequestsWaitForAdoption(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	sb := e.sandbox(ctx)
	prev := e.mgr
	// restart stops the daemon (its sandboxes keep running) and starts
	// another whose sandboxes' agents answer once gate is closed.
	restart := func() (*client.Client, *sandbox.Manager, chan struct{}) {
		if err := prev.Close(ctx); err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		m, err := sandbox.New(runtimefake.Gated(e.rt, gate), e.reg, sandbox.Config{StateDir: e.stateDir, HealthInterval: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		prev = m
		cfg := e.cfg
		cfg.Sandboxes = m
		h, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, keyA, client.WithHTTPClient(srv.Client()))
		if err != nil {
			t.Fatal(err)
		}
		return c, m, gate
	}

	for _, tc := range []struct {
		name string
		call func(*client.Client) error
	}{
		{"kill all", func(c *client.Client) error { _, err := c.KillAllProcesses(ctx, sb.ID, 0); return err }},
		{"exec", func(c *client.Client) error {
			r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo adopted"})
			if err == nil && string(r.Stdout) != "adopted\n" {
				t.Errorf("exec after the adoption: %+v", r)
			}
			return err
		}},
	} {
		c, m, gate := restart()
		if s, _ := m.Get(sb.ID); s.State != sandbox.StateAdopting {
			t.Fatalf("%s: sandbox is %q before the request, want adopting", tc.name, s.State)
		}
		// The agent answers a moment after the request arrives.
		time.AfterFunc(200*time.Millisecond, func() { close(gate) })
		if err := tc.call(c); err != nil {
			t.Errorf("%s while the sandbox is being adopted: %v, want it to wait and succeed", tc.name, err)
		}
	}
}
