package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// pkgRegistryAddr is the host address the test package registries
// listen on. It is a loopback address (traffic stays on the host) that
// the sandboxes' NO_PROXY does not name (it names 127.0.0.1, for a
// sandbox's own services), so pip and npm send their requests through
// the egress proxy with nothing but the environment the manager sets:
// no proxy option on the tools' command lines, no resolver hook in the
// daemon. The allowlist lists it with its port, as the guard refuses
// loopback addresses that are not listed explicitly.
const pkgRegistryAddr = "127.0.0.2"

// The probe package both registries serve.
const (
	probeName    = "airlock-probe"
	probeVersion = "1.0.0"
	probeMessage = "installed-through-the-egress-proxy"
)

// pkgRegistry is a Python package index (PEP 503 simple API) and an npm
// registry in one HTTP server, serving probeName only: a pure-Python
// wheel and an npm tarball, both built by the test. It records the
// requests it gets.
type pkgRegistry struct {
	URL string // http://127.0.0.2:PORT
	// Allow is the allowlist entry of the registry.
	Allow string

	mu   sync.Mutex
	seen []string
}

// newPkgRegistry starts a registry on pkgRegistryAddr, stopped when the
// test ends.
func newPkgRegistry(t *testing.T) *pkgRegistry {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(pkgRegistryAddr, "0"))
	if err != nil {
		t.Fatalf("listen on %s (a loopback address): %v", pkgRegistryAddr, err)
	}
	hostPort := ln.Addr().String()
	r := &pkgRegistry{URL: "http://" + hostPort, Allow: hostPort}

	wheelName := strings.ReplaceAll(probeName, "-", "_") + "-" + probeVersion + "-py3-none-any.whl"
	wheel := probeWheel(t)
	wheelSum := sha256.Sum256(wheel)
	tgz := probeTarball(t)
	tgzSHA1 := sha1.Sum(tgz)
	tgzSHA512 := sha512.Sum512(tgz)
	tgzURL := r.URL + "/" + probeName + "/-/" + probeName + "-" + probeVersion + ".tgz"
	doc, err := json.Marshal(map[string]any{
		"name":      probeName,
		"dist-tags": map[string]string{"latest": probeVersion},
		"versions": map[string]any{probeVersion: map[string]any{
			"name":    probeName,
			"version": probeVersion,
			"main":    "index.js",
			"dist": map[string]string{
				"tarball":   tgzURL,
				"shasum":    hex.EncodeToString(tgzSHA1[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(tgzSHA512[:]),
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	// PEP 503: the project list, and one page per (normalised) project
	// linking its files with their hashes.
	mux.HandleFunc("GET /simple/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/simple/%s/\">%s</a></body></html>\n", probeName, probeName)
	})
	mux.HandleFunc("GET /simple/"+probeName+"/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n",
			wheelName, hex.EncodeToString(wheelSum[:]), wheelName)
	})
	mux.HandleFunc("GET /files/"+wheelName, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(wheel)
	})
	// npm: the package document, and the tarball it points to.
	mux.HandleFunc("GET /"+probeName, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})
	mux.HandleFunc("GET /"+probeName+"/-/"+probeName+"-"+probeVersion+".tgz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(tgz)
	})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.seen = append(r.seen, req.Method+" "+req.URL.Path)
			r.mu.Unlock()
			mux.ServeHTTP(w, req)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

// Requests returns the requests the registry got so far ("GET /path").
func (r *pkgRegistry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// probeWheel builds a pure-Python wheel of probeName: a module whose
// MESSAGE is probeMessage, with its METADATA, WHEEL and RECORD.
func probeWheel(t *testing.T) []byte {
	t.Helper()
	mod := strings.ReplaceAll(probeName, "-", "_")
	info := mod + "-" + probeVersion + ".dist-info/"
	files := []struct{ name, body string }{
		{mod + "/__init__.py", fmt.Sprintf("MESSAGE = %q\n", probeMessage)},
		{info + "METADATA", "Metadata-Version: 2.1\nName: " + probeName + "\nVersion: " + probeVersion + "\nSummary: egress e2e probe\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	w, err := zw.Create(info + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// probeTarball builds the npm tarball of probeName: package/package.json
// and package/index.js exporting probeMessage.
func probeTarball(t *testing.T) []byte {
	t.Helper()
	pkg, err := json.Marshal(map[string]string{"name": probeName, "version": probeVersion, "main": "index.js"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", string(pkg)},
		{"package/index.js", fmt.Sprintf("module.exports = %q;\n", probeMessage)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// netRecord is an egress.connect audit record's details.
type netRecord struct {
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Addr   string `json:"addr"`
	Reason string `json:"reason"`
	Class  string `json:"class"`
	Proto  string `json:"protocol"`

	Outcome string `json:"-"`
}

// waitNetLog polls the network log of sandbox id until want holds of
// its egress.connect records, at most 15 s.
func waitNetLog(ctx context.Context, t *testing.T, d *daemon, id string, want func([]netRecord) bool) []netRecord {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, _, err := d.C.NetworkLog(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var out []netRecord
		for _, r := range recs {
			if r.Action != "egress.connect" || r.Target != id {
				continue
			}
			var nr netRecord
			if err := json.Unmarshal(r.Details, &nr); err != nil {
				t.Fatalf("record %d: details: %v", r.Seq, err)
			}
			nr.Outcome = r.Outcome
			out = append(out, nr)
		}
		if want(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("network log of %s: want not met in %d records: %+v", id, len(out), out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEgressInstall installs a Python wheel with pip and an npm
// package with npm, inside a sandbox in allowlist mode, from registries
// the test serves on the host's loopback (pkgRegistry): with the
// registry not listed, both fail with the proxy's 403 and install
// nothing, and the registry sees no request; once the running
// sandbox's list names it, both succeed, and the package imports and
// requires. The tools run unchanged, with only the proxy variables the
// manager sets.
func TestEgressInstall(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 5*time.Minute)
	reg := newPkgRegistry(t)

	// Listed: another destination only.
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{Mode: client.NetworkAllowlist, Allow: []string{"packages.example"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	exec := func(command string) *client.ExecResult {
		t.Helper()
		ectx, cancel := context.WithTimeout(ctx, 150*time.Second)
		defer cancel()
		res, err := d.C.Exec(ectx, sb.ID, client.ExecRequest{
			Command: command,
			Timeout: 120 * time.Second,
			// npm: no update check (it would ask registry.npmjs.org).
			Env: map[string]string{"NPM_CONFIG_UPDATE_NOTIFIER": "false"},
		})
		if err != nil {
			t.Fatalf("exec %q: %v", command, err)
		}
		return res
	}
	if res := exec("/usr/bin/python3 -m pip --version && npm --version"); res.ExitCode != 0 {
		t.Fatalf("the host template has no pip or npm (.ci/run installs them): exit %d, %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// --target: a directory the sandbox user owns (it also lifts
	// Debian's externally-managed-environment refusal, PEP 668).
	pip := "/usr/bin/python3 -m pip install --no-cache-dir --disable-pip-version-check --retries 0 --timeout 20" +
		" --index-url " + reg.URL + "/simple --target \"$HOME/pylib\" " + probeName
	pyImport := "PYTHONPATH=\"$HOME/pylib\" /usr/bin/python3 -c 'import airlock_probe; print(airlock_probe.MESSAGE)'"
	npm := "mkdir -p \"$HOME/proj\" && cd \"$HOME/proj\" && npm install --registry " + reg.URL + "/" +
		" --cache \"$HOME/.npm-cache\" --no-audit --no-fund --fetch-retries 0 --fetch-timeout 20000 " + probeName
	nodeRequire := "cd \"$HOME/proj\" && node -e 'console.log(require(\"" + probeName + "\"))'"

	// Not listed: the proxy refuses, and both tools say so (pip in
	// its debug output: by default it reports an index page's HTTP
	// error only as "No matching distribution found").
	for _, c := range []struct{ tool, command string }{{"pip", pip + " -vv"}, {"npm", npm}} {
		res := exec(c.command)
		out := string(res.Stdout) + string(res.Stderr)
		if res.ExitCode == 0 {
			t.Fatalf("%s install from an unlisted registry succeeded:\n%s", c.tool, out)
		}
		if !strings.Contains(out, "403") || !strings.Contains(out, "Forbidden") {
			t.Errorf("%s install from an unlisted registry: want the proxy's 403 Forbidden in its output:\n%s", c.tool, out)
		}
		var said []string
		for l := range strings.Lines(out) {
			if strings.Contains(l, "403") || strings.Contains(l, "ERROR") || strings.Contains(l, "error") {
				said = append(said, l)
			}
		}
		t.Logf("%s, registry not listed: exit %d:\n%s", c.tool, res.ExitCode, strings.Join(said, ""))
	}
	if got := reg.Requests(); len(got) != 0 {
		t.Fatalf("the unlisted registry got requests: %q", got)
	}
	if res := exec(pyImport + "; " + nodeRequire); res.ExitCode == 0 {
		t.Fatalf("a refused install left an importable package: %s", res.Stdout)
	}
	port, _ := strconv.Atoi(reg.Allow[strings.LastIndexByte(reg.Allow, ':')+1:])
	waitNetLog(ctx, t, d, sb.ID, func(recs []netRecord) bool {
		for _, r := range recs {
			if r.Host == pkgRegistryAddr && r.Port == port && r.Outcome == "permission_denied" && r.Reason == "not_listed" {
				return true
			}
		}
		return false
	})

	// Listed (the running sandbox's list changed): both install.
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkAllowlist, Allow: []string{reg.Allow}}); err != nil {
		t.Fatal(err)
	}
	if res := exec(pip + " && " + pyImport); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), probeMessage) {
		t.Fatalf("pip install from the listed registry: exit %d:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := exec(npm + " && " + nodeRequire); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), probeMessage) {
		t.Fatalf("npm install from the listed registry: exit %d:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Node's own fetch reads the proxy variables only where
	// NODE_USE_ENV_PROXY (which the manager sets) is understood: from
	// Node 22.21 and 24.0. An older Node's fetch goes straight to the
	// address, which inside the sandbox is its own loopback: it fails.
	before := len(reg.Requests())
	res := exec("node --version; node -e 'fetch(process.argv[1]).then(r => r.text()).then(t => console.log(\"fetched \" + t.length), " +
		"e => { console.log(\"fetch failed: \" + ((e.cause && e.cause.code) || e.message)); process.exit(3) })' " + reg.URL + "/simple/")
	out := string(res.Stdout)
	version, _, _ := strings.Cut(out, "\n")
	if nodeUsesEnvProxy(version) {
		if res.ExitCode != 0 || !strings.Contains(out, "fetched ") || len(reg.Requests()) == before {
			t.Errorf("Node %s fetch through the proxy: exit %d: %s%s", version, res.ExitCode, out, res.Stderr)
		}
	} else {
		if res.ExitCode != 3 || !strings.Contains(out, "fetch failed") || len(reg.Requests()) != before {
			t.Errorf("Node %s ignores NODE_USE_ENV_PROXY: want its fetch to fail, got exit %d: %s%s", version, res.ExitCode, out, res.Stderr)
		}
		t.Logf("Node %s: fetch does not use the proxy (NODE_USE_ENV_PROXY needs Node 22.21 or 24): %s", version, out)
	}

	got := strings.Join(reg.Requests(), "\n")
	for _, want := range []string{
		"GET /simple/" + probeName + "/", "GET /files/", // pip
		"GET /" + probeName + "\n", "GET /" + probeName + "/-/", // npm
	} {
		if !strings.Contains(got+"\n", want) {
			t.Errorf("registry requests lack %q:\n%s", want, got)
		}
	}
	waitNetLog(ctx, t, d, sb.ID, func(recs []netRecord) bool {
		n := 0
		for _, r := range recs {
			if r.Host == pkgRegistryAddr && r.Port == port && r.Outcome == "ok" && r.Addr == pkgRegistryAddr {
				n++
			}
		}
		return n >= 4
	})
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.C.DeleteSandbox(dctx, sb.ID); err != nil {
		t.Error(err)
	}
}

// nodeUsesEnvProxy reports whether a Node version ("v20.20.2") honours
// NODE_USE_ENV_PROXY in fetch: 22.21 and later 22s, and 24.0 on.
func nodeUsesEnvProxy(version string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimSpace(version), "v%d.%d", &major, &minor); err != nil {
		return false
	}
	return major >= 24 || (major == 22 && minor >= 21)
}
