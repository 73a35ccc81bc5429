package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestFileUserQuery: AsUser puts user in the query of every file request;
// without it (or with "") none is sent, and the server picks the
// sandbox's default user.
func TestFileUserQuery(t *testing.T) {
	var mu sync.Mutex
	var got []url.Values
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Query())
		mu.Unlock()
		switch {
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(r.URL.Path, "/files") && r.Method == http.MethodGet:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, "x")
		case strings.HasSuffix(r.URL.Path, "/list"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"entries":[],"truncated":false}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"name":"f","path":"/root/f","type":"file"}`)
		}
	})
	ctx := context.Background()
	const id = "sb-aaaaaaaaaaaaaaaa"
	for _, tc := range []struct {
		opts []FileOption
		want string // the user parameter; "" for none
	}{{nil, ""}, {[]FileOption{AsUser("")}, ""}, {[]FileOption{AsUser("root")}, "root"}, {[]FileOption{AsUser("user")}, "user"}} {
		got = nil
		if _, err := c.WriteFile(ctx, id, "f", strings.NewReader("x"), tc.opts...); err != nil {
			t.Fatal(err)
		}
		rc, err := c.ReadFile(ctx, id, "f", tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if err := c.RemoveFile(ctx, id, "f", true, tc.opts...); err != nil {
			t.Fatal(err)
		}
		if _, err := c.MakeDir(ctx, id, "d", tc.opts...); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ListDir(ctx, id, "", 2, tc.opts...); err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 {
			t.Fatalf("%d requests, want 5", len(got))
		}
		for i, q := range got {
			if u, ok := q["user"]; (tc.want == "" && ok) || (tc.want != "" && (len(u) != 1 || u[0] != tc.want)) {
				t.Errorf("request %d with user %q: query %v", i, tc.want, q)
			}
		}
		if got[2].Get("recursive") != "true" || got[4].Get("depth") != "2" || got[0].Get("path") != "f" {
			t.Errorf("the other parameters: %v", got)
		}
	}
}
