package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// hostSource is the "host" template (the fake runtime mounts nothing).
type hostSource struct{}

func (hostSource) Name() string { return "host" }
func (hostSource) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	return runtime.Rootfs{Layers: []string{"/nonexistent/host"}}, ctx.Err()
}

// cliEnv is a real API server (real store, auth and audit log in a
// temporary directory, a real Manager on the fake runtime) for the CLI.
type cliEnv struct {
	t     *testing.T
	srv   *httptest.Server
	mgr   *sandbox.Manager
	rt    *runtimefake.Runtime
	auth  *auth.Service
	admin string // the admin key of the default tenant
	// signer signs the server's audit checkpoints.
	signer *audit.Signer
	// env is the environment the CLI sees; tests may change it.
	env map[string]string
	// secrets is the server's secret store.
	secrets *secrets.Store
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	ctx := context.Background()
	e := &cliEnv{t: t}
	var err error
	e.rt, err = runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.rt.Close(context.Background()) })
	reg, err := template.NewRegistry(hostSource{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e.mgr, err = sandbox.New(e.rt, reg, sandbox.Config{StateDir: filepath.Join(t.TempDir(), "state"), HealthInterval: -1, Records: st}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.mgr.Close(context.Background()) })
	e.auth, err = auth.NewService(st, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.New(ctx, st, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close(context.Background()) })
	dataDir := t.TempDir()
	if e.admin, err = e.auth.EnsureAdmin(ctx, dataDir); err != nil || e.admin == "" {
		t.Fatalf("admin key: %q, %v", e.admin, err)
	}
	if e.signer, _, err = audit.LoadSigner(filepath.Join(dataDir, "checkpoint.key")); err != nil {
		t.Fatal(err)
	}
	secretsKey, _, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if e.secrets, err = secrets.New(st, secrets.Options{Key: secretsKey}); err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Sandboxes: e.mgr, Auth: e.auth, Audit: log, AuditLog: log, AuditSigner: e.signer, Keys: e.auth,
		Tenants: e.auth, Quota: e.auth, Secrets: e.secrets, Tools: gateway.NewRegistry(st),
		Policies: st})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	e.env = map[string]string{envURL: e.srv.URL, envAPIKey: e.admin, envDataDir: t.TempDir()}
	return e
}

// result is what one CLI run did.
type result struct {
	code           int
	err            error
	stdout, stderr string
}

// run runs the CLI with args and stdin.
func (e *cliEnv) run(stdin string, args ...string) result {
	e.t.Helper()
	return e.runCtx(context.Background(), strings.NewReader(stdin), args...)
}

func (e *cliEnv) runCtx(ctx context.Context, stdin io.Reader, args ...string) result {
	e.t.Helper()
	var out, errb bytes.Buffer
	c := &cli{stdin: stdin, stdout: &out, stderr: &errb, getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client()}
	code, err := c.main(ctx, args)
	return result{code: code, err: err, stdout: out.String(), stderr: errb.String()}
}

// ok runs the CLI and fails the test unless it exits 0.
func (e *cliEnv) ok(stdin string, args ...string) result {
	e.t.Helper()
	r := e.run(stdin, args...)
	if r.code != 0 || r.err != nil {
		e.t.Fatalf("airlock %s: code %d, err %v, stderr %q", strings.Join(args, " "), r.code, r.err, r.stderr)
	}
	return r
}

// create makes a sandbox with the CLI and returns its ID.
func (e *cliEnv) create(args ...string) string {
	e.t.Helper()
	id := strings.TrimSpace(e.ok("", append([]string{"sandbox", "create"}, args...)...).stdout)
	if !sandbox.ValidID(id) {
		e.t.Fatalf("sandbox create printed %q", id)
	}
	return id
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	return v
}

func TestCLISandboxLifecycle(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create("-t", "host", "--timeout", "10m", "--memory", "256", "--cpus", "0.5", "-m", "job=7", "-e", "A=1")
	sb := decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "create", "--json", "-m", "job=8").stdout)
	if !sandbox.ValidID(sb.ID) || sb.State != "running" || sb.Metadata["job"] != "8" {
		t.Errorf("create --json: %+v", sb)
	}

	got := decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "get", id, "--json").stdout)
	if got.ID != id || got.Limits.MemoryMB != 256 || got.Limits.CPUs != 0.5 || got.Metadata["job"] != "7" ||
		time.Until(got.ExpiresAt) < 9*time.Minute || time.Until(got.ExpiresAt) > 11*time.Minute {
		t.Errorf("get --json: %+v", got)
	}
	desc := e.ok("", "sandbox", "get", id).stdout
	for _, want := range []string{"ID:", id, "State:", "running", "memory=256MB", "Metadata job:", "7"} {
		if !strings.Contains(desc, want) {
			t.Errorf("sandbox get output lacks %q:\n%s", want, desc)
		}
	}
	// The sandbox env reaches commands.
	if r := e.ok("", "exec", id, "--", "sh", "-c", "echo $A"); r.stdout != "1\n" {
		t.Errorf("sandbox env: %q", r.stdout)
	}

	table := e.ok("", "sandbox", "ls").stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(table, id) || !strings.Contains(table, sb.ID) ||
		!strings.Contains(table, "job=7") {
		t.Errorf("sandbox ls:\n%s", table)
	}
	if l := decodeJSON[[]wire.Sandbox](t, e.ok("", "sandbox", "ls", "--json").stdout); len(l) != 2 {
		t.Errorf("ls --json: %d sandboxes", len(l))
	}
	if l := decodeJSON[[]wire.Sandbox](t, e.ok("", "sandbox", "ls", "-m", "job=8", "--json").stdout); len(l) != 1 || l[0].ID != sb.ID {
		t.Errorf("ls -m job=8: %+v", l)
	}
	if l := decodeJSON[[]wire.Sandbox](t, e.ok("", "sandbox", "ls", "--state", "stopped", "--json").stdout); len(l) != 0 {
		t.Errorf("ls --state stopped: %+v", l)
	}

	if r := e.ok("", "sandbox", "extend", id, "30m"); !strings.Contains(r.stdout, id+" expires at") {
		t.Errorf("extend: %q", r.stdout)
	}
	got = decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "extend", id, "1h", "--json").stdout)
	if d := time.Until(got.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("after extend by 1h, expires in %v", d)
	}

	if r := e.ok("", "sandbox", "rm", id, sb.ID); r.stdout != id+"\n"+sb.ID+"\n" {
		t.Errorf("rm printed %q", r.stdout)
	}
	if got := decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "get", id, "--json").stdout); got.State != "stopped" || got.StoppedAt == nil {
		t.Errorf("after rm: %+v", got)
	}
	const missing = "sb-aaaaaaaaaaaaaaaa"
	r := e.run("", "sandbox", "rm", missing)
	if r.code != 1 || !strings.Contains(r.stderr, missing+": sandbox "+missing+": not found") {
		t.Errorf("rm of a missing sandbox: %+v", r)
	}
}

// API errors are one line: the server's message.
func TestCLIErrors(t *testing.T) {
	e := newCLIEnv(t)
	const missing = "sb-aaaaaaaaaaaaaaaa"
	r := e.run("", "sandbox", "get", missing)
	if r.code != 1 || r.err == nil || r.err.Error() != "sandbox "+missing+": not found" {
		t.Errorf("get of a missing sandbox: code %d, err %q", r.code, r.err)
	}
	r = e.run("", "sandbox", "create", "--memory", "99999999")
	if r.code != 1 || r.err == nil || strings.Contains(r.err.Error(), "airlock") || strings.Contains(r.err.Error(), "\n") {
		t.Errorf("create over the limits: code %d, err %q", r.code, r.err)
	}
	e.env[envURL] = "http://127.0.0.1:1"
	r = e.run("", "sandbox", "ls")
	if r.code != 1 || r.err == nil || strings.HasPrefix(r.err.Error(), "airlock:") {
		t.Errorf("unreachable server: code %d, err %q", r.code, r.err)
	}
	// --url wins over AIRLOCK_URL.
	if r := e.run("", "--url", e.srv.URL, "sandbox", "ls"); r.code != 0 {
		t.Errorf("--url before the verb: %+v", r)
	}
	if r := e.run("", "sandbox", "ls", "--url", e.srv.URL); r.code != 0 {
		t.Errorf("--url after the verb: %+v", r)
	}
}

func TestCLIUsageErrors(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"--nope", "sandbox", "ls"},
		{"sandbox"},
		{"sandbox", "bogus"},
		{"sandbox", "ls", "--nope"},
		{"sandbox", "ls", "extra"},
		{"sandbox", "get"},
		{"sandbox", "create", "--memory", "lots"},
		{"sandbox", "create", "--memory", "-5"},
		{"sandbox", "create", "-m", "novalue"},
		{"sandbox", "extend", id},
		{"sandbox", "extend", id, "soon"},
		{"sandbox", "rm"},
		{"exec"},
		{"exec", id},
		{"exec", id, "--"},
		{"exec", "--timeout", "x", id, "--", "true"},
		{"run"},
		{"run", "--memory", "x", "--", "true"},
		{"cp", "a"},
		{"cp", "a", "b"},
		{"cp", id + ":/a", id + ":/b"},
		{"shell"},
		{"audit", "--since", "whenever"},
		{"audit", "extra"},
		{"audit", "--limit", "-1"},
		{"audit", "verify", "--checkpoint", "12"},
		{"keys"},
		{"keys", "create", "--scope", "exec"},
		{"keys", "create", "--name", "x"},
		{"keys", "revoke"},
		{"tenants"},
		{"tenants", "create"},
		{"tenants", "create", "a", "b"},
		{"tenants", "create", "--max-sandboxes", "-1", "a"},
		{"tenants", "ls", "x"},
		{"tenants", "rm"},
		{"tenants", "frobnicate"},
	} {
		r := e.run("", args...)
		if r.code != 2 || !errors.Is(r.err, errUsage) || strings.Contains(r.err.Error(), "\n") || r.stdout != "" {
			t.Errorf("airlock %q: code %d, err %v; want 2 and a one-line usage error", args, r.code, r.err)
		}
	}
	// Help is not an error.
	for _, args := range [][]string{{"sandbox", "-h"}, {"sandbox", "create", "-h"}, {"exec", "--help"}, {"keys", "help"}, {"audit", "-h"}} {
		r := e.run("", args...)
		if r.code != 0 || r.err != nil || !strings.Contains(r.stdout, "usage") {
			t.Errorf("airlock %q: code %d, err %v, stdout %q", args, r.code, r.err, r.stdout)
		}
	}
}

func TestReadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("abcd"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path  string
		stdin io.Reader
		max   int64
		want  string
		err   error
	}{
		{file, strings.NewReader("ignored"), 4, "abcd", nil},
		{file, nil, 3, "", errInputTooLarge},
		{filepath.Join(dir, "missing"), nil, 4, "", fs.ErrNotExist},
		{"-", strings.NewReader("in"), 2, "in", nil},
		{"-", strings.NewReader("in!"), 2, "", errInputTooLarge},
		{"-", nil, 2, "", nil},
	}
	for _, tt := range tests {
		b, err := readInput(tt.path, tt.stdin, tt.max)
		if string(b) != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("readInput(%s, max %d) = %q, %v; want %q, %v", filepath.Base(tt.path), tt.max, b, err, tt.want, tt.err)
		}
	}
}

func TestCLIAdminKeyFallback(t *testing.T) {
	e := newCLIEnv(t)
	dir := t.TempDir()
	delete(e.env, envAPIKey)
	e.env[envDataDir] = dir
	r := e.run("", "sandbox", "ls")
	if r.code != 2 || r.err == nil || !strings.Contains(r.err.Error(), envAPIKey) {
		t.Errorf("no key anywhere: %+v", r)
	}
	if err := os.WriteFile(filepath.Join(dir, adminKeyFile), []byte(e.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("", "sandbox", "ls")
	// AIRLOCK_API_KEY wins over the file.
	e.env[envAPIKey] = "al_aaaaaaaaaaaa_" + strings.Repeat("a", 52)
	if r := e.run("", "sandbox", "ls"); r.code != 1 || !strings.Contains(r.err.Error(), "invalid API key") {
		t.Errorf("a bad AIRLOCK_API_KEY with a good admin.key: %+v", r)
	}
}

func TestCLIKeys(t *testing.T) {
	e := newCLIEnv(t)
	r := e.ok("", "keys", "create", "--name", "ci", "--scope", "sandboxes:read", "--scope", "exec")
	key := strings.TrimSpace(r.stdout)
	id, _, ok := auth.ParseToken(key)
	if !ok || !strings.Contains(r.stderr, "shown only once") || !strings.Contains(r.stderr, id) {
		t.Fatalf("keys create: stdout %q stderr %q", r.stdout, r.stderr)
	}
	table := e.ok("", "keys", "ls").stdout
	if !strings.Contains(table, id) || !strings.Contains(table, "exec,sandboxes:read") || !strings.Contains(table, "active") ||
		strings.Contains(table, key) {
		t.Errorf("keys ls:\n%s", table)
	}
	keys := decodeJSON[[]wire.CreatedKey](t, e.ok("", "keys", "ls", "--json").stdout)
	if len(keys) != 2 || keys[1].ID != id || keys[1].Key != "" || keys[1].RevokedAt != nil {
		t.Errorf("keys ls --json: %+v", keys)
	}
	jk := decodeJSON[wire.CreatedKey](t, e.ok("", "keys", "create", "--name", "j", "--scope", "files", "--expires", "24h", "--json").stdout)
	if jk.Key == "" || jk.ExpiresAt == nil || time.Until(*jk.ExpiresAt) < 23*time.Hour {
		t.Errorf("keys create --json: %+v", jk)
	}

	// The new key works within its scopes.
	admin := e.env[envAPIKey]
	e.env[envAPIKey] = key
	e.ok("", "sandbox", "ls")
	if r := e.run("", "sandbox", "create"); r.code != 1 || !strings.Contains(r.err.Error(), "sandboxes:write") {
		t.Errorf("create with a read-only key: %+v", r)
	}
	if r := e.run("", "keys", "ls"); r.code != 1 || !strings.Contains(r.err.Error(), "admin") {
		t.Errorf("keys ls without admin: %+v", r)
	}
	e.env[envAPIKey] = admin

	if r := e.ok("", "keys", "revoke", id); r.stdout != id+"\n" {
		t.Errorf("revoke printed %q", r.stdout)
	}
	if r := e.run("", "keys", "revoke", "nosuchkey123"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("revoke of a missing key: %+v", r)
	}
	e.env[envAPIKey] = key
	if r := e.run("", "sandbox", "ls"); r.code != 1 || r.err.Error() != "invalid API key" {
		t.Errorf("revoked key: code %d err %v", r.code, r.err)
	}
	e.env[envAPIKey] = admin
	if table := e.ok("", "keys", "ls").stdout; !strings.Contains(table, "revoked") {
		t.Errorf("keys ls after revoke:\n%s", table)
	}
	if r := e.run("", "keys", "create", "--name", "x", "--scope", "superuser"); r.code != 1 || !strings.Contains(r.err.Error(), "unknown scope") {
		t.Errorf("unknown scope: %+v", r)
	}
}

func TestCLIAudit(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	e.ok("", "exec", id, "--", "true")
	e.ok("", "keys", "create", "--name", "x", "--scope", "exec")
	e.ok("", "sandbox", "rm", id)

	table := e.ok("", "audit").stdout
	for _, want := range []string{"SEQ", "sandbox.create", "sandbox.exec", "key.create", "sandbox.delete", id, "ok"} {
		if !strings.Contains(table, want) {
			t.Errorf("audit table lacks %q:\n%s", want, table)
		}
	}
	recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--action", "sandbox.create", "--json").stdout)
	// Each mutation is an intent and its outcome (newest first).
	if len(recs) != 2 || recs[1]["outcome"] != "intent" || recs[0]["action"] != "sandbox.create" || recs[0]["target"] != id {
		t.Errorf("audit --action sandbox.create --json: %+v", recs)
	}
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--target", id, "--json").stdout); len(recs) != 5 {
		t.Errorf("audit --target: %d records, want 5", len(recs))
	}
	// Newest first by default; --tail is the latest, oldest first;
	// --oldest-first and --after page from the start.
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--limit", "2", "--json").stdout); len(recs) != 2 ||
		recs[0]["seq"] != 8.0 || recs[1]["seq"] != 7.0 {
		t.Errorf("audit --limit 2: %v, want records 8 and 7", recs)
	}
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--tail", "3", "--json").stdout); len(recs) != 3 ||
		recs[0]["seq"] != 6.0 || recs[2]["seq"] != 8.0 {
		t.Errorf("audit --tail 3: %v, want records 6 to 8", recs)
	}
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--oldest-first", "--limit", "2", "--json").stdout); len(recs) != 2 || recs[0]["seq"] != 1.0 {
		t.Errorf("audit --oldest-first: %v", recs)
	}
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--after", "6", "--json").stdout); len(recs) != 2 || recs[0]["seq"] != 7.0 {
		t.Errorf("audit --after 6: %v", recs)
	}
	if tbl := e.ok("", "audit").stdout; strings.Index(tbl, "sandbox.delete") > strings.Index(tbl, "sandbox.create") {
		t.Errorf("audit is not newest first:\n%s", tbl)
	}
	for _, bad := range [][]string{{"--tail", "2", "--limit", "3"}, {"--after", "2", "--follow"}, {"--tail", "-1"}} {
		if r := e.run("", append([]string{"audit"}, bad...)...); r.code != 2 {
			t.Errorf("audit %v: %+v, want a usage error", bad, r)
		}
	}
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--since", "1h", "--json").stdout); len(recs) != 8 {
		t.Errorf("audit --since 1h: %d records", len(recs))
	}
	if recs := decodeJSON[[]map[string]any](t, e.ok("", "audit", "--since", time.Now().Add(time.Hour).Format(time.RFC3339), "--json").stdout); len(recs) != 0 {
		t.Errorf("audit --since in an hour: %d records", len(recs))
	}

	r := e.ok("", "audit", "verify")
	if !strings.HasPrefix(r.stdout, "ok: 8 records verified") || !strings.Contains(r.stdout, "head: 8:") {
		t.Errorf("audit verify: %q", r.stdout)
	}
	rep := decodeJSON[map[string]any](t, e.ok("", "audit", "verify", "--json").stdout)
	if rep["ok"] != true {
		t.Errorf("audit verify --json: %v", rep)
	}
	head := strings.TrimSpace(strings.SplitN(r.stdout, "head: ", 2)[1])
	e.ok("", "audit", "verify", "--checkpoint", head)
	r = e.run("", "audit", "verify", "--checkpoint", "2:"+strings.Repeat("ab", 32))
	if r.code != 1 || !strings.Contains(r.stdout, "BROKEN: record 2") {
		t.Errorf("verify with a forged checkpoint: %+v", r)
	}
}

// syncBuffer is a writer safe for the CLI's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCLITenants(t *testing.T) {
	e := newCLIEnv(t)
	r := e.ok("", "tenants", "create", "--id", "acme", "--max-sandboxes", "3", "Acme Corp")
	key := strings.TrimSpace(r.stdout)
	if _, _, ok := auth.ParseToken(key); !ok || !strings.Contains(r.stderr, "acme") || !strings.Contains(r.stderr, "shown only once") {
		t.Fatalf("tenants create: stdout %q stderr %q", r.stdout, r.stderr)
	}
	jt := decodeJSON[wire.CreatedTenant](t, e.ok("", "tenants", "create", "--json", "Generated").stdout)
	if !strings.HasPrefix(jt.ID, "t-") || jt.Name != "Generated" || jt.AdminKey.Key == "" || strings.Join(jt.AdminKey.Scopes, ",") != "admin" {
		t.Errorf("tenants create --json: %+v", jt)
	}
	table := e.ok("", "tenants", "ls").stdout
	for _, want := range []string{"ID", "MAX SANDBOXES", "acme", "Acme Corp", "3", jt.ID, "default"} {
		if !strings.Contains(table, want) {
			t.Errorf("tenants ls lacks %q:\n%s", want, table)
		}
	}
	list := decodeJSON[[]wire.Tenant](t, e.ok("", "tenants", "ls", "--json").stdout)
	if len(list) != 3 {
		t.Errorf("tenants ls --json: %+v", list)
	}

	// The tenant's key works in its tenant, and is no operator.
	op := e.env[envAPIKey]
	e.env[envAPIKey] = key
	id := e.create()
	if r := e.run("", "tenants", "ls"); r.code != 1 || !strings.Contains(r.err.Error(), "operator") {
		t.Errorf("tenants ls with a tenant's admin key: %+v", r)
	}
	e.env[envAPIKey] = op

	if r := e.run("", "tenants", "rm", "acme"); r.code != 1 || !strings.Contains(r.stderr, "sandboxes") {
		t.Errorf("rm with a live sandbox: %+v", r)
	}
	e.env[envAPIKey] = key
	e.ok("", "sandbox", "rm", id)
	e.env[envAPIKey] = op
	if r := e.ok("", "tenants", "rm", "acme", jt.ID); r.stdout != "acme\n"+jt.ID+"\n" {
		t.Errorf("tenants rm printed %q", r.stdout)
	}
	if r := e.run("", "tenants", "rm", "acme"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("rm again: %+v", r)
	}
	e.env[envAPIKey] = key
	if r := e.run("", "sandbox", "ls"); r.code != 1 || r.err.Error() != "invalid API key" {
		t.Errorf("a deleted tenant's key: code %d err %v", r.code, r.err)
	}
}

// TestCLIDaemonDown: with nothing listening, the CLI says that no daemon
// answers and where it looked, not a raw dial error.
func TestCLIDaemonDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	var out bytes.Buffer
	c := &cli{stdout: &out, getenv: func(k string) string {
		return map[string]string{envURL: url, envAPIKey: "ak_test"}[k]
	}}
	code, err := c.main(context.Background(), []string{"sandbox", "ls"})
	if code != 1 || err == nil || !strings.Contains(err.Error(), "no Airlock daemon answers at "+url+": is `airlock serve` running?") {
		t.Errorf("sandbox ls with no daemon: %d, %v", code, err)
	}
}
