package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/auth"
)

// TestFilesUserParam: every file route takes user (user or root; absent
// is the sandbox's default user) and hands it to the agent, which acts as
// that user: here (the fake runtime, whose agent does not switch ids) the
// user shows in where relative paths start, /home/user or /root. A key
// with the files scope alone may act as root. The audit record names a
// user that was asked for.
func TestFilesUserParam(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := e.sandbox(ctx)
	const filesOnly = "secret-key-files-only"
	e.auth.keys[filesOnly] = auth.Principal{TenantID: tenantA, KeyID: "kfiles", Scopes: []auth.Scope{auth.ScopeFiles}}
	c := e.client(filesOnly)
	root := client.AsUser("root")

	for _, route := range []struct{ method, path string }{
		{"PUT", "/files?path=f"}, {"GET", "/files?path=f"}, {"HEAD", "/files?path=f"}, {"DELETE", "/files?path=f"},
		{"GET", "/files/list?path=."}, {"POST", "/files/mkdir?path=d"},
	} {
		for _, bad := range []string{"admin", "0", "ROOT"} {
			resp, body := e.do(route.method, "/v1/sandboxes/"+sb.ID+route.path+"&user="+bad, filesOnly, "", nil)
			if resp.StatusCode != http.StatusBadRequest || (route.method != "HEAD" && !strings.Contains(string(body), `user must be \"user\" or \"root\"`)) {
				t.Errorf("%s %s user=%s: %d %s", route.method, route.path, bad, resp.StatusCode, body)
			}
		}
	}

	e.audit.take()
	info, err := c.WriteFile(ctx, sb.ID, "rel.txt", strings.NewReader("root's"), root)
	if err != nil || info.Path != "/root/rel.txt" {
		t.Fatalf("write as root: %+v, %v", info, err)
	}
	var sawUser bool
	for _, ev := range e.audit.take() {
		if ev.Action == ActionFileWrite && ev.Details["user"] == "root" {
			sawUser = true
		}
	}
	if !sawUser {
		t.Error("the audit records of the write do not name user root")
	}
	info, err = c.WriteFile(ctx, sb.ID, "rel.txt", strings.NewReader("user's"), client.AsUser("user"))
	if err != nil || info.Path != "/home/user/rel.txt" {
		t.Fatalf("write as user: %+v, %v", info, err)
	}
	if info, err = c.WriteFile(ctx, sb.ID, "default.txt", strings.NewReader("x")); err != nil || info.Path != "/home/user/default.txt" {
		t.Fatalf("write as the default user: %+v, %v", info, err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "rel.txt", root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "root's" {
		t.Errorf("read rel.txt as root: %q, %v", got, err)
	}
	ents, _, err := c.ListDir(ctx, sb.ID, "", 1, root)
	if err != nil || len(ents) != 1 || ents[0].Path != "/root/rel.txt" {
		t.Errorf("list root's home: %+v, %v", ents, err)
	}
	if d, err := c.MakeDir(ctx, sb.ID, "made", root); err != nil || d.Path != "/root/made" {
		t.Errorf("mkdir as root: %+v, %v", d, err)
	}
	if err := c.RemoveFile(ctx, sb.ID, "made", false, root); err != nil {
		t.Errorf("remove as root: %v", err)
	}
	if _, err := e.mgr.Stat(ctx, sb.ID, "/root/made"); err == nil {
		t.Error("/root/made is still there")
	}
}
