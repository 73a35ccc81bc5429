package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/client"
	filesystempb "github.com/airlock-sandbox/airlock/gen/filesystem"
	"github.com/airlock-sandbox/airlock/gen/filesystem/filesystempbconnect"
	processpb "github.com/airlock-sandbox/airlock/gen/process"
	"github.com/airlock-sandbox/airlock/gen/process/processpbconnect"
)

// sdkDir holds the E2B SDK suites and their pinned npm packages.
var sdkDir = filepath.Join("..", "e2b", "sdktest")

// e2bEnv is a daemon serving the E2B edge, and what the SDKs need to
// reach it.
type e2bEnv struct {
	d   *daemon
	url string // the E2B listener
	key string // the admin key in E2B's form
}

var e2bAddr = regexp.MustCompile(`E2B-compatible API on (http://[0-9.:]+) `)

// startE2B starts a daemon with the E2B listener on a free port.
func startE2B(t *testing.T) *e2bEnv {
	t.Helper()
	e := newEnv(t, "--e2b-listen", "127.0.0.1:0", "--e2b-domain", "e2b.test")
	d := e.start()
	m := e2bAddr.FindStringSubmatch(d.Stdout())
	if m == nil {
		t.Fatalf("the daemon did not announce its E2B listener: %q", d.Stdout())
	}
	return &e2bEnv{d: d, url: m[1], key: "e2b_" + hex.EncodeToString([]byte(d.Key))}
}

// npmCI installs the suites' pinned packages from the lockfile when they
// are not there yet.
func npmCI(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "e2b", "package.json")); err == nil {
		return
	}
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is required for the E2B SDK suites (apt-get install nodejs npm)", bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = sdkDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", sdkDir, err, out)
	}
}

// node runs one of the suites against env and returns its output.
func (env *e2bEnv) node(t *testing.T, script string, extra ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+env.url, "E2B_SANDBOX_URL="+env.url, "E2B_API_KEY="+env.key, "SDKTEST_HOST_ROUTING=1")
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestE2BSDK runs the real, unmodified e2b and @e2b/code-interpreter npm
// packages (pinned, internal/e2b/sdktest/package-lock.json) against a
// daemon's E2B edge: create with metadata and env vars; commands in the
// foreground (stdout, stderr, exit codes, CommandExitError), in the
// background with a handle, stdin, kill, list and connect, streaming
// callbacks; files write/read/list/exists/makeDir/rename/remove/getInfo,
// text and binary, watchDir; getHost to a server in the sandbox (by a
// {port}-{id}.e2b.test host name); setTimeout; list with paging; connect;
// kill and what follows; and runCode with state across calls, print
// output, an error, a chart, a DataFrame and a JavaScript context. Each
// step prints ok, skip or FAIL; a skip fails the run where
// AIRLOCK_TEST_NO_SKIP is set (CI has pandas and matplotlib).
func TestE2BSDK(t *testing.T) {
	npmCI(t)
	env := startE2B(t)
	for _, script := range []string{"basic.mjs", "codeinterp.mjs"} {
		start := time.Now()
		out, err := env.node(t, script)
		t.Logf("%s (%v):\n%s", script, time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Errorf("%s failed: %v", script, err)
		}
		if os.Getenv("AIRLOCK_TEST_NO_SKIP") != "" && strings.Contains(out, "\nskip ") {
			t.Errorf("%s skipped a step", script)
		}
	}
	// Every sandbox the suites made is gone.
	list, err := env.d.C.ListSandboxes(ctxT(t, time.Minute), client.ListOptions{States: []client.State{client.StateRunning}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		track(sb.ID)
		t.Errorf("sandbox %s (%v) outlived the suites", sb.ID, sb.Metadata)
	}
}

// TestE2BBench times Sandbox.create → the first commands.run through the
// SDK against the same through Airlock's own API with fetch, alternating,
// in one run (internal/e2b/sdktest/bench.mjs); docs/BENCHMARKS.md records
// the figures. It checks only that both paths work.
func TestE2BBench(t *testing.T) {
	npmCI(t)
	env := startE2B(t)
	out, err := env.node(t, "bench.mjs", "AIRLOCK_URL="+env.d.URL, "AIRLOCK_API_KEY="+env.d.Key, "BENCH_N=20")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var res map[string]float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
		t.Fatalf("bench output %q: %v", out, err)
	}
	t.Logf("node, create → first run, p50 (p90) ms: Airlock API %.2f (%.2f), streamed exec %.2f (%.2f), E2B SDK %.2f (%.2f); the E2B SDK path adds %.2f ms p50",
		res["airlock_p50_ms"], res["airlock_p90_ms"], res["airlock_stream_p50_ms"], res["airlock_stream_p90_ms"], res["e2b_p50_ms"], res["e2b_p90_ms"], res["e2b_adds_p50_ms"])

	// The same from Go, without an SDK's own cost: Airlock's client
	// (create, streamed exec) against E2B's wire (POST /v2/sandboxes,
	// process.Process/Start over Connect JSON), alternating.
	ctx := ctxT(t, 3*time.Minute)
	hc := &http.Client{Timeout: time.Minute}
	pc := processpbconnect.NewProcessClient(hc, env.url, connect.WithProtoJSON())
	var apiCreate, apiExec, e2bCreate, e2bStart []time.Duration
	const rounds = 20
	for range rounds {
		t0 := time.Now()
		sb, err := env.d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if _, err := env.d.C.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/bash", "-l", "-c", "echo hi"}}, nil); err != nil {
			t.Fatal(err)
		}
		apiCreate, apiExec = append(apiCreate, t1.Sub(t0)), append(apiExec, time.Since(t1))
		if err := env.d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}

		t0 = time.Now()
		req, _ := http.NewRequestWithContext(ctx, "POST", env.url+"/v2/sandboxes", strings.NewReader(`{"templateID":"base"}`))
		req.Header.Set("X-API-Key", env.key)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var created struct{ SandboxID string }
		err = json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("create: %d %v", resp.StatusCode, err)
		}
		t1 = time.Now()
		sreq := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi"}}})
		sreq.Header().Set("E2b-Sandbox-Id", created.SandboxID)
		sreq.Header().Set("E2b-Sandbox-Port", "49983")
		sreq.Header().Set("X-Access-Token", env.key)
		st, err := pc.Start(ctx, sreq)
		if err != nil {
			t.Fatal(err)
		}
		var ended bool
		for st.Receive() {
			ended = ended || st.Msg().GetEvent().GetEnd() != nil
		}
		if err := st.Err(); err != nil || !ended {
			t.Fatalf("start: %v (end event %v)", err, ended)
		}
		st.Close()
		e2bCreate, e2bStart = append(e2bCreate, t1.Sub(t0)), append(e2bStart, time.Since(t1))
		req, _ = http.NewRequestWithContext(ctx, "DELETE", env.url+"/sandboxes/"+created.SandboxID, nil)
		req.Header.Set("X-API-Key", env.key)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	a, b, c, d := p50(apiCreate), p50(apiExec), p50(e2bCreate), p50(e2bStart)
	t.Logf("go, p50 ms over %d rounds: Airlock API create %.2f + streamed exec %.2f = %.2f; E2B wire create %.2f + Start %.2f = %.2f; the E2B layer adds %.2f ms",
		rounds, ms(a), ms(b), ms(a+b), ms(c), ms(d), ms(c+d), ms(c+d-a-b))
}

// p50 is the median of ds.
func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestE2BBadInput sends what E2B's SDKs never would: each answer is an
// error in E2B's shape ({"code","message"}, or a Connect error), and the
// daemon serves on, unaffected.
func TestE2BBadInput(t *testing.T) {
	env := startE2B(t)
	hc := &http.Client{Timeout: 30 * time.Second}
	do := func(method, path string, hdr map[string]string, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, env.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b
	}
	key := map[string]string{"X-API-Key": env.key, "Content-Type": "application/json"}
	// A real sandbox, for the sandbox-traffic cases.
	status, body := do("POST", "/v2/sandboxes", key, `{"templateID":"base"}`)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	var sb struct{ SandboxID string }
	_ = json.Unmarshal(body, &sb)
	track("sb-" + strings.TrimPrefix(sb.SandboxID, "sb"))
	envd := map[string]string{"X-Access-Token": env.key, "E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "Content-Type": "application/json"}
	with := func(base map[string]string, k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for _, tt := range []struct {
		name, method, path string
		hdr                map[string]string
		body               string
		status             int
		want               string
	}{
		{"no key", "GET", "/v2/sandboxes", nil, "", 401, `"code":401`},
		{"a key that is not hex", "GET", "/v2/sandboxes", map[string]string{"X-API-Key": "e2b_zz"}, "", 401, `"code":401`},
		{"a key that is not a key", "GET", "/v2/sandboxes", map[string]string{"X-API-Key": "e2b_" + hex.EncodeToString([]byte("al_nope"))}, "", 401, `"code":401`},
		{"malformed JSON", "POST", "/v2/sandboxes", key, `{"templateID":`, 400, `"code":400`},
		{"a negative timeout", "POST", "/v2/sandboxes", key, `{"templateID":"base","timeout":-5}`, 400, "Timeout must be greater than 0"},
		{"autoPause", "POST", "/v2/sandboxes", key, `{"templateID":"base","autoPause":true}`, 400, "autoPause is not supported"},
		{"denyOut", "POST", "/v2/sandboxes", key, `{"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}}`, 400, "denyOut is not supported"},
		{"an unknown template", "POST", "/v2/sandboxes", key, `{"templateID":"no-such-template"}`, 404, `"code":404`},
		{"a huge body", "POST", "/v2/sandboxes", key, `{"metadata":{"a":"` + strings.Repeat("x", 2<<20) + `"}}`, 400, "over 1048576 bytes"},
		{"an unknown sandbox", "GET", "/sandboxes/sbaaaaaaaaaaaaaaaa", key, "", 404, `"code":404`},
		{"a malformed sandbox ID", "DELETE", "/sandboxes/..%2f..", key, "", 404, `"code":404`},
		{"a bad list limit", "GET", "/v2/sandboxes?limit=1000", key, "", 400, "limit must be between 1 and 100"},
		{"a bad next token", "GET", "/v2/sandboxes?nextToken=%25%25", key, "", 400, "nextToken"},
		{"a timeout of 0", "POST", "/sandboxes/" + sb.SandboxID + "/timeout", key, `{"timeout":0}`, 400, "Timeout must be greater than 0"},
		{"pause", "POST", "/sandboxes/" + sb.SandboxID + "/pause", key, `{}`, 501, "pause is not supported"},
		{"a bad sandbox port", "GET", "/health", with(envd, "E2b-Sandbox-Port", "http"), "", 400, "not a port number"},
		{"another server's sandbox ID", "GET", "/health", with(envd, "E2b-Sandbox-Id", "i1234567890abcdefghij"), "", 400, "not one of this server's"},
		{"envd without a token", "GET", "/files?path=/etc/hostname", map[string]string{"E2b-Sandbox-Id": sb.SandboxID}, "", 401, "access token is required"},
		{"an unknown user", "GET", "/files?path=/etc/hostname&username=nobody", envd, "", 401, "does not exist"},
		{"a download without a path", "GET", "/files", envd, "", 400, "path is required"},
		{"a malformed multipart body", "POST", "/files?path=/tmp/x", with(envd, "Content-Type", "multipart/form-data; boundary=zz"), "garbage", 400, "multipart body is malformed"},
		{"a Connect call with a malformed message", "POST", "/filesystem.Filesystem/ListDir", envd, `{"path":`, 400, `"code":"invalid_argument"`},
		{"a Connect call of the wrong type", "POST", "/filesystem.Filesystem/ListDir", envd, `{"path":7}`, 400, `"code":"invalid_argument"`},
		{"a stream whose envelope is not one", "POST", "/process.Process/Start", with(envd, "Content-Type", "application/connect+json"), `{"process":{"cmd":"true"}}`, 200, `"code":"resource_exhausted"`},
		{"an unknown Connect method", "POST", "/process.Process/Nope", envd, `{}`, 404, ""},
		{"an unknown jupyter route", "GET", "/nope", with(envd, "E2b-Sandbox-Port", "49999"), "", 404, `"code":404`},
		{"an unsupported language", "POST", "/execute", with(envd, "E2b-Sandbox-Port", "49999"), `{"code":"1","language":"cobol"}`, 400, "not supported"},
	} {
		status, body := do(tt.method, tt.path, tt.hdr, tt.body)
		if tt.status != 0 && status != tt.status || !bytes.Contains(body, []byte(tt.want)) {
			t.Errorf("%s: %d %.300s, want %d with %q", tt.name, status, body, tt.status, tt.want)
		}
	}
	// The daemon serves on: the sandbox still runs a command through
	// the edge, and the API answers.
	status, body = do("POST", "/process.Process/List", envd, `{}`)
	if status != 200 || !bytes.HasPrefix(body, []byte("{")) {
		t.Errorf("after the bad input: List %d %s", status, body)
	}
	if _, err := env.d.C.GetSandbox(ctxT(t, time.Minute), "sb-"+strings.TrimPrefix(sb.SandboxID, "sb")); err != nil {
		t.Errorf("after the bad input: %v", err)
	}
	if status, body := do("DELETE", "/sandboxes/"+sb.SandboxID, key, ""); status != 204 {
		t.Errorf("kill: %d %s", status, body)
	}
	if status, body := do("DELETE", "/sandboxes/"+sb.SandboxID, key, ""); status != 404 || !bytes.Contains(body, []byte(`"code":404`)) {
		t.Errorf("a second kill: %d %s, want 404 (the SDK's kill() → false)", status, body)
	}
}

// TestE2BWire drives the edge's Connect services as a client that is
// not the JavaScript SDK would: the binary protobuf codec, and the
// polled variant of watchDir (CreateWatcher, GetWatcherEvents,
// RemoveWatcher), which only its creator's key can reach.
func TestE2BWire(t *testing.T) {
	env := startE2B(t)
	ctx := ctxT(t, 2*time.Minute)
	sb, err := env.d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	hc := &http.Client{Timeout: time.Minute}
	hdr := func(h http.Header, key string) {
		h.Set("E2b-Sandbox-Id", strings.Replace(sb.ID, "sb-", "sb", 1))
		h.Set("E2b-Sandbox-Port", "49983")
		h.Set("X-Access-Token", key)
	}
	// The binary codec (connect-go's default).
	fs := filesystempbconnect.NewFilesystemClient(hc, env.url)
	mk := connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/w"})
	hdr(mk.Header(), env.key)
	if _, err := fs.MakeDir(ctx, mk); err != nil {
		t.Fatal(err)
	}
	st := connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/w"})
	hdr(st.Header(), env.key)
	res, err := fs.Stat(ctx, st)
	if err != nil || res.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || res.Msg.GetEntry().GetPath() != "/tmp/w" {
		t.Fatalf("binary Stat: %v %v", res, err)
	}

	// A polled watcher sees a write, once.
	cw := connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/tmp/w", Recursive: true})
	hdr(cw.Header(), env.key)
	w, err := fs.CreateWatcher(ctx, cw)
	if err != nil {
		t.Fatal(err)
	}
	id := w.Msg.GetWatcherId()
	if _, err := env.d.C.WriteFile(ctx, sb.ID, "/tmp/w/sub.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	poll := func(key string) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
		g := connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id})
		hdr(g.Header(), key)
		return fs.GetWatcherEvents(ctx, g)
	}
	var names []string
	for i := 0; i < 50 && !slices.Contains(names, "sub.txt"); i++ {
		r, err := poll(env.key)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.GetEvents() {
			names = append(names, ev.GetName())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.Contains(names, "sub.txt") {
		t.Fatalf("the watcher saw %v, want sub.txt", names)
	}
	// Another tenant's key reaches neither the sandbox nor the watcher.
	ten, err := env.d.C.CreateTenant(ctx, client.CreateTenantRequest{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	other := "e2b_" + hex.EncodeToString([]byte(ten.AdminKey.Secret))
	if _, err := poll(other); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another tenant polls the watcher: %v", err)
	}
	rm := connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})
	hdr(rm.Header(), env.key)
	if _, err := fs.RemoveWatcher(ctx, rm); err != nil {
		t.Fatal(err)
	}
	if _, err := poll(env.key); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed watcher: %v", err)
	}
}
