package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

func TestBuildRun(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	base, err := e.store.Get(baseName)
	if err != nil {
		t.Fatal(err)
	}
	af := `FROM template:base
RUN echo hello > /etc/greeting && mkdir -p /opt/data && echo x > /opt/data/x && rm /etc/hostname
RUN ["/bin/sh", "-c", "echo exec-form > /opt/data/exec && rm -r /opt/data/x"]
`
	m, events := e.mustBuild(t, Request{Name: "run-test", Airfile: []byte(af)})
	if got, want := eventTypes(events), []string{"1:cached", "2:step", "3:step", "3:done"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if len(m.Layers) != len(base.Layers)+2 || !slices.Equal(m.Layers[:len(base.Layers)], base.Layers) {
		t.Fatalf("layers = %v, want the base's %v and two more", m.Layers, base.Layers)
	}
	if m.Source != "airfile (2 steps) on template:base" || m.Name != "run-test" {
		t.Errorf("manifest = %+v", m)
	}
	// The deletion is a whiteout in the RUN layer; the runtime's mount
	// point is not in it.
	dir, err := e.store.LayerDir(m.Layers[len(base.Layers)])
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "etc/hostname"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/hostname in the RUN layer: %v, mode %o rdev %d; want a whiteout", err, st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(dir, runtimeDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the RUN layer holds the runtime's %s: %v", runtimeDir, err)
	}
	sb := e.sandbox(t, "run-test")
	out := sh(t, sb, "", "cat /etc/greeting /opt/data/exec; test -e /etc/hostname && echo hostname-present; test -e /opt/data/x && echo x-present; echo end")
	if out != "hello\nexec-form\nend\n" {
		t.Errorf("sandbox of the result sees %q", out)
	}
	e.noBuildSandboxes(t)
}

func TestBuildCopy(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	ctxDir := t.TempDir()
	write := func(rel, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(ctxDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "alpha\n", 0o640)
	write("tool", "#!/bin/sh\necho tool\n", 0o755)
	write("app/sub/b.txt", "beta\n", 0o600)
	write("app/top.txt", "top\n", 0o644)
	if err := os.Symlink("top.txt", filepath.Join(ctxDir, "app/link")); err != nil {
		t.Fatal(err)
	}
	af := `FROM template:base
USER user
WORKDIR /opt/special
RUN chmod 0711 /opt/special
USER root
WORKDIR /
COPY a.txt /srv/
COPY --chown=1000:1000 app /home/user/app/
COPY tool /usr/local/bin/tool
COPY a.txt /opt/special/sub/
COPY a.txt /bin/
COPY --chown=user a.txt /home/user/named.txt
WORKDIR /work
COPY a.txt rel.txt
COPY a.txt .
`
	e.mustBuild(t, Request{Name: "copy-test", Airfile: []byte(af), ContextDir: ctxDir})
	sb := e.sandbox(t, "copy-test")
	// The template's USER is root, which has no capabilities in a
	// sandbox: it cannot enter /home/user (0750), so those checks run
	// as the user.
	checks := []struct{ user, cmd, want string }{
		{"root", "stat -c '%a %u:%g' /srv/a.txt; cat /srv/a.txt", "640 0:0\nalpha\n"},
		{"user", "stat -c '%a %u:%g' /home/user/app /home/user/app/sub /home/user/app/sub/b.txt /home/user/app/top.txt", "755 1000:1000\n755 1000:1000\n600 1000:1000\n644 1000:1000\n"},
		{"user", "readlink /home/user/app/link; cat /home/user/app/link", "top.txt\ntop\n"},
		{"user", "test -e /home/user/app/app && echo nested; /usr/local/bin/tool", "tool\n"},
		// The parent keeps its mode and owner; the new directory is root's.
		{"root", "stat -c '%a %u:%g' /opt/special /opt/special/sub /opt/special/sub/a.txt", "711 1000:1000\n755 0:0\n640 0:0\n"},
		// /bin is still the symlink to usr/bin, which got the file.
		{"root", "readlink /bin; cat /usr/bin/a.txt; test -x /usr/bin/sh && echo sh-ok", "usr/bin\nalpha\nsh-ok\n"},
		{"user", "stat -c '%u:%g' /home/user/named.txt", "1000:1000\n"},
		{"root", "cat /work/rel.txt /work/a.txt", "alpha\nalpha\n"},
	}
	for _, c := range checks {
		if out := sh(t, sb, c.user, c.cmd); out != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.cmd, out, c.want)
		}
	}
}

func TestBuildConfig(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	af := `FROM template:base
ENV GREETING=hello OTHER=x
ENV COMBINED="$GREETING world" OTHER=y
WORKDIR /srv/app
USER user
RUN id -u > /tmp/uid && pwd > /tmp/pwd && echo "$COMBINED" > /tmp/env
WORKDIR sub
RUN pwd > where && id -un >> where
`
	m, _ := e.mustBuild(t, Request{Name: "config-test", Airfile: []byte(af)})
	if m.Config.Workdir != "/srv/app/sub" || m.Config.User != "user" {
		t.Errorf("config = %+v, want workdir /srv/app/sub, user user", m.Config)
	}
	for _, kv := range []string{"GREETING=hello", "COMBINED=hello world", "OTHER=y"} {
		if !slices.Contains(m.Config.Env, kv) {
			t.Errorf("env %v lacks %s", m.Config.Env, kv)
		}
	}
	sb := e.sandbox(t, "config-test")
	checks := []struct{ cmd, want string }{
		{"cat /tmp/uid /tmp/pwd /tmp/env", "1000\n/srv/app\nhello world\n"},
		{"cat /srv/app/sub/where", "/srv/app/sub\nuser\n"},
		// WORKDIR made /srv/app as root (USER came later), sub as user.
		{"stat -c '%U %a' /srv/app /srv/app/sub", "root 755\nuser 755\n"},
		{"echo $GREETING $COMBINED", "hello hello world\n"},
	}
	for _, c := range checks {
		if out := sh(t, sb, "", c.cmd); out != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.cmd, out, c.want)
		}
	}
	res, out, _ := sb.Run(t, context.Background(), execIn(m.Config.Workdir, "pwd"))
	if res.ExitCode != 0 || out != "/srv/app/sub\n" {
		t.Errorf("exec in the template's workdir: %+v %q", res, out)
	}
}

// TestBuildRootCapabilities shows that root in a RUN step can do what a
// Dockerfile RUN does (make top-level directories, chown to any id,
// install a package with dpkg), that a step runs as any user of the
// image, and that the sandbox user of a RUN step gets no capabilities.
func TestBuildRootCapabilities(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	af := `FROM template:base
RUN mkdir /newtop && chown 1000:1000 /newtop && touch /newtop/odd && chown 123:456 /newtop/odd && chmod 0640 /newtop/odd
RUN mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/opt/hello \
 && printf 'Package: hello-airlock\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.com>\nDescription: test\n' > /tmp/pkg/DEBIAN/control \
 && echo hi > /tmp/pkg/opt/hello/file && chown -R 2000:2000 /tmp/pkg/opt \
 && dpkg-deb --root-owner-group --build /tmp/pkg /tmp/hello.deb && dpkg -i /tmp/hello.deb && rm -r /tmp/pkg /tmp/hello.deb
USER nobody
RUN id -un > /tmp/who
USER user
`
	m, _ := e.mustBuild(t, Request{Name: "caps-test", Airfile: []byte(af)})
	if m.Config.User != "user" {
		t.Errorf("user = %q", m.Config.User)
	}
	sb := e.sandbox(t, "caps-test")
	checks := []struct{ cmd, want string }{
		{"stat -c '%u:%g %a' /newtop /newtop/odd", "1000:1000 755\n123:456 640\n"},
		{"dpkg-query -W -f '${Status}' hello-airlock; echo; stat -c '%u:%g' /opt/hello/file; cat /opt/hello/file", "install ok installed\n0:0\nhi\n"},
		{"cat /tmp/who; id -un", "nobody\nuser\n"},
	}
	for _, c := range checks {
		if out := sh(t, sb, "", c.cmd); out != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.cmd, out, c.want)
		}
	}
	// Outside a build, root keeps no capabilities.
	res, _, errOut := sb.Run(t, context.Background(), execAs("root", "chown 1000 /newtop/odd"))
	if res.ExitCode == 0 || !strings.Contains(errOut, "not permitted") {
		t.Errorf("chown by root in a plain sandbox: %+v %q", res, errOut)
	}

	_, _, err := e.build(t, Request{Name: "nocaps-test", Airfile: []byte("FROM template:base\nUSER user\nRUN touch /tmp/f && chown 0:0 /tmp/f\n")})
	var re *RunError
	if !errors.As(err, &re) || re.ExitCode == 0 || !strings.Contains(err.Error(), "not permitted") {
		t.Errorf("chown as the sandbox user in a RUN step: %v, want a refused chown", err)
	}
	e.noBuildSandboxes(t)
}

// TestBuildMissingWorkdir builds on an image whose WORKDIR is not in its
// layers: the RUN step runs there (the runtime makes it, root-owned, as
// Docker does), and so does a sandbox of the image.
func TestBuildMissingWorkdir(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	base, err := e.store.Get(baseName)
	if err != nil {
		t.Fatal(err)
	}
	img := layers.Manifest{Name: "nowd", Layers: base.Layers, Config: layers.Config{Workdir: "/no/such/dir", Env: base.Config.Env}}
	if _, err := e.store.Put(context.Background(), img, layers.PutOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	src, err := template.NewStored(e.store, "nowd")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Replace(src); err != nil {
		t.Fatal(err)
	}
	sb := e.sandbox(t, "nowd")
	if out := sh(t, sb, "", "pwd; stat -c '%U %a' ."); out != "/no/such/dir\nroot 755\n" {
		t.Errorf("sandbox of an image with a missing WORKDIR: %q", out)
	}
	e.mustBuild(t, Request{Name: "nowd-built", Airfile: []byte("FROM template:nowd\nRUN pwd > /tmp/pwd\n")})
	sb2 := e.sandbox(t, "nowd-built")
	if out := sh(t, sb2, "", "cat /tmp/pwd; pwd"); out != "/no/such/dir\n/no/such/dir\n" {
		t.Errorf("RUN in a missing WORKDIR: %q", out)
	}
}

func TestBuildRunFails(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	af := "FROM template:base\nRUN echo before; echo oops >&2; exit 3\n"
	_, _, err := e.build(t, Request{Name: "fail-test", Airfile: []byte(af)})
	var re *RunError
	if !errors.As(err, &re) || re.ExitCode != 3 || re.Line != 2 || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("err = %v, want a RunError at line 2 with exit code 3", err)
	}
	if !strings.Contains(err.Error(), "oops") || !strings.Contains(err.Error(), "exit code 3") {
		t.Errorf("error %q lacks the exit code or the output", err)
	}
	if _, err := e.store.Get("fail-test"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("store has the failed template: %v", err)
	}
	if _, err := e.reg.Get("fail-test"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("registry has the failed template: %v", err)
	}
	e.noBuildSandboxes(t)
}

func TestBuildCancel(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	af := "FROM template:base\nRUN echo started; sleep 60\n"
	start := time.Now()
	_, err := e.b.Build(ctx, Request{Name: "cancel-test", Airfile: []byte(af)}, func(ev Event) {
		if ev.Type == EventLog && ev.Text == "started" {
			cancel()
		}
	})
	if !errors.Is(err, errdefs.ErrCanceled) {
		t.Fatalf("err = %v, want ErrCanceled", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("cancel took %s", d)
	}
	if _, err := e.store.Get("cancel-test"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("store has the canceled template: %v", err)
	}
	e.noBuildSandboxes(t)
}

func TestBuildRefusals(t *testing.T) {
	e := withBase(t)
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "ok.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Symlinks that leave the context: to a host file, to a host
	// directory, and relative.
	for name, target := range map[string]string{"evil": "/etc/passwd", "evildir": "/etc", "up": "../../etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(ctxDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, airfile string
		ctxDir        string
		want          error
		msg           string
	}{
		{"host base", "FROM template:host\nRUN true\n", "", errdefs.ErrInvalidArgument, "host template cannot be a base"},
		{"unknown base", "FROM template:nope\n", "", errdefs.ErrNotFound, "line 1"},
		{"unknown user", "FROM template:base\nUSER ghost\nRUN true\n", "", errdefs.ErrInvalidArgument, "line 2"},
		{"unknown group", "FROM template:base\nUSER nobody:ghosts\nRUN true\n", "", errdefs.ErrInvalidArgument, "line 2"},
		{"copy without context", "FROM template:base\nCOPY ok.txt /\n", "", errdefs.ErrInvalidArgument, "line 2"},
		{"symlink to a host file", "FROM template:base\nCOPY evil /x\n", ctxDir, errdefs.ErrInvalidArgument, "evil"},
		{"symlink to a host dir", "FROM template:base\nCOPY evildir/passwd /x\n", ctxDir, errdefs.ErrInvalidArgument, "evildir"},
		{"relative escape", "FROM template:base\nCOPY up /x\n", ctxDir, errdefs.ErrInvalidArgument, "up"},
		{"dotdot source", "FROM template:base\nCOPY ../x /x\n", ctxDir, errdefs.ErrInvalidArgument, "outside the build context"},
		{"copy over a file's child", "FROM template:base\nCOPY ok.txt /etc/passwd/x\n", ctxDir, errdefs.ErrInvalidArgument, "not a directory"},
		{"not an airfile", "RUN true\n", "", errdefs.ErrInvalidArgument, "line 1"},
	}
	creates := e.rt.creates.Load()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.build(t, Request{Name: "refused", Airfile: []byte(tc.airfile), ContextDir: tc.ctxDir})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
			if strings.Contains(err.Error(), ctxDir) {
				t.Errorf("error %q names a host path", err)
			}
		})
	}
	if n := e.rt.creates.Load() - creates; n != 0 {
		t.Errorf("refused builds created %d sandboxes", n)
	}
	if _, err := e.store.Get("refused"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused build saved a template: %v", err)
	}
	// The host template's name is not the builder's to replace.
	if _, _, err := e.build(t, Request{Name: template.HostName, Airfile: []byte("FROM template:base\n")}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("building over the host template: %v", err)
	}
}

func TestBuildCache(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	nonce := fmt.Sprint(time.Now().UnixNano())
	af := "FROM template:base\nRUN echo " + nonce + " > /opt/one\nENV X=1\nRUN echo two > /opt/two\n"
	req := Request{Name: "cache-test", Airfile: []byte(af)}

	first, events := e.mustBuild(t, req)
	if got, want := eventTypes(events), []string{"1:cached", "2:step", "3:step", "4:step", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("first build: events %v, want %v", got, want)
	}

	creates := e.rt.creates.Load()
	start := time.Now()
	second, events := e.mustBuild(t, req)
	t.Logf("fully cached rebuild took %s", time.Since(start).Round(time.Millisecond))
	if got, want := eventTypes(events), []string{"1:cached", "2:cached", "3:cached", "4:cached", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("second build: events %v, want %v", got, want)
	}
	for _, ev := range events {
		if ev.Type != EventCached && ev.Type != EventDone {
			t.Errorf("second build emitted %+v", ev)
		}
	}
	if n := e.rt.creates.Load() - creates; n != 0 {
		t.Errorf("second build created %d sandboxes, want 0", n)
	}
	if !slices.Equal(first.Layers, second.Layers) {
		t.Errorf("second build's layers %v differ from %v", second.Layers, first.Layers)
	}

	// Changing the last RUN reruns it alone.
	changed := strings.Replace(af, "echo two", "echo three", 1)
	creates = e.rt.creates.Load()
	third, events := e.mustBuild(t, Request{Name: "cache-test", Airfile: []byte(changed)})
	if got, want := eventTypes(events), []string{"1:cached", "2:cached", "3:cached", "4:step", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("changed build: events %v, want %v", got, want)
	}
	if n := e.rt.creates.Load() - creates; n != 1 {
		t.Errorf("changed build created %d sandboxes, want 1", n)
	}
	n := len(third.Layers)
	if n != len(first.Layers) || !slices.Equal(third.Layers[:n-1], first.Layers[:n-1]) || third.Layers[n-1] == first.Layers[n-1] {
		t.Errorf("changed build: layers %v, want %v with a new last one", third.Layers, first.Layers)
	}
	sb := e.sandbox(t, "cache-test")
	if out := sh(t, sb, "", "cat /opt/one /opt/two"); out != nonce+"\nthree\n" {
		t.Errorf("rebuilt template has %q", out)
	}

	// Replacing the template freed the old last layer; going back to the
	// first Airfile finds its cache entry stale and rebuilds that step.
	if _, err := e.store.Layer(first.Layers[n-1]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("replaced layer still stored: %v", err)
	}
	fourth, events := e.mustBuild(t, req)
	if got, want := eventTypes(events), []string{"1:cached", "2:cached", "3:cached", "4:step", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("build after the layer was freed: events %v, want %v", got, want)
	}
	if !slices.Equal(fourth.Layers[:n-1], first.Layers[:n-1]) {
		t.Errorf("layers %v, want %v below the last", fourth.Layers, first.Layers)
	}

	// NoCache runs every step again.
	creates = e.rt.creates.Load()
	_, events = e.mustBuild(t, Request{Name: "cache-test", Airfile: []byte(af), NoCache: true})
	if got, want := eventTypes(events), []string{"1:cached", "2:step", "3:step", "4:step", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("NoCache build: events %v, want %v", got, want)
	}
	if n := e.rt.creates.Load() - creates; n != 2 {
		t.Errorf("NoCache build created %d sandboxes, want 2", n)
	}
	e.noBuildSandboxes(t)
}

func TestBuildDebianBaseCached(t *testing.T) {
	e := withBase(t)
	// The base was built by withBase: a second template from the same
	// DEBIAN line reuses its layer without running mmdebstrap.
	start := time.Now()
	m, events := e.mustBuild(t, Request{Name: "base-again", Airfile: []byte(baseAirfile)})
	if got, want := eventTypes(events), []string{"1:cached", "1:done"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cached Debian base took %s", d)
	}
	base, _ := e.store.Get(baseName)
	if !slices.Equal(m.Layers, base.Layers) {
		t.Errorf("layers %v, want the base's %v", m.Layers, base.Layers)
	}
	if _, err := e.store.Remove(context.Background(), "base-again"); err != nil {
		t.Fatal(err)
	}
}

// Concurrent builds of one name run one after the other and both
// succeed; the template ends up as one of them.
func TestBuildSameNameSerialized(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			af := fmt.Sprintf("FROM template:base\nRUN echo %d-%d > /opt/which\n", i, time.Now().UnixNano())
			_, _, err := e.build(t, Request{Name: "serial-test", Airfile: []byte(af)})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if _, err := e.store.Get("serial-test"); err != nil {
		t.Error(err)
	}
	e.noBuildSandboxes(t)
}

// layerHas reports whether one of m's layers holds rel.
func layerHas(t *testing.T, s *layers.Store, m layers.Manifest, rel string) bool {
	t.Helper()
	for _, d := range m.Layers {
		dir, err := s.LayerDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, rel)); err == nil {
			return true
		}
	}
	return false
}

// Builds of different names run side by side (COPY and WORKDIR only: no
// sandbox, so this also runs under -race).
func TestBuildConcurrentCopies(t *testing.T) {
	e := withBase(t)
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 4
	type result struct {
		i   int
		m   layers.Manifest
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			af := fmt.Sprintf("FROM template:base\nWORKDIR /srv/w%d\nENV N=%d\nCOPY f ./f%d\n", i, i, i)
			m, _, err := e.build(t, Request{Name: fmt.Sprintf("conc-%d", i), Airfile: []byte(af), ContextDir: ctxDir})
			results <- result{i, m, err}
		}()
	}
	for range n {
		r := <-results
		if r.err != nil {
			t.Error(r.err)
		} else if !layerHas(t, e.store, r.m, fmt.Sprintf("srv/w%d/f%d", r.i, r.i)) {
			t.Errorf("conc-%d: the copied file is not in its layers", r.i)
		}
	}
	for i := range n {
		if _, err := e.reg.Get(fmt.Sprintf("conc-%d", i)); err != nil {
			t.Error(err)
		}
	}
}

// TestBuildOwners: a tenant's build is stored under its store name, sees
// its own and the shared templates as bases but never another tenant's,
// and never reuses a step another namespace's build cached (a RUN that
// made a secret would hand it over).
func TestBuildOwners(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	nonce := fmt.Sprint(time.Now().UnixNano())
	af := "FROM template:base\nRUN head -c 16 /dev/urandom | od -An -tx1 > /opt/secret-" + nonce + "\n"

	a, events := e.mustBuild(t, Request{Name: "owned", Owner: "tenant-a", Airfile: []byte(af)})
	if got, want := eventTypes(events), []string{"1:cached", "2:step", "2:done"}; !slices.Equal(got, want) {
		t.Errorf("tenant A's build: events %v, want %v", got, want)
	}
	if a.Name != "tenant-a~owned" {
		t.Errorf("stored as %q, want tenant-a~owned", a.Name)
	}
	if _, err := e.reg.Get("tenant-a~owned"); err != nil {
		t.Errorf("not registered under its store name: %v", err)
	}
	if _, err := e.reg.Get("owned"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a tenant's build is registered as a shared template: %v", err)
	}

	// The same recipe in tenant B, and as a shared template: each runs
	// its step and gets a layer of its own.
	for _, owner := range []string{"tenant-b", ""} {
		m, events := e.mustBuild(t, Request{Name: "owned", Owner: owner, Airfile: []byte(af)})
		if got, want := eventTypes(events), []string{"1:cached", "2:step", "2:done"}; !slices.Equal(got, want) {
			t.Errorf("owner %q: events %v, want the RUN step run again", owner, got)
		}
		if last := m.Layers[len(m.Layers)-1]; last == a.Layers[len(a.Layers)-1] {
			t.Errorf("owner %q got tenant A's RUN layer", owner)
		}
	}
	// Tenant A's own cache still serves tenant A.
	_, events = e.mustBuild(t, Request{Name: "owned", Owner: "tenant-a", Airfile: []byte(af)})
	if got, want := eventTypes(events), []string{"1:cached", "2:cached", "2:done"}; !slices.Equal(got, want) {
		t.Errorf("tenant A's rebuild: events %v, want %v", got, want)
	}

	// FROM template: resolves in the build's namespace, then the shared one.
	_, err := e.b.Build(context.Background(), Request{Name: "child", Owner: "tenant-c",
		Airfile: []byte("FROM template:owned\nENV X=1\n")}, nil)
	if err != nil {
		t.Fatalf("tenant C from the shared template: %v", err)
	}
	if _, err := e.b.Build(context.Background(), Request{Name: "child", Owner: "tenant-c",
		Airfile: []byte("FROM template:child-of-nobody\nENV X=1\n")}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing base: %v", err)
	}
	if err := e.reg.Remove("owned"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Remove(context.Background(), "owned"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Build(context.Background(), Request{Name: "child2", Owner: "tenant-c",
		Airfile: []byte("FROM template:owned\nENV X=1\n")}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("tenant C from tenant A's template: %v, want not found", err)
	}
	if _, err := e.b.Build(context.Background(), Request{Name: "x", Owner: "bad owner", Airfile: []byte(af)}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("malformed owner: %v", err)
	}
	e.noBuildSandboxes(t)
}
