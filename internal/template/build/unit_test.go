package build

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestApplyConfig(t *testing.T) {
	f, err := airfile.Parse(strings.NewReader(`FROM template:x
ENV A=1 B=two
ENV C="$A-$B" A=3
ENV D=${A}${MISSING:-def}
WORKDIR /srv
WORKDIR app/$A
WORKDIR ..
USER user:1000
`))
	if err != nil {
		t.Fatal(err)
	}
	j := &job{}
	j.cfg.Env = []string{"PATH=/bin", "A=0"}
	var workdirs []string
	for _, s := range f.Steps[1:] {
		if err := j.applyConfig(s); err != nil {
			t.Fatalf("line %d: %v", s.Line, err)
		}
		if s.Kind == airfile.KindWorkdir {
			workdirs = append(workdirs, j.cfg.Workdir)
		}
	}
	if want := []string{"PATH=/bin", "B=two", "C=1-two", "A=3", "D=3def"}; !slices.Equal(j.cfg.Env, want) {
		t.Errorf("env = %v, want %v", j.cfg.Env, want)
	}
	if want := []string{"/srv", "/srv/app/3", "/srv/app"}; !slices.Equal(workdirs, want) {
		t.Errorf("workdirs = %v, want %v", workdirs, want)
	}
	if j.cfg.User != "user:1000" {
		t.Errorf("user = %q", j.cfg.User)
	}
}

// TestUserIDs checks how a USER becomes ids: from the image's passwd and
// group files first, then the sandbox's own root and user accounts.
func TestUserIDs(t *testing.T) {
	layer := t.TempDir()
	if err := os.Mkdir(filepath.Join(layer, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nnode:x:1000:1000::/home/node:/bin/sh\napp:x:1234:999::/app:/bin/sh\n",
		"group":  "root:x:0:\nstaff:x:50:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(layer, "etc", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := newStack([]string{layer})
	for _, tc := range []struct {
		user     string
		uid, gid int
	}{
		{"", 0, 0}, {"root", 0, 0}, {"daemon", 1, 1}, {"daemon:staff", 1, 50}, {"node", 1000, 1000},
		{"user", account.SandboxUID, account.SandboxGID}, {"1234:50", 1234, 50},
		// A named user's primary group, and gid 0 for a bare uid without
		// an entry: the ids the runtime gives the user's processes.
		{"app", 1234, 999}, {"4321", 4321, 0},
	} {
		uid, gid, err := userIDs(st, tc.user)
		if err != nil || uid != tc.uid || gid != tc.gid {
			t.Errorf("userIDs(%q) = %d, %d, %v; want %d, %d", tc.user, uid, gid, err, tc.uid, tc.gid)
		}
	}
	for _, bad := range []string{"nobody", "daemon:wheel"} {
		if _, _, err := userIDs(st, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("userIDs(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestCacheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, cacheFile)
	log := slog.New(slog.DiscardHandler)
	c, err := openCache(path, log)
	if err != nil {
		t.Fatal(err)
	}
	k1, k2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	layer := "sha256:" + strings.Repeat("c", 64)
	c.put(k1, layer)
	c.put(k2, "")
	// put only records; flush saves, once.
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("put wrote the file before flush: %v", err)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	// Reopened, the entries are there; nothing is left in tmp/.
	c2, err := openCache(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := c2.get(k1); !ok || e.Layer != layer {
		t.Errorf("get(k1) = %+v, %v", e, ok)
	}
	if e, ok := c2.get(k2); !ok || e.Layer != "" {
		t.Errorf("get(k2) = %+v, %v", e, ok)
	}
	if _, ok := c2.get(strings.Repeat("d", 64)); ok {
		t.Error("unknown key found")
	}
	// Use times read by get are saved by flush.
	before, _ := os.ReadFile(path)
	if err := c2.flush(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); bytes.Equal(before, after) {
		t.Error("flush did not save the new use times")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("tmp/ holds %d files", len(ents))
	}
	// Bad entries are dropped; a damaged file is an empty cache.
	os.WriteFile(path, []byte(`{"version":1,"entries":{"short":{"layer":""},"`+k1+`":{"layer":"sha256:bad"},"`+k2+`":{"layer":""}}}`), 0o600)
	c3, err := openCache(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(c3.entries) != 1 {
		t.Errorf("entries = %v, want only k2", c3.entries)
	}
	for _, bad := range []string{"{", `{"version":99,"entries":{}}`, ""} {
		os.WriteFile(path, []byte(bad), 0o600)
		c4, err := openCache(path, log)
		if err != nil || len(c4.entries) != 0 {
			t.Errorf("damaged file %q: %v, %d entries", bad, err, len(c4.entries))
		}
	}
}

func TestCacheEviction(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "tmp"), 0o700)
	c, err := openCache(filepath.Join(dir, cacheFile), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for i := range maxCacheEntries {
		c.entries[fmt.Sprintf("%064x", i)] = cacheEntry{Used: old.Add(time.Duration(i) * time.Millisecond)}
	}
	c.put(strings.Repeat("f", 64), "")
	if len(c.entries) != maxCacheEntries {
		t.Errorf("%d entries, want %d", len(c.entries), maxCacheEntries)
	}
	if _, ok := c.entries[fmt.Sprintf("%064x", 0)]; ok {
		t.Error("the least recently used entry survived")
	}
}

func TestOutputLines(t *testing.T) {
	var got []string
	em := &emitter{f: func(ev Event) { got = append(got, ev.Text) }}
	o := &output{em: em, step: 2}
	w := o.writer()
	long := strings.Repeat("x", maxLogLine+10)
	for _, chunk := range []string{"one\ntw", "o\r\nthree\x1b[0m\tend", "\n", long, "\nlast"} {
		w.Write([]byte(chunk))
	}
	o.flush()
	want := []string{"one", "two", "three[0m end", strings.Repeat("x", maxLogLine) + "...", "last"}
	if !slices.Equal(got, want) {
		t.Errorf("lines = %q\nwant %q", got, want)
	}
	o.offline = true
	err := o.failure(7, &agentclient.ExecResult{Status: agentclient.StatusError, ExitCode: 100}, time.Minute)
	var re *RunError
	if !errors.As(err, &re) || re.ExitCode != 100 || re.Line != 7 || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("failure = %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "exit code 100") || !strings.Contains(msg, "without network access") || !strings.Contains(msg, "\n  last") {
		t.Errorf("message %q", msg)
	}
	if err := o.failure(7, &agentclient.ExecResult{Status: agentclient.StatusTimeout}, time.Minute); !errors.Is(err, errdefs.ErrTimeout) {
		t.Errorf("timeout: %v", err)
	}
}

// tarOf builds a tar of entries; regular files get their name as
// content.
func tarOf(t testing.TB, entries ...testutil.Entry) []byte {
	t.Helper()
	for i, e := range entries {
		if e.Type == 0 || e.Type == tar.TypeReg {
			entries[i].Body = e.Name
		}
	}
	return testutil.Tar(t, entries...)
}

func TestFilterChanges(t *testing.T) {
	in := tarOf(t,
		testutil.Entry{Name: ".airlock/", Type: tar.TypeDir, Mode: 0o755},
		testutil.Entry{Name: ".airlock/bin/", Type: tar.TypeDir, Mode: 0o755},
		testutil.Entry{Name: ".airlock/bin/airlock", Type: tar.TypeReg, Mode: 0o644},
		testutil.Entry{Name: ".wh..airlock", Type: tar.TypeReg},
		testutil.Entry{Name: ".airlockish", Type: tar.TypeReg, Mode: 0o644},
		testutil.Entry{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		testutil.Entry{Name: "etc/.wh.hostname", Type: tar.TypeReg},
		testutil.Entry{Name: "etc/greeting", Type: tar.TypeReg, Mode: 0o600, UID: 1000, GID: 1000},
		testutil.Entry{Name: "./.airlock/x", Type: tar.TypeReg},
	)
	var out bytes.Buffer
	if err := filterChanges(bytes.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		names = append(names, fmt.Sprintf("%s:%d:%s", h.Name, h.Uid, body))
	}
	want := []string{".airlockish:0:.airlockish", "etc/:0:", "etc/.wh.hostname:0:etc/.wh.hostname", "etc/greeting:1000:etc/greeting"}
	if !slices.Equal(names, want) {
		t.Errorf("filtered = %q, want %q", names, want)
	}
	if err := filterChanges(bytes.NewReader(in[:700]), io.Discard); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("truncated tar: %v", err)
	}
	if err := filterChanges(strings.NewReader(strings.Repeat("junk", 200)), io.Discard); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("junk: %v", err)
	}
}

// FuzzFilterChanges feeds arbitrary streams (what a hostile sandbox could
// send) to the filter: it must return, and whatever it passes on must be
// a valid tar without the runtime's directory.
func FuzzFilterChanges(f *testing.F) {
	f.Add(tarOf(f, testutil.Entry{Name: ".airlock/x", Type: tar.TypeReg}, testutil.Entry{Name: "a", Type: tar.TypeReg}))
	f.Add(tarOf(f, testutil.Entry{Name: "../../etc/passwd", Type: tar.TypeSymlink, Link: "/"}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		if err := filterChanges(bytes.NewReader(data), &out); err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not ErrInvalidArgument", err)
			}
			return
		}
		tr := tar.NewReader(&out)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatalf("filtered stream is not a valid tar: %v", err)
			}
			if isRuntimePath(h.Name) {
				t.Fatalf("runtime path %q passed", h.Name)
			}
		}
	})
}

// TestCacheKeysPerOwner: the step cache keys of one recipe differ between
// namespaces, so no build reuses a step another namespace's build made;
// shared builds keep the keys they had before namespaces existed.
func TestCacheKeysPerOwner(t *testing.T) {
	f, err := airfile.Parse(strings.NewReader("DEBIAN bookworm\nRUN echo hi\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := &Builder{cfg: Config{StepTimeout: time.Minute}}
	keys := map[string]string{}
	for _, owner := range []string{"", "tenant-a", "tenant-b"} {
		j := &job{b: b, req: Request{Name: "x", Owner: owner}, file: f}
		id, err := j.resolveBase(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		ks, err := f.CacheKeys(t.Context(), "", id)
		if err != nil {
			t.Fatal(err)
		}
		for o, k := range keys {
			if k == ks[1] {
				t.Errorf("owners %q and %q share the RUN step's cache key", o, owner)
			}
		}
		keys[owner] = ks[1]
		if owner == "" && strings.Contains(id, "owner:") {
			t.Errorf("a shared build's base id names an owner: %q", id)
		}
	}
}

// TestSource: a template's Source says what it was made from.
func TestSource(t *testing.T) {
	many := "DEBIAN bookworm p1 p2 p3 p4 p5 p6 p7 p8 p9 p10"
	tests := []struct {
		airfile, base, want string
	}{
		{"FROM x/y:1\n", "image x/y:1@sha256:ab", "image x/y:1@sha256:ab"},
		{"FROM x/y:1\nENV A=1\nRUN true\n", "image x/y:1@sha256:ab", "airfile (2 steps) on image x/y:1@sha256:ab"},
		{"FROM template:py\n", "template:py", "airfile on template:py"},
		{"DEBIAN bookworm jq\n", "", "debian bookworm: jq"},
		{many + "\nRUN true\n", "", "airfile (1 step) on debian bookworm: p1, p2, p3, p4, p5, p6, p7, p8 +2 more"},
	}
	for _, tt := range tests {
		f, err := airfile.Parse(strings.NewReader(tt.airfile))
		if err != nil {
			t.Fatal(err)
		}
		j := &job{file: f, base: tt.base}
		if f.Base().Kind == airfile.BaseDebian {
			j.base = debianSource(f.Base())
		}
		if got := j.source(); got != tt.want {
			t.Errorf("%q: source %q, want %q", tt.airfile, got, tt.want)
		}
	}
}
