package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/client"
)

// The scripted model server of TestAgentInside: a name the daemon
// resolves from its own hosts file (see wrapHosts) to a loopback address
// of the host, where the server listens. No query or packet leaves the
// host.
const (
	modelHost = "model.test"
	modelAddr = "127.0.0.5"
)

// agentProgram is the agent server the recipe docs/integrations/
// agent-inside.md runs: the test runs that very file.
const agentProgram = "../../examples/agent-inside/agent.py"

// modelServer is a scripted Anthropic-Messages-like API over HTTPS with
// a certificate for modelHost from a CA made for the test (rootsFile,
// for --egress-roots). POST /v1/messages answers "model says: " and the
// last user message, or 401 unless X-Api-Key is key, as the real API
// does; it records every request's headers and prompt. It never echoes a
// header.
type modelServer struct {
	port      int
	rootsFile string
	key       string
	mu        sync.Mutex
	reqs      []modelRequest
}

// modelRequest is what the model server saw of one request.
type modelRequest struct {
	Header http.Header
	Prompt string
}

func (s *modelServer) seen() []modelRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func newModelServer(t *testing.T, key string) *modelServer {
	t.Helper()
	// One self-signed certificate, its own root (as httptest's).
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: modelHost},
		DNSNames: []string{modelHost}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	s := &modelServer{rootsFile: filepath.Join(t.TempDir(), "model-roots.pem"), key: key}
	if err := os.WriteFile(s.rootsFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", modelAddr+":0")
	if err != nil {
		t.Fatalf("listen on %s (a loopback address): %v", modelAddr, err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: priv}}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *modelServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var in struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in)
	var prompt string
	if err == nil && len(in.Messages) > 0 {
		prompt = in.Messages[len(in.Messages)-1].Content
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, modelRequest{Header: r.Header.Clone(), Prompt: prompt})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Header.Get("X-Api-Key") != s.key:
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		return
	case err != nil || prompt == "":
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: want a user message"}}`)
		return
	}
	json.NewEncoder(w).Encode(map[string]any{
		"id": "msg_test", "type": "message", "role": "assistant", "model": in.Model,
		"content":     []map[string]string{{"type": "text", "text": "model says: " + prompt}},
		"stop_reason": "end_turn", "usage": map[string]int{"input_tokens": 1, "output_tokens": 1},
	})
}

// TestAgentInside is the recipe of docs/integrations/agent-inside.md: an
// agent server (examples/agent-inside/agent.py) runs inside a sandbox
// whose network allows only its model API, a scripted HTTPS server, with
// the model key a stored secret that the egress proxy adds as X-Api-Key
// (an egress credential). From outside, tasks reach the agent through
// the port proxy over HTTP and over WebSocket, and their answers come
// back; the model server saw every request with the key, though the
// agent sent none; and the key is nowhere in the sandbox (keySightings:
// no file, no process's environment or command line, not the agent's
// environment, not ps, seen from inside as root and as the user and from
// the host), nor in the answers. A control then puts the key in a file
// and a process of the sandbox and shows that every one of those looks
// finds it. (A sandbox created with the key in its env, tried by hand,
// fails the test: the agent's environment, every process's, ps.)
func TestAgentInside(t *testing.T) {
	made := time.Now()
	rnd := make([]byte, 12)
	_, _ = rand.Read(rnd)
	key := "sk-canary-" + hex.EncodeToString(rnd)
	model := newModelServer(t, key)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+modelAddr+" "+modelHost+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(wrapHostsEnv, hosts)
	agentSrc, err := os.ReadFile(agentProgram)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "--egress-roots", model.rootsFile)
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)

	if _, err := d.C.PutSecret(ctx, "MODEL_KEY", client.PutSecretRequest{Value: []byte(key)}); err != nil {
		t.Fatal(err)
	}
	// The model API alone, by name, with its key added at the edge. (The
	// loopback address is listed too because the proxy's guard refuses a
	// name that resolves to loopback unless the address is listed; a real
	// API's public address needs no such entry.)
	hostPort := fmt.Sprintf("%s:%d", modelHost, model.port)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{
			Mode:  client.NetworkAllowlist,
			Allow: []string{hostPort, fmt.Sprintf("%s:%d", modelAddr, model.port)},
			Credentials: []client.NetworkCredential{{
				Host: modelHost, Port: uint16(model.port), Header: "X-Api-Key", Secret: "MODEL_KEY",
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.C.DeleteSandbox(dctx, sb.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
	}()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/tmp/agent.py", bytes.NewReader(agentSrc)); err != nil {
		t.Fatal(err)
	}

	// The agent, started in the background: the stream that started it
	// ends at once, the process goes on.
	pidc := make(chan int, 1)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go d.C.ExecStream(sctx, sb.ID, client.ExecRequest{
		Command:    "exec python3 /tmp/agent.py >/tmp/agent.log 2>&1",
		Env:        map[string]string{"MODEL_URL": "https://" + hostPort + "/v1/messages", "AGENT_PORT": "8080"},
		Background: true, Tag: "agent", Timeout: 5 * time.Minute,
		OnStart: func(pid int) { pidc <- pid },
	}, nil)
	var agentPID int
	select {
	case agentPID = <-pidc:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not start")
	}
	stop()
	const port = 8080
	agentLog := func() string {
		return string(mustExec(t, d, sb.ID, client.ExecRequest{Command: "cat /tmp/agent.log"}).Stdout)
	}
	var answers []string // every answer the agent gave, as it came
	send := func(method, target, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
		resp, err := d.C.Port(sb.ID, port, req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		answers = append(answers, string(b))
		return resp.StatusCode, string(b)
	}
	if !waitFor(20*time.Second, func() bool { code, _ := send("GET", "/health", ""); return code == 200 }) {
		t.Fatalf("the agent never answered through the port proxy; its log:\n%s", agentLog())
	}

	// Tasks over HTTP.
	type reply struct{ Answer, Error string }
	var prompts []string
	for _, p := range []string{"plan the migration", "summarise the log"} {
		prompts = append(prompts, p)
		code, body := send("POST", "/task", `{"prompt": "`+p+`"}`)
		var r reply
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.Answer != "model says: "+p {
			t.Fatalf("POST /task %q: %d %s; agent log:\n%s", p, code, body, agentLog())
		}
	}
	// Tasks over WebSocket.
	u, _ := d.C.PortURL(sb.ID, port)
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(u, "http")+"ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}})
	if err != nil {
		t.Fatalf("WebSocket through the port proxy: %v", err)
	}
	defer conn.CloseNow()
	for _, p := range []string{"write the tests", "review the diff"} {
		prompts = append(prompts, p)
		msg, _ := json.Marshal(map[string]string{"prompt": p})
		if err := conn.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		typ, got, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("WebSocket answer to %q: %v; agent log:\n%s", p, err, agentLog())
		}
		answers = append(answers, string(got))
		var r reply
		if typ != websocket.MessageText || json.Unmarshal(got, &r) != nil || r.Answer != "model says: "+p {
			t.Fatalf("WebSocket answer to %q: %s", p, got)
		}
	}
	if err := conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Errorf("WebSocket close: %v", err)
	}

	// The model server saw each task once, with the key the agent never
	// sent, and the agent's own headers.
	seen := model.seen()
	var got []string
	for i, r := range seen {
		got = append(got, r.Prompt)
		if k := r.Header.Values("X-Api-Key"); len(k) != 1 || k[0] != key {
			t.Errorf("model request %d: X-Api-Key %q, want the stored key alone", i, k)
		}
		if r.Header.Get("Anthropic-Version") != "2023-06-01" || r.Header.Get("Authorization") != "" {
			t.Errorf("model request %d: headers %v", i, r.Header)
		}
	}
	if !slices.Equal(got, prompts) {
		t.Errorf("the model server saw prompts %q, want %q", got, prompts)
	}

	// The key is nowhere in the sandbox.
	if found := keySightings(t, d, sb.ID, key, made, agentPID); len(found) != 0 {
		t.Errorf("the model key is in the sandbox: %s", strings.Join(found, "; "))
	}
	for _, a := range answers {
		if strings.Contains(a, key) {
			t.Errorf("the agent's answer holds the key: %q", a)
		}
	}

	// Control: the same checks find the key where it is. A file and a
	// process (its environment and command line) of the sandbox get it.
	half := len(key) / 2
	mustExec(t, d, sb.ID, client.ExecRequest{Command: fmt.Sprintf(
		`K1=%s; K2=%s; export LEAKED="$K1$K2"; echo "$LEAKED" > /tmp/leaked; `+
			`setsid sh -c 'sleep 120; :' leak "$LEAKED" </dev/null >/dev/null 2>&1 &`, key[:half], key[half:])})
	found := keySightings(t, d, sb.ID, key, made, agentPID)
	for _, want := range []string{
		"file /tmp/leaked (as root)", "file /tmp/leaked (as user)", "file /tmp/leaked (from the host)",
		"environ of * (as user)", "cmdline of * (as root)", "environ of host pid *", "cmdline of host pid *",
		"ps (as root)", "ps (as user)",
	} {
		if !slices.ContainsFunc(found, func(f string) bool { ok, _ := path.Match(want, f); return ok }) {
			t.Errorf("control: the checks missed the key in %q; they found it in: %q", want, found)
		}
	}
}

// keySightings reports where key, made at since, appears in sandbox id.
// Looked at from inside, as the sandbox's root and as its user (neither
// sees everything: root in the sandbox cannot enter the user's 0750 home
// nor read the user's processes' environments): its files, every
// process's environment and command line (/proc/*/environ, cmdline), the
// agent's (pid agentPID) environment, and ps. Looked at from the host,
// whose root nothing stops: every file of the sandbox's root filesystem
// (through /proc/PID/root of its agent) and the environment and command
// line of every process in the sandbox's cgroups. The searches of files
// look at every regular file under / but /proc and /sys that changed
// since the key was made: a file that holds the key had it written after
// then, and a write sets the change time, which nothing in the sandbox
// can set back; that spares reading the host's /usr (GBs: 20-50 s here)
// that the host template binds read-only. The commands that look never
// carry key whole, so that they do not find themselves. It fails the
// test if a look cannot be made.
func keySightings(t *testing.T, d *daemon, id, key string, since time.Time, agentPID int) []string {
	t.Helper()
	run := func(user, cmd string) string {
		t.Helper()
		res := mustExec(t, d, id, client.ExecRequest{Command: cmd, User: user, Timeout: time.Minute})
		if res.ExitCode != 0 {
			t.Fatalf("%s: exit %d, %s", cmd, res.ExitCode, res.Stderr)
		}
		return string(res.Stdout)
	}
	var found []string
	half := len(key) / 2
	for _, user := range []string{"root", "user"} {
		// xargs's status: 0, or 123 when some grep found nothing;
		// anything else is a search that could not run.
		out := run(user, fmt.Sprintf(`K1=%s; K2=%s; find / \( -path /proc -o -path /sys \) -prune -o -type f -newerct @%d -print0 2>/dev/null | `+
			`LC_ALL=C xargs -0 -r grep -lsF -e "$K1$K2"; rc=$?; [ $rc = 0 ] || [ $rc = 123 ] && echo "rc=$rc"`,
			key[:half], key[half:], since.Unix()-1))
		for line := range strings.Lines(out) {
			if line = strings.TrimSpace(line); !strings.HasPrefix(line, "rc=") {
				found = append(found, fmt.Sprintf("file %s (as %s)", line, user))
			}
		}
		// Each process: its environment and command line, NULs as spaces.
		out = run(user, `for p in /proc/[0-9]*; do printf '\n%s environ ' "${p#/proc/}"; tr '\0' ' ' < $p/environ; `+
			`printf '\n%s cmdline ' "${p#/proc/}"; tr '\0' ' ' < $p/cmdline; done 2>/dev/null; echo`)
		sawAgent := false
		for line := range strings.Lines(out) {
			pid, rest, _ := strings.Cut(line, " ")
			what, val, _ := strings.Cut(rest, " ")
			sawAgent = sawAgent || what == "cmdline" && strings.Contains(val, "/tmp/agent.py")
			if strings.Contains(val, key) {
				found = append(found, fmt.Sprintf("%s of %s (as %s)", what, pid, user))
			}
		}
		if !sawAgent {
			t.Fatalf("the process scan as %s did not see the agent:\n%s", user, out)
		}
		ps := run(user, "ps auxwwe")
		if !strings.Contains(ps, "/tmp/agent.py") {
			t.Fatalf("ps as %s does not list the agent:\n%s", user, ps)
		}
		if strings.Contains(ps, key) {
			found = append(found, "ps (as "+user+")")
		}
	}
	// The agent's environment, read as its own user.
	env := run("user", fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ", agentPID))
	if !strings.Contains(env, "HTTPS_PROXY=") || !strings.Contains(env, "MODEL_URL=") {
		t.Fatalf("pid %d's environment is not the agent's:\n%s", agentPID, env)
	}
	if strings.Contains(env, key) {
		found = append(found, "the agent's environment")
	}

	// From the host: every process in the sandbox's cgroups.
	pids := map[string]bool{}
	for _, root := range sandboxCgroups(id) {
		filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				for _, pid := range strings.Fields(string(b)) {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	agentHost := ""
	for pid := range pids {
		for _, what := range []string{"environ", "cmdline"} {
			b, err := os.ReadFile(filepath.Join("/proc", pid, what))
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // it ended meanwhile
			}
			if err != nil {
				t.Fatalf("the host reads %s of pid %s of the sandbox: %v", what, pid, err)
			}
			if what == "cmdline" && bytes.Contains(b, []byte("/tmp/agent.py")) {
				agentHost = pid
			}
			if bytes.Contains(b, []byte(key)) {
				found = append(found, fmt.Sprintf("%s of host pid %s", what, pid))
			}
		}
	}
	if agentHost == "" {
		t.Fatalf("the host found no agent among the sandbox's %d processes", len(pids))
	}
	// From the host: the sandbox's files, as its agent sees them.
	root := filepath.Join("/proc", agentHost, "root")
	files := 0
	var denied []string
	// The trailing slash: the walk starts past the link.
	err := filepath.WalkDir(root+"/", func(p string, de os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed meanwhile
		}
		if errors.Is(err, os.ErrPermission) {
			// An overlay checks its lower layer with its mounter's
			// credentials: the host's root cannot enter what those
			// cannot in the sandbox's read-only views of host
			// directories (/.airlock/bin, a 0700 directory of the
			// host's /usr). Those only: nothing writes there.
			denied = append(denied, strings.TrimPrefix(p, root))
			return nil
		}
		if err != nil {
			return err
		}
		if rel := strings.TrimPrefix(p, root); de.IsDir() && (rel == "/proc" || rel == "/sys") {
			return filepath.SkipDir
		}
		if !de.Type().IsRegular() {
			return nil
		}
		fi, err := de.Info()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || time.Unix(st.Ctim.Unix()).Before(since.Add(-time.Second)) {
			return nil
		}
		files++
		holds, err := fileHolds(p, []byte(key))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if holds {
			found = append(found, fmt.Sprintf("file %s (from the host)", strings.TrimPrefix(p, root)))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the host walks the sandbox's files: %v", err)
	}
	if len(denied) > 0 {
		ro := readOnlyMounts(t, agentHost)
		for _, p := range denied {
			if !slices.ContainsFunc(ro, func(m string) bool { return p == m || strings.HasPrefix(p, m+"/") }) {
				t.Fatalf("the host cannot read %s of the sandbox, which is not on a read-only mount (%q)", p, ro)
			}
		}
		t.Logf("the host cannot enter %q, read-only overlay views", denied)
	}
	if files == 0 {
		t.Fatal("the host found no file of the sandbox changed since the key was made; the agent's at least was")
	}
	return found
}

// readOnlyMounts returns the mount points of the read-only mounts that
// process pid (of the host) sees, as it names them.
func readOnlyMounts(t *testing.T, pid string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	var ro []string
	for line := range strings.Lines(string(b)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...
		f := strings.Fields(line)
		if len(f) > 5 && slices.Contains(strings.Split(f[5], ","), "ro") {
			ro = append(ro, f[4])
		}
	}
	return ro
}

// fileHolds reports whether the file at path holds s, reading it in
// chunks.
func fileHolds(path string, s []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	keep := 0 // bytes carried over: a match may span two chunks
	for {
		n, err := f.Read(buf[keep:])
		if bytes.Contains(buf[:keep+n], s) {
			return true, nil
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		total := keep + n
		keep = min(total, len(s)-1)
		copy(buf, buf[total-keep:total])
	}
}
