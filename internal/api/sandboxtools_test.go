package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// fakeResolver knows tenant A's tools echo and search, and its toolset
// web (search, fetch); it records what it was asked.
type fakeResolver struct {
	mu    sync.Mutex
	asked []string
}

func (f *fakeResolver) Resolve(ctx context.Context, tenant string, tools, toolsets []string) ([]string, error) {
	f.mu.Lock()
	f.asked = append(f.asked, tenant)
	f.mu.Unlock()
	known := map[string]bool{"echo": true, "search": true, "fetch": true}
	sets := map[string][]string{"web": {"search", "fetch"}}
	var out []string
	for _, n := range tools {
		if tenant != tenantA || !known[n] {
			return nil, fmt.Errorf("tool %s: %w", n, errdefs.ErrNotFound)
		}
		out = append(out, n)
	}
	for _, n := range toolsets {
		if tenant != tenantA || sets[n] == nil {
			return nil, fmt.Errorf("toolset %s: %w", n, errdefs.ErrNotFound)
		}
		out = append(out, sets[n]...)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// A create grants the tools it names and its toolsets' tools, resolved
// for the caller's tenant; the sandbox and the audit record show them,
// and the manager has them with the creating key.
func TestCreateWithTools(t *testing.T) {
	ctx := context.Background()
	res := &fakeResolver{}
	e := newTestEnv(t, func(c *Config) { c.ToolResolver = res })
	sb, err := e.client(keyA).CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"echo"}, Toolsets: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"echo", "fetch", "search"}
	if !slices.Equal(sb.Tools, want) {
		t.Errorf("created sandbox's tools = %q, want %q", sb.Tools, want)
	}
	if got, err := e.client(keyA).GetSandbox(ctx, sb.ID); err != nil || !slices.Equal(got.Tools, want) {
		t.Errorf("GET shows tools %q, %v", got.Tools, err)
	}
	if m, _ := e.mgr.Get(sb.ID); !slices.Equal(m.Tools, want) {
		t.Errorf("the manager's sandbox has tools %q", m.Tools)
	}
	var found bool
	for _, ev := range e.audit.take() {
		if ev.Action == ActionSandboxCreate && ev.Outcome == audit.OutcomeIntent {
			found = fmt.Sprint(ev.Details["tools"]) == fmt.Sprint(want)
		}
	}
	if !found {
		t.Error("the create's audit intent does not name the granted tools")
	}
	// Without tools the sandbox shows none and nothing is resolved.
	res.asked = nil
	plain, err := e.client(keyA).CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil || len(plain.Tools) != 0 || len(res.asked) != 0 {
		t.Errorf("a create without tools: %+v %v, resolver asked %v", plain, err, res.asked)
	}
}

func TestCreateWithToolsRefused(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, func(c *Config) { c.ToolResolver = &fakeResolver{} })
	long := make([]string, 257)
	for i := range long {
		long[i] = "echo"
	}
	for _, tt := range []struct {
		name     string
		key      string
		req      client.CreateSandboxRequest
		code     string
		contains string
	}{
		{"unknown tool", keyA, client.CreateSandboxRequest{Tools: []string{"echo", "nope"}}, CodeNotFound, "tool nope"},
		{"unknown toolset", keyA, client.CreateSandboxRequest{Toolsets: []string{"nope"}}, CodeNotFound, "toolset nope"},
		{"another tenant's tool", keyB, client.CreateSandboxRequest{Tools: []string{"echo"}}, CodeNotFound, "tool echo"},
		{"empty name", keyA, client.CreateSandboxRequest{Tools: []string{""}}, CodeInvalidArgument, "tools[0] is empty"},
		{"too many", keyA, client.CreateSandboxRequest{Toolsets: long}, CodeInvalidArgument, "at most 256"},
	} {
		_, err := e.client(tt.key).CreateSandbox(ctx, tt.req)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Code != tt.code || !strings.Contains(ae.Message, tt.contains) {
			t.Errorf("%s: %v, want %s %q", tt.name, err, tt.code, tt.contains)
		}
	}
	if n := len(e.mgr.List(sandbox.Filter{})); n != 0 {
		t.Errorf("%d sandboxes made by refused creates", n)
	}

	// A server without a gateway refuses a grant, not a plain create.
	plain := newTestEnv(t)
	_, err := plain.client(keyA).CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"echo"}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented || !strings.Contains(ae.Message, "no tool gateway") {
		t.Errorf("tools on a server without a gateway: %v", err)
	}
}
