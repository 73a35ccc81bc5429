package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

const okAirfile = "FROM template:host\nCOPY app /app\n"

// sparseBomb is a tar whose one entry is a PAX (GNU 1.0) sparse file of
// 10 GB made of one hole: tar.Reader expands it without reading input.
// Go's tar.Writer cannot write one, so the PAX header block is patched in.
func sparseBomb(t testing.TB) []byte {
	t.Helper()
	rec := func(k, v string) string {
		for l := len(k) + len(v) + 3; ; {
			s := fmt.Sprintf("%d %s=%s\n", l, k, v)
			if len(s) == l {
				return s
			}
			l = len(s)
		}
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", "bomb") + rec("GNU.sparse.realsize", "10000000000")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	data := make([]byte, 512)
	copy(data, "1\n0\n0\n") // the sparse map: one empty data region
	for _, e := range []struct {
		name string
		body []byte
	}{{"pax", []byte(pax)}, {"x", data}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Size: int64(len(e.body)), Format: tar.FormatUSTAR}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	b[156] = tar.TypeXHeader
	var sum int
	for i := range 512 {
		if i >= 148 && i < 156 {
			sum += ' '
		} else {
			sum += int(b[i])
		}
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func TestBuildContextUpload(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	dir := t.TempDir()
	for p, body := range map[string]string{"app/main.py": "print(1)\n", "app/run.sh": "#!/bin/sh\n", "Airfile": "FROM ignored/image:1\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "app/run.sh"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("main.py", filepath.Join(dir, "app/link.py")); err != nil {
		t.Fatal(err)
	}
	tpl, err := e.client(tkOp).BuildTemplateContext(ctx, client.BuildContextRequest{
		Name: "ctx", Shared: true, Airfile: []byte(okAirfile), ContextDir: dir, NoCache: true, Insecure: true,
		RegistryAuth: &client.RegistryAuth{Token: "tok"}, Limits: &client.Limits{CPUs: 1.5, MemoryMB: 64, DiskMB: 100, Pids: 50},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Name != "ctx" {
		t.Errorf("template %+v", tpl)
	}
	reqs := e.builder.requests()
	if len(reqs) != 1 || string(reqs[0].Airfile) != okAirfile || !reqs[0].NoCache || !reqs[0].Insecure || reqs[0].AllowSetuid || reqs[0].Owner != "" ||
		reqs[0].Registry.Token != "tok" || reqs[0].ContextDir == "" {
		t.Fatalf("requests %+v", reqs)
	}
	if want := (runtime.Limits{CPUs: 1.5, MemoryBytes: 64 << 20, DiskBytes: 100 << 20, Pids: 50}); reqs[0].Limits != want {
		t.Errorf("limits %+v, want %+v", reqs[0].Limits, want)
	}
	if l := tpl.Config.Limits; l == nil || *l != (client.Limits{CPUs: 1.5, MemoryMB: 64, DiskMB: 100, Pids: 50}) {
		t.Errorf("template limits %+v", l)
	}
	got := e.builder.contexts[0]
	want := map[string]string{
		"Airfile": "644:" + okAirfile, "app": "dir", "app/main.py": "644:print(1)\n",
		"app/run.sh": "755:#!/bin/sh\n", "app/link.py": "link:main.py",
	}
	if len(got) != len(want) {
		t.Errorf("context %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("context %s = %q, want %q", k, got[k], v)
		}
	}
	if ents, _ := os.ReadDir(e.ctxDir); len(ents) != 0 {
		t.Errorf("build context left behind: %v", ents)
	}
	out := outcomes(e.audit.take())
	if len(out) != 1 || out[0].Details["context_entries"] != int64(5) || out[0].Details["source"] != "template:host" {
		t.Errorf("audit %+v", out)
	}

	// Without an explicit recipe, the context's own Airfile is used.
	if err := os.WriteFile(filepath.Join(dir, "Airfile"), []byte("FROM template:host\nRUN true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client(tkAdminA).BuildTemplateContext(ctx, client.BuildContextRequest{Name: "ctx2", ContextDir: dir}, nil); err != nil {
		t.Fatal(err)
	}
	if r := e.builder.requests()[1]; string(r.Airfile) != "FROM template:host\nRUN true\n" {
		t.Errorf("airfile %q", r.Airfile)
	}
	// A context the client cannot read fails before anything is built.
	if _, err := e.client(tkAdminA).BuildTemplateContext(ctx, client.BuildContextRequest{Name: "ctx3", ContextDir: filepath.Join(dir, "nope")}, nil); err == nil {
		t.Error("missing context dir: no error")
	}
}

func TestBuildContextHostile(t *testing.T) {
	e := newTplEnv(t, func(tc *registry.Config) { tc.MaxContextBytes = 64 << 10; tc.MaxContextFiles = 50 })
	air := testutil.Entry{Name: "Airfile", Body: okAirfile}
	many := []testutil.Entry{air}
	for i := range 60 {
		many = append(many, testutil.Entry{Name: "f" + strings.Repeat("x", i)})
	}
	tests := []struct {
		name    string
		body    []byte
		query   string
		hdr     map[string]string
		status  int
		code    string
		msgPart string
	}{
		{"dotdot", testutil.Tar(t, air, testutil.Entry{Name: "../evil", Body: "x"}), "", nil, 400, CodeInvalidArgument, "names with .."},
		{"nested dotdot", testutil.Tar(t, air, testutil.Entry{Name: "a/../../evil", Body: "x"}), "", nil, 400, CodeInvalidArgument, "names with .."},
		{"absolute", testutil.Tar(t, air, testutil.Entry{Name: "/etc/evil", Body: "x"}), "", nil, 400, CodeInvalidArgument, "absolute names"},
		{"absolute symlink", testutil.Tar(t, air, testutil.Entry{Name: "l", Type: tar.TypeSymlink, Link: "/etc"}), "", nil, 400, CodeInvalidArgument, "absolute link"},
		{"escaping symlink", testutil.Tar(t, air, testutil.Entry{Name: "a/l", Type: tar.TypeSymlink, Link: "../../x"}), "", nil, 400, CodeInvalidArgument, "outside the build context"},
		{"hardlink out", testutil.Tar(t, air, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "../x"}), "", nil, 400, CodeInvalidArgument, "names with .."},
		{"hardlink absolute", testutil.Tar(t, air, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "/etc/shadow"}), "", nil, 400, CodeInvalidArgument, "absolute"},
		{"device", testutil.Tar(t, air, testutil.Entry{Name: "dev", Type: tar.TypeChar}), "", nil, 400, CodeInvalidArgument, "only files, directories and links"},
		{"fifo", testutil.Tar(t, air, testutil.Entry{Name: "p", Type: tar.TypeFifo}), "", nil, 400, CodeInvalidArgument, "only files"},
		{"no airfile", testutil.Tar(t, testutil.Entry{Name: "x", Body: "x"}), "", nil, 400, CodeInvalidArgument, "no Airfile"},
		{"airfile dir", testutil.Tar(t, testutil.Entry{Name: "Airfile/", Type: tar.TypeDir}), "", nil, 400, CodeInvalidArgument, "not a regular file"},
		{"airfile symlink", testutil.Tar(t, testutil.Entry{Name: "x", Body: okAirfile}, testutil.Entry{Name: "Airfile", Type: tar.TypeSymlink, Link: "x"}), "", nil, 400, CodeInvalidArgument, "not a regular file"},
		{"bad airfile", testutil.Tar(t, testutil.Entry{Name: "Airfile", Body: "FROM template:host\nCOPY missing /x\nBOGUS\n"}), "", nil, 400, CodeInvalidArgument, "airfile line 3"},
		{"file over dir", testutil.Tar(t, air, testutil.Entry{Name: "d/", Type: tar.TypeDir}, testutil.Entry{Name: "d/x", Body: "x"}, testutil.Entry{Name: "d", Body: "x"}), "", nil, 400, CodeInvalidArgument, "directory of that name"},
		{"too big", testutil.Tar(t, air, testutil.Entry{Name: "big", Body: strings.Repeat("x", 70<<10)}), "", nil, 413, CodeRequestTooLarge, "larger than the limit"},
		{"too many", testutil.Tar(t, many...), "", nil, 413, CodeRequestTooLarge, "more than 50 entries"},
		{"sparse bomb", sparseBomb(t), "", nil, 413, CodeRequestTooLarge, "files of the build context are larger"},
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), "", nil, 400, CodeInvalidArgument, "not a valid tar"},
		{"truncated", testutil.Tar(t, air, testutil.Entry{Name: "f", Body: strings.Repeat("y", 5000)})[:3000], "", nil, 400, CodeInvalidArgument, "not a valid tar"},
		{"no name", testutil.Tar(t, air), "-", nil, 400, CodeInvalidArgument, "name query parameter is required"},
		{"bad flag", testutil.Tar(t, air), "name=x&no_cache=maybe", nil, 400, CodeInvalidArgument, "no_cache must be"},
		{"unknown param", testutil.Tar(t, air), "name=x&from=y", nil, 400, CodeInvalidArgument, "unknown query parameter"},
		{"bad auth header", testutil.Tar(t, air), "", map[string]string{registryAuthHeader: "%%%"}, 400, CodeInvalidArgument, registryAuthHeader},
		{"name taken", testutil.Tar(t, air), "name=host", nil, 409, CodeAlreadyExists, "already exists"},
	}
	parent := filepath.Dir(e.ctxDir)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.query
			switch q {
			case "":
				q = "name=hostile"
			case "-":
				q = ""
			}
			hdr := map[string]string{"Authorization": "Bearer " + tkAdminA, "Content-Type": "application/x-tar"}
			for k, v := range tt.hdr {
				hdr[k] = v
			}
			resp, b := e.raw("POST", "/v1/templates?"+q, hdr, bytes.NewReader(tt.body))
			var eb wire.Error
			_ = json.Unmarshal(b, &eb)
			if resp.StatusCode != tt.status || eb.Error.Code != tt.code || !strings.Contains(eb.Error.Message, tt.msgPart) {
				t.Errorf("got %d %s, want %d %s with %q", resp.StatusCode, b, tt.status, tt.code, tt.msgPart)
			}
			if strings.Contains(eb.Error.Message, e.ctxDir) || strings.Contains(eb.Error.Message, parent) {
				t.Errorf("the message shows a host path: %s", eb.Error.Message)
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 || ents[0].Name() != filepath.Base(e.ctxDir) {
				t.Errorf("something was written next to the contexts directory: %v", ents)
			}
			if ents, _ := os.ReadDir(e.ctxDir); len(ents) != 0 {
				t.Errorf("build context left behind: %v", ents)
			}
		})
	}
	if n := len(e.builder.requests()); n != 0 {
		t.Errorf("the builder ran %d times on hostile contexts", n)
	}
	// A declared length over the cap is refused before the upload.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/templates?name=x", bytes.NewReader(make([]byte, 65<<10)))
	req.Header.Set("Authorization", "Bearer "+tkAdminA)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized Content-Length: %d", resp.StatusCode)
	}
}

func TestBuildContextNotAccepted(t *testing.T) {
	e := newTplEnv(t, func(tc *registry.Config) { tc.ContextDir = "" })
	resp, b := e.raw("POST", "/v1/templates?name=x", map[string]string{"Authorization": "Bearer " + tkAdminA, "Content-Type": "application/x-tar"},
		bytes.NewReader(testutil.Tar(t, testutil.Entry{Name: "Airfile", Body: okAirfile})))
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("got %d %s", resp.StatusCode, b)
	}
}

func TestRegistryAuthHeaderRoundTrip(t *testing.T) {
	b, _ := json.Marshal(client.RegistryAuth{Username: "u", Password: "p"})
	got, err := parseRegistryAuthHeader([]string{base64.URLEncoding.EncodeToString(b)})
	if err != nil || got != (registry.Credentials{Username: "u", Password: "p"}) {
		t.Errorf("got %+v, %v", got, err)
	}
	if got, err := parseRegistryAuthHeader([]string{"e30"}); err != nil || got != (registry.Credentials{}) { // {}
		t.Errorf("empty credentials: %+v, %v", got, err)
	}
}

func TestBuildFromQueryLimits(t *testing.T) {
	r, err := buildFromQuery("name=x&cpus=0.25&memory_mb=128&disk_mb=10&pids=20")
	if err != nil || r.Limits != (runtime.Limits{CPUs: 0.25, MemoryBytes: 128 << 20, DiskBytes: 10 << 20, Pids: 20}) {
		t.Errorf("limits %+v, %v", r.Limits, err)
	}
	for q, msg := range map[string]string{
		"name=x&memory_mb=abc": "memory_mb must be an integer",
		"name=x&cpus=x":        "cpus must be a number",
		"name=x&cpus=-1":       "cpus must be between",
		"name=x&pids=99999999": "pids must be between",
		"name=x&disk_mb=-5":    "disk_mb must be between",
		"name=x&cpus=NaN":      "cpus must be between",
	} {
		if _, err := buildFromQuery(q); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", q, err, msg)
		}
	}
}
