package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// newTestRegistry returns a registry over a fresh SQLite store with the
// tenants t1 and t2, and a clock the test moves.
func newTestRegistry(t *testing.T) (*StoreRegistry, *time.Time) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, id := range []string{"t1", "t2"} {
		if err := st.CreateTenant(ctx, store.Tenant{ID: id, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	g := NewRegistry(st)
	now := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	return g, &now
}

func callerTool(name string) Tool {
	return Tool{Name: name, InputSchema: []byte(`{"type":"object"}`), Upstream: Upstream{Kind: UpstreamCaller}}
}

func TestRegistryTools(t *testing.T) {
	ctx := context.Background()
	g, now := newTestRegistry(t)
	created := *now
	in := goodTool()
	in.Owner = "someone-else" // the registry sets it
	got, err := g.CreateTool(ctx, "t1", in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "t1" || !got.CreatedAt.Equal(created) || !got.UpdatedAt.Equal(created) {
		t.Errorf("created = owner %q, %v, %v", got.Owner, got.CreatedAt, got.UpdatedAt)
	}
	if _, err := g.CreateTool(ctx, "t1", goodTool()); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("create again = %v, want already exists", err)
	}
	bad := goodTool()
	bad.Governance.TimeoutS = 301
	if _, err := g.CreateTool(ctx, "t1", bad); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "timeout_s") {
		t.Errorf("create invalid = %v, want invalid argument naming timeout_s", err)
	}

	read, err := g.Tool(ctx, "t1", "get_expenses")
	if err != nil {
		t.Fatal(err)
	}
	if read.Owner != "t1" || read.Description != in.Description || read.Upstream.HTTP.URL != in.Upstream.HTTP.URL ||
		read.Upstream.HTTP.Headers["Authorization"] != "Bearer {secret.EXPENSES_TOKEN}" || read.Governance.RatePerMinute != 600 ||
		!slices.Equal(read.Governance.Redact, []string{"employee_id"}) || string(read.InputSchema) != string(in.InputSchema) {
		t.Errorf("read back = %+v", read)
	}
	if _, err := g.Tool(ctx, "t2", "get_expenses"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's tool = %v, want not found", err)
	}

	*now = now.Add(time.Hour)
	repl := callerTool("get_expenses")
	repl.Description = "now the caller's"
	got, err = g.ReplaceTool(ctx, "t1", repl)
	if err != nil {
		t.Fatal(err)
	}
	if got.Upstream.Kind != UpstreamCaller || got.Description != "now the caller's" || !got.CreatedAt.Equal(created) || !got.UpdatedAt.Equal(*now) || got.Owner != "t1" {
		t.Errorf("replaced = %+v", got)
	}
	if _, err := g.ReplaceTool(ctx, "t2", repl); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("replace in another tenant = %v, want not found", err)
	}
	if _, err := g.ReplaceTool(ctx, "t1", bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("replace with invalid = %v, want invalid argument", err)
	}

	if _, err := g.CreateTool(ctx, "t1", callerTool("alpha")); err != nil {
		t.Fatal(err)
	}
	list, err := g.ListTools(ctx, "t1")
	if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "get_expenses" || list[1].Owner != "t1" {
		t.Errorf("list = %+v, %v", list, err)
	}
	if list, err := g.ListTools(ctx, "t2"); err != nil || len(list) != 0 {
		t.Errorf("list t2 = %+v, %v", list, err)
	}
	if err := g.DeleteTool(ctx, "t2", "alpha"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete another tenant's = %v", err)
	}
	if err := g.DeleteTool(ctx, "t1", "alpha"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Tool(ctx, "t1", "alpha"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted tool = %v", err)
	}
}

func TestRegistryToolsets(t *testing.T) {
	ctx := context.Background()
	g, now := newTestRegistry(t)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := g.CreateTool(ctx, "t1", callerTool(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.CreateTool(ctx, "t2", callerTool("z")); err != nil {
		t.Fatal(err)
	}
	s, err := g.CreateToolset(ctx, "t1", Toolset{Name: "ab", Tools: []string{"b", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Owner != "t1" || !s.CreatedAt.Equal(*now) || !slices.Equal(s.Tools, []string{"b", "a"}) {
		t.Errorf("created = %+v", s)
	}
	if _, err := g.CreateToolset(ctx, "t1", Toolset{Name: "ab"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("create again = %v", err)
	}
	// A toolset may list only the tenant's own registered tools.
	_, err = g.CreateToolset(ctx, "t1", Toolset{Name: "other", Tools: []string{"a", "z"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "tools[1]: tool z is not registered") {
		t.Errorf("toolset with another tenant's tool = %v", err)
	}
	if _, err := g.CreateToolset(ctx, "t1", Toolset{Name: "Bad"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad name = %v", err)
	}
	empty, err := g.CreateToolset(ctx, "t1", Toolset{Name: "empty"})
	if err != nil || empty.Tools == nil {
		t.Errorf("empty toolset = %+v, %v; want tools [] not null", empty, err)
	}
	if _, err := g.Toolset(ctx, "t2", "ab"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's toolset = %v", err)
	}
	created := *now
	*now = now.Add(time.Minute)
	s, err = g.ReplaceToolset(ctx, "t1", Toolset{Name: "ab", Tools: []string{"c"}})
	if err != nil || !slices.Equal(s.Tools, []string{"c"}) || !s.CreatedAt.Equal(created) || !s.UpdatedAt.Equal(*now) {
		t.Errorf("replaced = %+v, %v", s, err)
	}
	if _, err := g.ReplaceToolset(ctx, "t1", Toolset{Name: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("replace missing = %v", err)
	}
	list, err := g.ListToolsets(ctx, "t1")
	if err != nil || len(list) != 2 || list[0].Name != "ab" || list[1].Name != "empty" {
		t.Errorf("list = %+v, %v", list, err)
	}
	if err := g.DeleteToolset(ctx, "t1", "empty"); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteToolset(ctx, "t1", "empty"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete again = %v", err)
	}
}

func TestRegistryResolve(t *testing.T) {
	ctx := context.Background()
	g, _ := newTestRegistry(t)
	for _, n := range []string{"a", "b", "c", "d"} {
		if _, err := g.CreateTool(ctx, "t1", callerTool(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.CreateTool(ctx, "t2", callerTool("x")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Toolset{{Name: "cb", Tools: []string{"c", "b"}}, {Name: "bd", Tools: []string{"b", "d"}}} {
		if _, err := g.CreateToolset(ctx, "t1", s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.CreateToolset(ctx, "t2", Toolset{Name: "xs", Tools: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tools, toolsets, want []string
	}{
		{nil, nil, []string{}},
		{[]string{"d", "a", "a"}, nil, []string{"a", "d"}},
		{nil, []string{"cb"}, []string{"b", "c"}},
		{[]string{"c"}, []string{"bd", "cb", "bd"}, []string{"b", "c", "d"}},
	} {
		got, err := g.Resolve(ctx, "t1", c.tools, c.toolsets)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Resolve(%v, %v) = %v, %v; want %v", c.tools, c.toolsets, got, err, c.want)
		}
	}
	for _, c := range []struct {
		tools, toolsets []string
		class           error
		want            string
	}{
		{[]string{"a", "x"}, nil, errdefs.ErrNotFound, "tool x"},
		{nil, []string{"xs"}, errdefs.ErrNotFound, "toolset xs"},
		{nil, []string{"nope"}, errdefs.ErrNotFound, "toolset nope"},
		{[]string{"Bad"}, nil, errdefs.ErrInvalidArgument, "tools: tool name"},
		{nil, []string{"class"}, errdefs.ErrInvalidArgument, "toolsets: toolset name"},
		{make([]string, MaxToolsetTools+1), nil, errdefs.ErrInvalidArgument, "at most"},
	} {
		_, err := g.Resolve(ctx, "t1", c.tools, c.toolsets)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Resolve(%v, %v) = %v; want %v saying %q", c.tools, c.toolsets, err, c.class, c.want)
		}
	}
	// A tool deleted after a toolset listed it makes the toolset refused,
	// naming both.
	if err := g.DeleteTool(ctx, "t1", "d"); err != nil {
		t.Fatal(err)
	}
	_, err := g.Resolve(ctx, "t1", nil, []string{"bd"})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "tool d of toolset bd") {
		t.Errorf("Resolve with a deleted member = %v", err)
	}
}

// TestResolveCap: the tools granted through toolsets are capped too.
func TestResolveCap(t *testing.T) {
	ctx := context.Background()
	g, _ := newTestRegistry(t)
	var half1, half2 []string
	for i := range MaxToolsetTools + 1 {
		n := fmt.Sprintf("t%03d", i)
		if _, err := g.CreateTool(ctx, "t1", callerTool(n)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			half1 = append(half1, n)
		} else {
			half2 = append(half2, n)
		}
	}
	for name, tools := range map[string][]string{"h1": half1, "h2": half2} {
		if _, err := g.CreateToolset(ctx, "t1", Toolset{Name: name, Tools: tools}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Resolve(ctx, "t1", nil, []string{"h1", "h2"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Resolve of %d tools = %v, want invalid argument", MaxToolsetTools+1, err)
	}
	got, err := g.Resolve(ctx, "t1", half2, []string{"h1"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Resolve of %d tools (named and by toolset) = %d, %v; want invalid argument", MaxToolsetTools+1, len(got), err)
	}
	got, err = g.Resolve(ctx, "t1", nil, []string{"h1"})
	if err != nil || len(got) != len(half1) {
		t.Errorf("Resolve(h1) = %d, %v", len(got), err)
	}
}

// TestRegistryLargestTool: a tool at every cap, its templates full of
// characters JSON escapes, is stored and reads back intact.
func TestRegistryLargestTool(t *testing.T) {
	ctx := context.Background()
	g, _ := newTestRegistry(t)
	schema := func(typ string) []byte {
		pad := MaxSchemaBytes - len(`{"type":"`+typ+`","description":""}`)
		return []byte(`{"type":"` + typ + `","description":"` + strings.Repeat("<", pad) + `"}`)
	}
	tl := Tool{
		Name:         strings.Repeat("x", MaxNameBytes),
		Description:  strings.Repeat("&", MaxDescriptionBytes),
		InputSchema:  schema("object"),
		OutputSchema: schema("string"),
		Upstream: Upstream{Kind: UpstreamHTTP, HTTP: &HTTPUpstream{
			Method: "POST", URL: "https://a.example.com/" + strings.Repeat("a", MaxURLBytes-len("https://a.example.com/")),
			Headers: map[string]string{}, Body: strings.Repeat(`"<`, MaxBodyBytes/2),
		}},
	}
	for i := range MaxHeaders {
		tl.Upstream.HTTP.Headers[fmt.Sprintf("X-H%02d", i)] = strings.Repeat(`"`, MaxHeaderValueBytes)
	}
	if err := tl.Validate(); err != nil {
		t.Fatalf("the largest tool is not valid: %v", err)
	}
	if _, err := g.CreateTool(ctx, "t1", tl); err != nil {
		t.Fatalf("CreateTool of the largest tool: %v", err)
	}
	got, err := g.Tool(ctx, "t1", tl.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Upstream.HTTP.Body != tl.Upstream.HTTP.Body || string(got.InputSchema) != string(tl.InputSchema) ||
		got.Upstream.HTTP.Headers["X-H31"] != tl.Upstream.HTTP.Headers["X-H31"] || got.Description != tl.Description {
		t.Error("the largest tool did not read back intact")
	}
}
