package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// seenRequest is what the fake template server received.
type seenRequest struct {
	Method, Path, Query, ContentType, Accept, RegistryAuth string
	JSON                                                   map[string]any
	Tar                                                    map[string]string // name -> content ("dir", "link:T")
}

// fakeTemplateServer answers the template routes with canned data and
// records the requests.
type fakeTemplateServer struct {
	mu   sync.Mutex
	reqs []seenRequest
	// lines are the NDJSON lines of a build before its done line.
	lines []string
}

func (f *fakeTemplateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seen := seenRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, ContentType: r.Header.Get("Content-Type"),
		Accept: r.Header.Get("Accept"), RegistryAuth: r.Header.Get("X-Registry-Auth")}
	body, _ := io.ReadAll(r.Body)
	switch seen.ContentType {
	case "application/json":
		_ = json.Unmarshal(body, &seen.JSON)
	case "application/x-tar":
		seen.Tar = map[string]string{}
		tr := tar.NewReader(bytes.NewReader(body))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			switch h.Typeflag {
			case tar.TypeDir:
				seen.Tar[h.Name] = "dir"
			case tar.TypeSymlink:
				seen.Tar[h.Name] = "link:" + h.Linkname
			default:
				b, _ := io.ReadAll(tr)
				seen.Tar[h.Name] = fmt.Sprintf("%o:%s", h.Mode, b)
			}
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, seen)
	lines := f.lines
	f.mu.Unlock()
	tpl := `{"name":"py","shared":false,"source":"airfile","builtin":false,"layers":2,"size":2048,"shared_bytes":1024,"created":"2026-01-02T03:04:05Z",` +
		`"layer_list":[{"digest":"sha256:` + strings.Repeat("a", 64) + `","size":1024,"files":3,"shared":true},{"digest":"sha256:` + strings.Repeat("b", 64) + `","size":1024,"files":1,"shared":false}],` +
		`"config":{"env":["PATH=/usr/bin","LANG=C.UTF-8"],"workdir":"/app","user":"1000","cmd":["python3"],"entrypoint":[],"limits":{"cpus":0.5,"memory_mb":300}}}`
	switch {
	case r.Method == "POST" && (r.URL.Path == "/v1/templates" || r.URL.Path == "/v1/templates/py/import"):
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintf(w, `{"type":"done","template":%s}`+"\n", tpl)
	case r.Method == "GET" && r.URL.Path == "/v1/templates":
		fmt.Fprint(w, `{"templates":[{"name":"host","shared":true,"source":"built-in","builtin":true,"layers":0,"size":0,"shared_bytes":0,"created":null},`+
			`{"name":"py","source":"airfile","builtin":false,"layers":2,"size":2048,"shared_bytes":1024,"created":"2026-01-02T03:04:05Z"}],`+
			`"usage":{"layers":3,"bytes":3072,"shared_layers":1,"shared_bytes":1024,"unused_layers":0,"unused_bytes":0}}`)
	case r.Method == "GET" && r.URL.Path == "/v1/templates/py":
		fmt.Fprint(w, tpl)
	case r.Method == "DELETE" && r.URL.Path == "/v1/templates/py":
		fmt.Fprint(w, `{"name":"py","freed_layers":1,"freed_bytes":1024}`)
	case r.Method == "DELETE" && r.URL.Path == "/v1/templates/busy":
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":{"code":"failed_precondition","message":"template \"busy\" is in use by a running sandbox"}}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"not_found","message":"no such route"}}`)
	}
}

func (f *fakeTemplateServer) take() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reqs
	f.reqs = nil
	return r
}

// runCLI runs the CLI against srv with env and returns the exit code,
// what it printed and the error.
func runCLI(t *testing.T, srv *httptest.Server, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string, err error) {
	t.Helper()
	var outBuf, errBuf bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &outBuf, stderr: &errBuf, hc: srv.Client(), getenv: func(k string) string {
		switch k {
		case envURL:
			return srv.URL
		case envAPIKey:
			return "al_test_key"
		}
		return env[k]
	}}
	code, err = c.main(context.Background(), args)
	return code, outBuf.String(), errBuf.String(), err
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTemplateBuildFlags(t *testing.T) {
	fake := &fakeTemplateServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"plain/Airfile":   "FROM template:host\nRUN echo hi\n",
		"copy/Airfile":    "FROM template:host\nCOPY app /app\n",
		"copy/app/x.py":   "print(1)\n",
		"other/app/y.py":  "print(2)\n",
		"bad/Airfile":     "FROM template:host\nRUN true\nARG X=1\n",
		"policy.json":     `{"default":"deny","rules":[{"action":"allow","prefix":["ls"]}]}`,
		"bad-policy.json": `{"default":"deny","rulez":[]}`,
	})
	regAuth := base64.URLEncoding.EncodeToString([]byte(`{"username":"u","password":"envpw"}`))
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		stdin string
		check func(t *testing.T, r seenRequest)
	}{
		{"from with credentials from the environment", []string{"template", "build", "py", "--from", "docker.io/library/python:3.12", "--username", "u", "--insecure"},
			map[string]string{envRegistryPassword: "envpw"}, "", func(t *testing.T, r seenRequest) {
				want := `{"from":"docker.io/library/python:3.12","insecure":true,"name":"py","registry_auth":{"password":"envpw","username":"u"}}`
				if got, _ := json.Marshal(r.JSON); string(got) != want || r.Accept != "application/x-ndjson" {
					t.Errorf("body %s accept %q, want %s", got, r.Accept, want)
				}
			}},
		{"debian", []string{"template", "build", "py", "--debian", "bookworm", "--packages", "python3,curl", "--packages", "git", "--allow-setuid", "--no-cache", "--replace", "--memory", "300", "--cpus", "0.5"},
			nil, "", func(t *testing.T, r seenRequest) {
				want := `{"allow_setuid":true,"debian":{"packages":["python3","curl","git"],"suite":"bookworm"},"limits":{"cpus":0.5,"memory_mb":300},"name":"py","no_cache":true,"replace":true}`
				if got, _ := json.Marshal(r.JSON); string(got) != want {
					t.Errorf("body %s, want %s", got, want)
				}
			}},
		{"airfile without COPY goes as JSON", []string{"template", "build", "py", "-f", filepath.Join(dir, "plain/Airfile")},
			nil, "", func(t *testing.T, r seenRequest) {
				if r.JSON["airfile"] != "FROM template:host\nRUN echo hi\n" || r.Tar != nil {
					t.Errorf("request %+v", r)
				}
			}},
		{"airfile from stdin", []string{"template", "build", "py", "-f", "-"},
			nil, "FROM x/y:1\nENV A=1\n", func(t *testing.T, r seenRequest) {
				if r.JSON["airfile"] != "FROM x/y:1\nENV A=1\n" {
					t.Errorf("request %+v", r)
				}
			}},
		{"airfile with COPY sends its directory", []string{"template", "build", "py", "-f", filepath.Join(dir, "copy/Airfile"), "--username", "u", "--password", "envpw"},
			nil, "", func(t *testing.T, r seenRequest) {
				want := map[string]string{"Airfile": "644:FROM template:host\nCOPY app /app\n", "app/": "dir", "app/x.py": "644:print(1)\n"}
				if r.Query != "name=py" || r.ContentType != "application/x-tar" || fmt.Sprint(r.Tar) != fmt.Sprint(want) || r.RegistryAuth != regAuth {
					t.Errorf("request %+v, want tar %v", r, want)
				}
			}},
		{"default toolsets and command policy", []string{"template", "build", "py", "--from", "template:base", "--toolset", "web", "--toolset", "db,mail", "--command-policy", filepath.Join(dir, "policy.json")},
			nil, "", func(t *testing.T, r seenRequest) {
				want := `{"command_policy":{"default":"deny","rules":[{"action":"allow","prefix":["ls"]}]},"from":"template:base","name":"py","toolsets":["web","db","mail"]}`
				if got, _ := json.Marshal(r.JSON); string(got) != want {
					t.Errorf("body %s, want %s", got, want)
				}
			}},
		{"default toolsets and command policy of a context", []string{"template", "build", "py", "-f", filepath.Join(dir, "copy/Airfile"), "--toolset", "web,db", "--command-policy", filepath.Join(dir, "policy.json")},
			nil, "", func(t *testing.T, r seenRequest) {
				q, _ := url.ParseQuery(r.Query)
				if q.Get("toolsets") != "web,db" || q.Get("command_policy") != `{"rules":[{"action":"allow","prefix":["ls"]}],"default":"deny"}` {
					t.Errorf("query %q", r.Query)
				}
			}},
		{"shared", []string{"template", "build", "py", "--shared", "--from", "template:base"},
			nil, "", func(t *testing.T, r seenRequest) {
				want := `{"from":"template:base","name":"py","shared":true}`
				if got, _ := json.Marshal(r.JSON); string(got) != want {
					t.Errorf("body %s, want %s", got, want)
				}
			}},
		{"shared context", []string{"template", "build", "py", "--shared", "-f", filepath.Join(dir, "copy/Airfile")},
			nil, "", func(t *testing.T, r seenRequest) {
				if r.Query != "name=py&shared=true" || r.ContentType != "application/x-tar" {
					t.Errorf("request %+v", r)
				}
			}},
		{"explicit context dir", []string{"template", "build", "py", "-f", filepath.Join(dir, "plain/Airfile"), filepath.Join(dir, "other"), "--replace", "--no-cache", "--disk", "100", "--pids", "64"},
			nil, "", func(t *testing.T, r seenRequest) {
				want := map[string]string{"Airfile": "644:FROM template:host\nRUN echo hi\n", "app/": "dir", "app/y.py": "644:print(2)\n"}
				if r.Query != "disk_mb=100&name=py&no_cache=true&pids=64&replace=true" || fmt.Sprint(r.Tar) != fmt.Sprint(want) || r.RegistryAuth != "" {
					t.Errorf("request %+v, want tar %v", r, want)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, _, err := runCLI(t, srv, tt.env, tt.stdin, tt.args...)
			if code != 0 || err != nil {
				t.Fatalf("exit %d: %v", code, err)
			}
			if stdout != "py\t2 layers\t2.0 KiB\n" {
				t.Errorf("stdout %q", stdout)
			}
			reqs := fake.take()
			if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].Path != "/v1/templates" {
				t.Fatalf("requests %+v", reqs)
			}
			tt.check(t, reqs[0])
		})
	}

	bad := []struct {
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{[]string{"template", "build", "py"}, nil, 2, "give one of"},
		{[]string{"template", "build", "--from", "x/y:1"}, nil, 2, "needs a NAME"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--debian", "bookworm"}, nil, 2, "give one of"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--packages", "git"}, nil, 2, "--packages goes with --debian"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "ctx"}, nil, 2, "CONTEXT_DIR goes with -f"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--username", "u"}, nil, 2, "needs a password"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--password", "p"}, map[string]string{envRegistryPassword: "x"}, 2, "--password needs --username"},
		{[]string{"template", "build", "py", "-f", filepath.Join(dir, "plain/Airfile"), "a", "b"}, nil, 2, "at most one CONTEXT_DIR"},
		{[]string{"template", "build", "py", "-f", filepath.Join(dir, "bad/Airfile")}, nil, 1, "line 3"},
		{[]string{"template", "build", "py", "-f", filepath.Join(dir, "missing")}, nil, 1, "cannot read the Airfile"},
		{[]string{"template", "frobnicate"}, nil, 2, "unknown template subcommand"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--memory", "-1"}, nil, 2, "limits must not be negative"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--command-policy", filepath.Join(dir, "missing.json")}, nil, 1, "cannot read the command policy"},
		{[]string{"template", "build", "py", "--from", "x/y:1", "--command-policy", filepath.Join(dir, "bad-policy.json")}, nil, 2, "not a command policy"},
	}
	for _, tt := range bad {
		code, _, _, err := runCLI(t, srv, tt.env, "", tt.args...)
		if code != tt.code || err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%v: exit %d, %v; want %d with %q", tt.args, code, err, tt.code, tt.msg)
		}
	}
	if reqs := fake.take(); len(reqs) != 0 {
		t.Errorf("bad invocations sent %d requests", len(reqs))
	}
}

func TestTemplateBuildProgressPlain(t *testing.T) {
	fake := &fakeTemplateServer{lines: []string{
		`{"type":"step","step":1,"steps":3,"instruction":"FROM registry.test/img:1"}`,
		`{"type":"progress","step":1,"steps":3,"layer":1,"layers":2,"done":10,"total":100}`,
		`{"type":"progress","step":1,"steps":3,"layer":1,"layers":2,"done":100,"total":100}`,
		`{"type":"progress","step":1,"steps":3,"layer":2,"layers":2,"done":2048}`,
		`{"type":"step","step":2,"steps":3,"instruction":"RUN pip install x"}`,
		`{"type":"log","step":2,"steps":3,"text":"Collecting x"}`,
		`{"type":"cached","step":3,"steps":3,"instruction":"ENV A=1"}`,
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	code, stdout, stderr, err := runCLI(t, srv, nil, "", "template", "build", "py", "--from", "registry.test/img:1")
	if code != 0 || err != nil {
		t.Fatalf("exit %d: %v", code, err)
	}
	want := "step 1/3: FROM registry.test/img:1\n  layer 1/2: 100 B\n" +
		"  layer 2/2: 2.0 KiB\nstep 2/3: RUN pip install x\n  (1 line of output; --verbose shows them)\nstep 3/3: ENV A=1 (cached)\n" +
		"done: 3 steps (1 cached) in "
	if !strings.HasPrefix(stderr, want) || !strings.HasSuffix(stderr, "; py from airfile\n") {
		t.Errorf("stderr:\n%s\nwant:\n%s...", stderr, want)
	}
	// --verbose shows the output.
	_, _, stderr, _ = runCLI(t, srv, nil, "", "template", "build", "py", "--from", "registry.test/img:1", "--verbose")
	if !strings.Contains(stderr, "step 2/3: RUN pip install x\nCollecting x\nstep 3/3") {
		t.Errorf("--verbose stderr:\n%s", stderr)
	}
	if stdout != "py\t2 layers\t2.0 KiB\n" {
		t.Errorf("stdout %q", stdout)
	}
	// --json prints the template.
	_, stdout, _, _ = runCLI(t, srv, nil, "", "template", "build", "py", "--from", "registry.test/img:1", "--json")
	var d client.TemplateDetail
	if err := json.Unmarshal([]byte(stdout), &d); err != nil || d.Name != "py" || len(d.LayerList) != 2 {
		t.Errorf("--json output %q: %v", stdout, err)
	}
}

func TestBuildProgressTerminal(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	p := &buildProgress{w: &out, tty: true, width: 100, now: func() time.Time { return now }, verbose: true}
	p.event(client.BuildEvent{Type: "step", Step: 1, Steps: 2, Instruction: "FROM img"})
	p.event(client.BuildEvent{Type: "progress", Step: 1, Layer: 1, Layers: 1, Done: 50, Total: 100}) // a new layer: drawn
	p.event(client.BuildEvent{Type: "progress", Step: 1, Layer: 1, Layers: 1, Done: 60, Total: 100}) // too soon
	now = now.Add(redrawEvery)
	p.event(client.BuildEvent{Type: "progress", Step: 1, Layer: 1, Layers: 1, Done: 70, Total: 100})
	p.event(client.BuildEvent{Type: "log", Text: "evil \x1b[2J escape"})
	p.event(client.BuildEvent{Type: "progress", Step: 1, Layer: 1, Layers: 1, Done: 100, Total: 100}) // complete: drawn
	p.event(client.BuildEvent{Type: "step", Step: 2, Steps: 2, Instruction: "RUN a\nb"})
	p.finish(nil)
	s := out.String()
	want := "step 1/2: FROM img\n" +
		"\x1b[1A\r\x1b[Jstep 1/2: FROM img\n  layer 1/1 [" + strings.Repeat("=", 20) + strings.Repeat(" ", 20) + "] 50 B/100 B\n" +
		"\x1b[2A\r\x1b[Jstep 1/2: FROM img\n  layer 1/1 [" + strings.Repeat("=", 28) + strings.Repeat(" ", 12) + "] 70 B/100 B\n" +
		"\x1b[2A\r\x1b[Jevil [2J escape\n" + // the block goes, the log line takes its place
		"step 1/2: FROM img\n  layer 1/1 [" + strings.Repeat("=", 28) + strings.Repeat(" ", 12) + "] 70 B/100 B\n" +
		"\x1b[2A\r\x1b[Jstep 1/2: FROM img\n  layer 1/1 [" + strings.Repeat("=", 40) + "] 100 B/100 B\n" +
		"\x1b[2A\r\x1b[Jstep 1/2: FROM img\n  layer 1/1 [" + strings.Repeat("=", 40) + "] 100 B/100 B\n" + // the step's final state stays
		"step 2/2: RUN a b\n" +
		"\x1b[1A\r\x1b[Jstep 2/2: RUN a b\n"
	if s != want {
		t.Errorf("output\n%q\nwant\n%q", s, want)
	}
	// A narrow terminal: lines fit.
	out.Reset()
	p = &buildProgress{w: &out, tty: true, width: 30, now: func() time.Time { return now }}
	p.event(client.BuildEvent{Type: "step", Step: 1, Steps: 1, Instruction: strings.Repeat("x", 100)})
	p.event(client.BuildEvent{Type: "progress", Step: 1, Layer: 1, Layers: 1, Done: 5 << 20, Total: 10 << 20})
	for _, l := range strings.Split(out.String(), "\n") {
		if i := strings.LastIndex(l, "\x1b[J"); i >= 0 {
			l = l[i+3:]
		}
		if len([]rune(l)) > 29 {
			t.Errorf("line wider than the terminal: %q", l)
		}
	}
}

func TestTemplateListInspectRemove(t *testing.T) {
	fake := &fakeTemplateServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	code, stdout, _, err := runCLI(t, srv, nil, "", "template", "ls")
	if code != 0 || err != nil {
		t.Fatalf("ls: %d %v", code, err)
	}
	for _, want := range []string{"NAME", "SCOPE", "host", "shared", "built-in", "py", "tenant", "airfile", "2.0 KiB", "1.0 KiB", "Store: 3 layers, 3.0 KiB on disk"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ls output lacks %q:\n%s", want, stdout)
		}
	}
	_, stdout, _, _ = runCLI(t, srv, nil, "", "template", "ls", "--json")
	var list client.TemplateList
	if err := json.Unmarshal([]byte(stdout), &list); err != nil || len(list.Templates) != 2 || list.Usage.Layers != 3 {
		t.Errorf("ls --json %q: %v", stdout, err)
	}
	if strings.Contains(stdout, "0001-01-01") {
		t.Errorf("ls --json shows a zero time for the built-in template: %s", stdout)
	}

	code, stdout, _, err = runCLI(t, srv, nil, "", "template", "inspect", "py")
	if code != 0 || err != nil {
		t.Fatalf("inspect: %d %v", code, err)
	}
	for _, want := range []string{"Name:       py", "Scope:      tenant", "Workdir:    /app", "Limits:     0.5 CPUs, 300 MB memory", "  LANG=C.UTF-8", "sha256:aaaaaaaaaaaa", "shared", "Cmd:        python3"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, stdout)
		}
	}
	if code, _, _, err := runCLI(t, srv, nil, "", "template", "inspect", "nope"); code != 1 || err == nil {
		t.Errorf("inspect missing: %d %v", code, err)
	}
	fake.take()
	// --shared names the shared template of that name.
	if code, _, _, err := runCLI(t, srv, nil, "", "template", "inspect", "--shared", "py"); code != 0 || err != nil {
		t.Errorf("inspect --shared: %d %v", code, err)
	}
	if code, _, _, err := runCLI(t, srv, nil, "", "template", "rm", "--shared", "py"); code != 0 || err != nil {
		t.Errorf("rm --shared: %d %v", code, err)
	}
	if reqs := fake.take(); len(reqs) != 2 || reqs[0].Method != "GET" || reqs[0].Query != "shared=true" ||
		reqs[1].Method != "DELETE" || reqs[1].Query != "shared=true" {
		t.Errorf("--shared requests %+v", reqs)
	}

	code, stdout, stderr, err := runCLI(t, srv, nil, "", "template", "rm", "py", "busy")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("rm: %d %v", code, err)
	}
	if stdout != "py\tfreed 1 layers, 1.0 KiB\n" || !strings.Contains(stderr, "busy: template \"busy\" is in use") {
		t.Errorf("rm stdout %q stderr %q", stdout, stderr)
	}
	_, stdout, _, _ = runCLI(t, srv, nil, "", "template", "rm", "py", "--json")
	if strings.TrimSpace(stdout) != "[\n  {\n    \"name\": \"py\",\n    \"freed_layers\": 1,\n    \"freed_bytes\": 1024\n  }\n]" {
		t.Errorf("rm --json %q", stdout)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestTemplateImportCLI: template import sends a file as it is, an OCI
// layout directory as a tar of its files, standard input as it comes,
// with the flags in the query; bad invocations send nothing.
func TestTemplateImportCLI(t *testing.T) {
	fake := &fakeTemplateServer{lines: []string{
		`{"type":"step","step":1,"steps":1,"instruction":"IMPORT docker-archive"}`,
		`{"type":"progress","step":1,"steps":1,"layer":1,"layers":1,"done":100,"total":100}`,
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"app.tar":                    "not really a tar, sent as is",
		"layout/oci-layout":          `{"imageLayoutVersion":"1.0.0"}`,
		"layout/index.json":          `{}`,
		"layout/blobs/sha256/abcdef": "blob",
		"notlayout/x":                "x",
	})
	code, stdout, stderr, err := runCLI(t, srv, nil, "", "template", "import", "py", filepath.Join(dir, "layout"), "--tag", "v1", "--replace")
	if code != 0 || err != nil || stdout != "py\t2 layers\t2.0 KiB\n" {
		t.Fatalf("import a layout: exit %d %v, stdout %q", code, err, stdout)
	}
	if !strings.Contains(stderr, "step 1/1: IMPORT docker-archive\n  layer 1/1: 100 B\ndone: 1 step (0 cached) in") {
		t.Errorf("stderr:\n%s", stderr)
	}
	reqs := fake.take()
	if len(reqs) != 1 || reqs[0].Path != "/v1/templates/py/import" || reqs[0].Query != "replace=true&tag=v1" ||
		reqs[0].ContentType != "application/x-tar" || reqs[0].Accept != "application/x-ndjson" {
		t.Fatalf("requests %+v", reqs)
	}
	if got := reqs[0].Tar; len(got) != 5 || got["blobs/"] != "dir" || got["oci-layout"] != `644:{"imageLayoutVersion":"1.0.0"}` || got["blobs/sha256/abcdef"] != "644:blob" {
		t.Errorf("layout tar %v", got)
	}
	// A file goes as it is; so does standard input.
	for _, args := range [][]string{{filepath.Join(dir, "app.tar")}, {"-", "--shared", "--allow-setuid"}} {
		var body bytes.Buffer
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(&body, r.Body)
			r.Body = io.NopCloser(bytes.NewReader(nil))
			fake.ServeHTTP(w, r)
		})
		code, _, _, err := runCLI(t, srv, nil, "piped archive", append([]string{"template", "import", "py"}, args...)...)
		want := "not really a tar, sent as is"
		if args[0] == "-" {
			want = "piped archive"
		}
		if code != 0 || err != nil || body.String() != want {
			t.Errorf("import %v: exit %d %v, body %q", args, code, err, body.String())
		}
	}
	if reqs := fake.take(); len(reqs) != 2 || reqs[1].Query != "allow_setuid=true&shared=true" {
		t.Errorf("requests %+v", reqs)
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"template", "import", "py"}, 2, "usage: airlock template import NAME FILE|DIR|-"},
		{[]string{"template", "import", "py", filepath.Join(dir, "notlayout")}, 1, "without an oci-layout file"},
		{[]string{"template", "import", "py", filepath.Join(dir, "missing.tar")}, 1, "no such file"},
	} {
		code, _, _, err := runCLI(t, srv, nil, "", tt.args...)
		if code != tt.code || err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%v: exit %d, %v; want %d with %q", tt.args, code, err, tt.code, tt.msg)
		}
	}
	if reqs := fake.take(); len(reqs) != 0 {
		t.Errorf("bad invocations sent %d requests", len(reqs))
	}
}

// TestBuildProgressQuiet: without --verbose a step's output is counted,
// not shown (its latest line is the terminal's progress line), warnings
// are shown, and a failed step's last lines are printed.
func TestBuildProgressQuiet(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	p := &buildProgress{w: &out, width: 100, now: func() time.Time { return now }, start: now}
	p.event(client.BuildEvent{Type: "warning", Text: "airfile line 3: EXPOSE is ignored: x"})
	p.event(client.BuildEvent{Type: "step", Step: 1, Steps: 2, Instruction: "DEBIAN bookworm"})
	for i := range 30 {
		p.event(client.BuildEvent{Type: "log", Step: 1, Text: fmt.Sprintf("Unpacking %d", i)})
	}
	p.event(client.BuildEvent{Type: "step", Step: 2, Steps: 2, Instruction: "RUN make"})
	p.event(client.BuildEvent{Type: "log", Step: 2, Text: "cc: error: \x1b[31mno\x1b[0m"})
	now = now.Add(1500 * time.Millisecond)
	p.finish(errors.New("RUN exited 1"))
	want := "warning: airfile line 3: EXPOSE is ignored: x\n" +
		"step 1/2: DEBIAN bookworm\n  (30 lines of output; --verbose shows them)\n" +
		"step 2/2: RUN make\n  (1 line of output; --verbose shows them)\n" +
		"the last 1 line of output of the failed step:\n  cc: error: [31mno[0m\n"
	if out.String() != want {
		t.Errorf("plain output\n%q\nwant\n%q", out.String(), want)
	}
	if s := p.summary(); s != "2 steps (0 cached) in 1.5s" {
		t.Errorf("summary %q", s)
	}
	// On a terminal the latest line is the block's last line, and the
	// step keeps its count once it is over.
	out.Reset()
	p = &buildProgress{w: &out, tty: true, width: 60, now: func() time.Time { return now }}
	p.event(client.BuildEvent{Type: "step", Step: 1, Steps: 1, Instruction: "DEBIAN bookworm"})
	now = now.Add(redrawEvery)
	p.event(client.BuildEvent{Type: "log", Step: 1, Text: "Setting up libc6"})
	p.finish(nil)
	want = "step 1/1: DEBIAN bookworm\n" +
		"\x1b[1A\r\x1b[Jstep 1/1: DEBIAN bookworm\n  [1] Setting up libc6\n" +
		"\x1b[2A\r\x1b[Jstep 1/1: DEBIAN bookworm (1 line of output)\n"
	if out.String() != want {
		t.Errorf("terminal output\n%q\nwant\n%q", out.String(), want)
	}
}

// TestShortSource: template ls shows a source with its digests cut to 12
// hex digits, within 80 characters.
func TestShortSource(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	if got := shortSource("airfile (2 steps) on image docker.io/library/python:3.12@" + d); got != "airfile (2 steps) on image docker.io/library/python:3.12@sha256:abababababab" {
		t.Errorf("shortSource = %q", got)
	}
	if got := shortSource("debian bookworm: " + strings.Repeat("pkg, ", 40)); len([]rune(got)) > 80 {
		t.Errorf("shortSource is %d characters", len([]rune(got)))
	}
}

func TestDescribeCommandPolicy(t *testing.T) {
	for _, tt := range []struct {
		p    *client.CommandPolicy
		want string
	}{
		{nil, "-"},
		{&client.CommandPolicy{}, "default allow"},
		{&client.CommandPolicy{Default: "deny", Rules: []client.CommandRule{{Action: "allow", Prefix: []string{"git", "status"}}, {Action: "ask", Prefix: []string{"rm"}}}},
			"default deny; allow git status; ask rm"},
	} {
		if got := describeCommandPolicy(tt.p); got != tt.want {
			t.Errorf("describeCommandPolicy(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}
