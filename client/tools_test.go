package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
)

// TestToolRequests: each tool and toolset method sends its method, path
// and body, and decodes the answer.
func TestToolRequests(t *testing.T) {
	const tool = `{"name":"get_x","description":"d","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"governance":{"timeout_s":5},"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z"}`
	const set = `{"name":"s","tools":["get_x"],"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z"}`
	var got []string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		switch r.Method + " " + r.URL.Path {
		case "POST /prefix/v1/tools":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, tool)
		case "PUT /prefix/v1/tools/get_x", "GET /prefix/v1/tools/get_x":
			io.WriteString(w, tool)
		case "GET /prefix/v1/tools":
			io.WriteString(w, `{"tools":[`+tool+`]}`)
		case "POST /prefix/v1/toolsets":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, set)
		case "PUT /prefix/v1/toolsets/s", "GET /prefix/v1/toolsets/s":
			io.WriteString(w, set)
		case "GET /prefix/v1/toolsets":
			io.WriteString(w, `{"toolsets":null}`)
		case "DELETE /prefix/v1/tools/get_x", "DELETE /prefix/v1/toolsets/s":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
		}
	})
	ctx := context.Background()
	req := PutToolRequest{Name: "get_x", InputSchema: json.RawMessage(`{"type":"object"}`)}
	req.Upstream.Kind = "caller"
	req.Governance.TimeoutS = 5
	tl, err := c.CreateTool(ctx, req)
	if err != nil || tl.Name != "get_x" || tl.Governance.TimeoutS != 5 || string(tl.InputSchema) != `{"type":"object"}` || tl.CreatedAt.IsZero() {
		t.Fatalf("CreateTool = %+v, %v", tl, err)
	}
	req.Name = ""
	if _, err := c.ReplaceTool(ctx, "get_x", req); err != nil {
		t.Errorf("ReplaceTool: %v", err)
	}
	if tl, err := c.GetTool(ctx, "get_x"); err != nil || tl.Upstream.Kind != "caller" {
		t.Errorf("GetTool = %+v, %v", tl, err)
	}
	if l, err := c.ListTools(ctx); err != nil || len(l) != 1 {
		t.Errorf("ListTools = %+v, %v", l, err)
	}
	if s, err := c.CreateToolset(ctx, PutToolsetRequest{Name: "s", Tools: []string{"get_x"}}); err != nil || !slices.Equal(s.Tools, []string{"get_x"}) {
		t.Errorf("CreateToolset = %+v, %v", s, err)
	}
	if _, err := c.ReplaceToolset(ctx, "s", PutToolsetRequest{}); err != nil {
		t.Errorf("ReplaceToolset: %v", err)
	}
	if _, err := c.GetToolset(ctx, "s"); err != nil {
		t.Errorf("GetToolset: %v", err)
	}
	if l, err := c.ListToolsets(ctx); err != nil || l == nil || len(l) != 0 {
		t.Errorf("ListToolsets = %#v, %v; want an empty list", l, err)
	}
	if err := c.DeleteTool(ctx, "get_x"); err != nil {
		t.Errorf("DeleteTool: %v", err)
	}
	if err := c.DeleteToolset(ctx, "s"); err != nil {
		t.Errorf("DeleteToolset: %v", err)
	}
	if _, err := c.GetTool(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetTool(nope) = %v, want ErrNotFound", err)
	}
	want := []string{
		`POST /prefix/v1/tools {"name":"get_x","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"governance":{"timeout_s":5}}`,
		`PUT /prefix/v1/tools/get_x {"input_schema":{"type":"object"},"upstream":{"kind":"caller"},"governance":{"timeout_s":5}}`,
		`GET /prefix/v1/tools/get_x `,
		`GET /prefix/v1/tools `,
		`POST /prefix/v1/toolsets {"name":"s","tools":["get_x"]}`,
		`PUT /prefix/v1/toolsets/s {"tools":[]}`,
		`GET /prefix/v1/toolsets/s `,
		`GET /prefix/v1/toolsets `,
		`DELETE /prefix/v1/tools/get_x `,
		`DELETE /prefix/v1/toolsets/s `,
		`GET /prefix/v1/tools/nope `,
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}

// TestToolNamesRefused: a name that cannot be a path segment is refused
// before any request; the server's 409 is ErrConflict.
func TestToolNamesRefused(t *testing.T) {
	var calls atomic.Int32
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":{"code":"already_exists","message":"tool x: already exists"}}`)
	})
	ctx := context.Background()
	for _, name := range []string{"", ".", ".."} {
		if _, err := c.GetTool(ctx, name); !errors.Is(err, ErrInvalid) {
			t.Errorf("GetTool(%q) = %v, want ErrInvalid", name, err)
		}
		if _, err := c.CreateTool(ctx, PutToolRequest{Name: name}); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateTool(%q) = %v, want ErrInvalid", name, err)
		}
		if err := c.DeleteToolset(ctx, name); !errors.Is(err, ErrInvalid) {
			t.Errorf("DeleteToolset(%q) = %v, want ErrInvalid", name, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests sent for invalid names", n)
	}
	if _, err := c.CreateTool(ctx, PutToolRequest{Name: "x"}); !errors.Is(err, ErrConflict) {
		t.Errorf("CreateTool of a taken name = %v, want ErrConflict", err)
	}
}
