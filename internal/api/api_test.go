package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestSandboxLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Template: "other",
		Timeout:  90 * time.Second,
		Limits:   &client.Limits{MemoryMB: 256, Pids: 64},
		Network:  &client.Network{Mode: "none"},
		Env:      map[string]string{"GREETING": "hello"},
		Metadata: map[string]string{"team": "ml", "run": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != client.StateRunning || sb.Template != "other" || sb.Metadata["team"] != "ml" {
		t.Errorf("created %+v", sb)
	}
	if sb.Limits.MemoryMB != 256 || sb.Limits.Pids != 64 || sb.Limits.CPUs != 1 {
		t.Errorf("limits %+v, want memory 256, pids 64, default cpus 1", sb.Limits)
	}
	if d := sb.ExpiresAt.Sub(sb.CreatedAt); d != 90*time.Second {
		t.Errorf("expires %v after creation, want 90s", d)
	}
	if owner, _ := e.mgr.Get(sb.ID); owner.Owner != tenantA {
		t.Errorf("manager owner = %q, want the tenant", owner.Owner)
	}
	other, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"team": "web"}})
	if err != nil {
		t.Fatal(err)
	}

	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || !got.ExpiresAt.Equal(sb.ExpiresAt) {
		t.Fatalf("GetSandbox = %+v, %v", got, err)
	}

	list := func(opts client.ListOptions) []string {
		t.Helper()
		sbs, err := c.ListSandboxes(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range sbs {
			ids = append(ids, s.ID)
		}
		return ids
	}
	if ids := list(client.ListOptions{}); len(ids) != 2 || ids[0] != sb.ID || ids[1] != other.ID {
		t.Errorf("list = %v, want both oldest first", ids)
	}
	if ids := list(client.ListOptions{Metadata: map[string]string{"team": "ml"}}); len(ids) != 1 || ids[0] != sb.ID {
		t.Errorf("list team=ml = %v", ids)
	}
	if ids := list(client.ListOptions{Metadata: map[string]string{"team": "ml", "run": "2"}}); len(ids) != 0 {
		t.Errorf("list team=ml,run=2 = %v, want none", ids)
	}
	if ids := list(client.ListOptions{States: []client.State{client.StateStopped}}); len(ids) != 0 {
		t.Errorf("list stopped = %v, want none", ids)
	}

	upd, err := c.SetTimeout(ctx, sb.ID, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(upd.ExpiresAt); d < 9*time.Minute || d > 10*time.Minute+time.Second {
		t.Errorf("expiry after SetTimeout is %v away, want ~10m", d)
	}
	if _, err := c.SetTimeout(ctx, sb.ID, 48*time.Hour); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("SetTimeout past the max lifetime = %v, want ErrInvalid", err)
	}

	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: `echo "$GREETING $X"; echo oops >&2; exit 3`, Env: map[string]string{"X": "world"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello world\n" || string(res.Stderr) != "oops\n" || res.ExitCode != 3 || res.Status != client.StatusError {
		t.Errorf("exec = %+v (stdout %q stderr %q)", res, res.Stdout, res.Stderr)
	}

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StateStopped || got.StoppedAt.IsZero() {
		t.Errorf("after delete: %+v, %v; want stopped", got, err)
	}
	if ids := list(client.ListOptions{States: []client.State{client.StateStopped}}); len(ids) != 1 || ids[0] != sb.ID {
		t.Errorf("list stopped = %v", ids)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Errorf("deleting a stopped sandbox: %v, want success", err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("exec in a stopped sandbox = %v, want ErrConflict", err)
	}
	if len(e.rt.Live()) != 1 {
		t.Errorf("live instances = %v, want only the other sandbox", e.rt.Live())
	}
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	tests := []struct {
		name  string
		req   client.ExecRequest
		check func(t *testing.T, r *client.ExecResult)
	}{
		{"argv", client.ExecRequest{Cmd: []string{"printf", "%s|", "a b", "c"}}, func(t *testing.T, r *client.ExecResult) {
			if string(r.Stdout) != "a b|c|" || r.Status != client.StatusSuccess {
				t.Errorf("got %+v stdout %q", r, r.Stdout)
			}
		}},
		{"stdin text", client.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte("from stdin\n")}, func(t *testing.T, r *client.ExecResult) {
			if string(r.Stdout) != "from stdin\n" {
				t.Errorf("stdout %q", r.Stdout)
			}
		}},
		{"stdin binary, output binary", client.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte{0xff, 0x00, 0xfe, 'x'}}, func(t *testing.T, r *client.ExecResult) {
			if !bytes.Equal(r.Stdout, []byte{0xff, 0x00, 0xfe, 'x'}) {
				t.Errorf("stdout %x", r.Stdout)
			}
		}},
		{"utf8 output", client.ExecRequest{Command: "printf 'h\\303\\251llo \\360\\237\\230\\200'"}, func(t *testing.T, r *client.ExecResult) {
			if string(r.Stdout) != "héllo 😀" {
				t.Errorf("stdout %q", r.Stdout)
			}
		}},
		{"cwd and user", client.ExecRequest{Command: "pwd", Cwd: "/tmp", User: "root"}, func(t *testing.T, r *client.ExecResult) {
			if r.ExitCode != 0 || len(r.Stdout) == 0 {
				t.Errorf("got %+v", r)
			}
		}},
		{"timeout", client.ExecRequest{Command: "sleep 30", Timeout: time.Second}, func(t *testing.T, r *client.ExecResult) {
			if r.Status != client.StatusTimeout || r.Duration > 10*time.Second {
				t.Errorf("got %+v", r)
			}
		}},
		{"not found", client.ExecRequest{Cmd: []string{"/no/such/binary"}}, func(t *testing.T, r *client.ExecResult) {
			if r.Status != client.StatusError || r.ExitCode != 127 {
				t.Errorf("got %+v", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.Exec(ctx, sb.ID, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}

	t.Run("output cap", func(t *testing.T) {
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "head -c 3000000 /dev/zero"})
		if err != nil {
			t.Fatal(err)
		}
		if !r.StdoutTruncated || len(r.Stdout) != 1<<20 {
			t.Errorf("truncated=%v len=%d, want true and 1 MiB", r.StdoutTruncated, len(r.Stdout))
		}
	})
}

func TestFiles(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	info, err := c.WriteFile(ctx, sb.ID, "dir/sub/a.txt", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "/home/user/dir/sub/a.txt" || info.Size != 5 || info.Type != "file" ||
		info.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Errorf("WriteFile = %+v", info)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/home/user/dir/empty", nil); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "dir/sub/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if rc, err := c.ReadFile(ctx, sb.ID, "dir/empty"); err != nil {
		t.Fatal(err)
	} else if b, _ := io.ReadAll(rc); len(b) != 0 {
		t.Errorf("empty file read %q", b)
	}

	entries, truncated, err := c.ListDir(ctx, sb.ID, "dir", 3)
	if err != nil || truncated {
		t.Fatal(err, truncated)
	}
	var paths []string
	for _, en := range entries {
		paths = append(paths, en.Path)
	}
	if strings.Join(paths, ",") != "/home/user/dir/empty,/home/user/dir/sub,/home/user/dir/sub/a.txt" {
		t.Errorf("ListDir = %v", paths)
	}
	if entries, _, err := c.ListDir(ctx, sb.ID, "", 0); err != nil || len(entries) != 1 || entries[0].Name != "dir" {
		t.Errorf("ListDir of home = %+v, %v", entries, err)
	}

	if _, err := c.ReadFile(ctx, sb.ID, "dir"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("reading a directory = %v, want ErrInvalid", err)
	}
	if _, err := c.ReadFile(ctx, sb.ID, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("reading a missing file = %v, want ErrNotFound", err)
	}
	if err := c.RemoveFile(ctx, sb.ID, "dir", false); err == nil {
		t.Error("removing a non-empty directory without recursive succeeded")
	}
	if err := c.RemoveFile(ctx, sb.ID, "dir", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ListDir(ctx, sb.ID, "dir", 1); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("ListDir after remove = %v, want ErrNotFound", err)
	}
	// The agent keeps paths inside the sandbox.
	if _, err := c.WriteFile(ctx, sb.ID, "../../../../../../escape.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if entries, _, err := c.ListDir(ctx, sb.ID, "/", 1); err != nil || !hasEntry(entries, "/escape.txt") {
		t.Errorf("a path climbing out lands at the sandbox root: %v %v", entries, err)
	}

	// HEAD reports the size without a body.
	resp, body := e.do(http.MethodHead, "/v1/sandboxes/"+sb.ID+"/files?path=/escape.txt", keyA, "", nil)
	if resp.StatusCode != 200 || resp.ContentLength != 1 || len(body) != 0 {
		t.Errorf("HEAD = %d, length %d, body %q", resp.StatusCode, resp.ContentLength, body)
	}
}

func hasEntry(entries []client.FileInfo, path string) bool {
	for _, e := range entries {
		if e.Path == path {
			return true
		}
	}
	return false
}

func TestHealthAndRoutes(t *testing.T) {
	e := newTestEnv(t)
	resp, body := e.do("GET", "/healthz", "", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "ok") {
		t.Errorf("healthz = %d %s", resp.StatusCode, body)
	}
	resp, _ = e.do("GET", "/readyz", "", "", nil)
	if resp.StatusCode != 200 {
		t.Errorf("readyz = %d", resp.StatusCode)
	}
	e.ready = func(context.Context) error { return errors.New("store at /var/lib/secret is down") }
	resp, body = e.do("GET", "/readyz", "", "", nil)
	if resp.StatusCode != 503 || strings.Contains(string(body), "/var/lib") {
		t.Errorf("readyz when not ready = %d %s", resp.StatusCode, body)
	}

	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nope", 404, CodeNotFound},
		{"GET", "/v1/sandboxes/", 404, CodeNotFound},
		{"PATCH", "/v1/sandboxes", 405, CodeMethodNotAllowed},
		{"PUT", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa", 405, CodeMethodNotAllowed},
		{"POST", "/healthz", 405, CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		resp, body := e.do(tt.method, tt.path, keyA, "", nil)
		if resp.StatusCode != tt.status || errCode(t, body) != tt.code {
			t.Errorf("%s %s = %d %s, want %d %s", tt.method, tt.path, resp.StatusCode, body, tt.status, tt.code)
		}
		if tt.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: no Allow header", tt.method, tt.path)
		}
	}
}

// errCode returns the code of a JSON error body ("" if it is not one).
func errCode(t *testing.T, body []byte) string {
	t.Helper()
	var eb wire.Error
	if err := json.Unmarshal(body, &eb); err != nil {
		return ""
	}
	return eb.Error.Code
}

func TestPublicError(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
		leaks  string
	}{
		{errdefs.ErrNotFound, 404, CodeNotFound, ""},
		{errdefs.ErrAlreadyExists, 409, CodeAlreadyExists, ""},
		{errdefs.ErrInvalidArgument, 400, CodeInvalidArgument, ""},
		{errdefs.ErrUnauthenticated, 401, CodeUnauthenticated, ""},
		{errdefs.ErrPermissionDenied, 403, CodePermissionDenied, ""},
		{errdefs.ErrResourceExhausted, 429, CodeResourceExhausted, ""},
		{errdefs.ErrFailedPrecondition, 409, CodeFailedPrecondition, ""},
		{errdefs.ErrTimeout, 504, CodeTimeout, ""},
		{errdefs.ErrCanceled, 499, CodeCanceled, ""},
		{errdefs.ErrNotSupported, 501, CodeNotSupported, ""},
		{errors.Join(errors.New("open /var/lib/airlock/x"), errdefs.ErrUnavailable), 503, CodeUnavailable, "/var/lib"},
		{errors.New("mkdir /var/lib/airlock/sandboxes/x: permission denied"), 500, CodeInternal, "/var/lib"},
		{&http.MaxBytesError{Limit: 10}, 413, CodeRequestTooLarge, ""},
	}
	for _, tt := range tests {
		status, code, msg := publicError(tt.err)
		if status != tt.status || code != tt.code {
			t.Errorf("publicError(%v) = %d %s, want %d %s", tt.err, status, code, tt.status, tt.code)
		}
		if tt.leaks != "" && strings.Contains(msg, tt.leaks) {
			t.Errorf("publicError(%v) leaks %q: %q", tt.err, tt.leaks, msg)
		}
	}
	// The class's text is noise at the end of a message (the code says
	// it), except where it reads as a sentence.
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("sandbox sb-1 is stopped: %w", errdefs.ErrFailedPrecondition), "sandbox sb-1 is stopped"},
		{fmt.Errorf("too many sandboxes: %w", errdefs.ErrResourceExhausted), "too many sandboxes"},
		{fmt.Errorf("write /etc/x: %w", errdefs.ErrPermissionDenied), "write /etc/x: permission denied"},
		{fmt.Errorf("sandbox sb-1: %w", errdefs.ErrNotFound), "sandbox sb-1: not found"},
		{fmt.Errorf("template t: %w", errdefs.ErrAlreadyExists), "template t: already exists"},
		{errdefs.ErrFailedPrecondition, "failed precondition"},
		// An unavailable error written for the caller is shown.
		{fmt.Errorf("pull: %w", errdefs.Publicf(errdefs.ErrUnavailable, "pull r/x: the registry at 127.0.0.1:5 refused the connection")),
			"pull r/x: the registry at 127.0.0.1:5 refused the connection"},
		{errdefs.Publicf(errdefs.ErrInternal, "the build failed"), "the build failed"},
	} {
		if _, _, msg := publicError(c.err); msg != c.want {
			t.Errorf("publicError(%q) message %q, want %q", c.err, msg, c.want)
		}
	}
	if _, _, msg := publicError(errors.New(strings.Repeat("x", 5000) + ": " + errdefs.ErrInvalidArgument.Error())); len(msg) > maxMessageBytes+3 {
		t.Errorf("message not capped: %d bytes", len(msg))
	}
}
