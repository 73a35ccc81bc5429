package linux

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// accountsLayer returns the host rootfs with a layer on top that holds an
// image's account files: app (1234) and groups app (1234) and staff (50),
// which lists app as a member.
func accountsLayer(t *testing.T) runtime.Rootfs {
	t.Helper()
	setupBase(t)
	layer := filepath.Join(baseDir(t), "accounts-layer")
	if err := os.MkdirAll(filepath.Join(layer, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\n# a comment\nbroken line\napp:x:1234:1234:App:/home/app:/bin/sh\n",
		"group":  "root:x:0:\napp:x:1234:\nstaff:x:50:app\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(layer, "etc", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rootfs := hostRootfsFor(t)
	rootfs.Layers = append(append([]string{}, rootfs.Layers...), layer)
	return rootfs
}

// TestTemplateDefaults checks that a template's USER and WORKDIR apply to
// processes that name neither: the user is looked up in the template's
// /etc/passwd and /etc/group, a missing working directory is made.
func TestTemplateDefaults(t *testing.T) {
	rootfs := accountsLayer(t)
	rt := newRuntime(t)
	ctx := context.Background()
	// id -G: the primary group, then the supplementary ones.
	probe := `echo "$(id -u):$(id -G | tr ' ' ,) $(pwd) $HOME $USER"`
	tests := []struct {
		user, workdir string
		want          string
	}{
		{"", "", "1000:1000 /home/user /home/user user\n"},
		{"app", "/srv/work", "1234:1234,50 /srv/work /home/app app\n"}, // a member of staff
		// An explicit group drops the supplementary ones, as in Docker;
		// home /home/app is not in the image.
		{"app:staff", "", "1234:50 / /home/app app\n"},
		{"1500", "/tmp", "1500:0 /tmp / 1500\n"},
		{"1500:50", "", "1500:50 / / 1500\n"},
		{"root", "/srv/root-work", "0:0 /srv/root-work /root root\n"},
		// Sandbox root has no capabilities: a WORKDIR it cannot enter
		// (/home/user is 0750) falls back to its home, as a missing
		// one does; the working directory resolves as the user.
		{"root", "/home/user", "0:0 /root /root root\n"},
		{"user", "/", "1000:1000 / /home/user user\n"},
		{"1000:staff", "", "1000:50 /home/user /home/user user\n"},
	}
	for _, tc := range tests {
		rfs := rootfs
		rfs.User, rfs.Workdir = tc.user, tc.workdir
		sb := runtimetest.Create(t, ctx, rt, rfs, runtime.Spec{})
		res, out, errOut := sb.Run(t, ctx, agentclient.ExecRequest{Shell: probe, Timeout: 10 * time.Second})
		if res.Status != agentclient.StatusSuccess || out != tc.want {
			t.Errorf("user %q workdir %q: got %q (%s %q), want %q", tc.user, tc.workdir, out, res.Status, errOut, tc.want)
		}
		// A request that names a user still gets that user.
		if _, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "id -u", User: "user", Timeout: 10 * time.Second}); out != "1000\n" {
			t.Errorf("user %q: explicit user ran as %q", tc.user, out)
		}
		if tc.workdir == "/srv/work" {
			if _, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "stat -c '%u %a' /srv/work", Timeout: 10 * time.Second}); out != "0 755\n" {
				t.Errorf("made working directory: %q, want root-owned 755", out)
			}
		}
	}
}

// TestTemplateDefaultsRejected checks that a template whose USER is not
// in its /etc/passwd, or whose WORKDIR is a file, fails to start with an
// error that says why.
func TestTemplateDefaultsRejected(t *testing.T) {
	rootfs := accountsLayer(t)
	rt := newRuntime(t)
	ctx := context.Background()
	for _, tc := range []struct{ user, workdir, want string }{
		{"ghost", "", `user "ghost" is not in the image's /etc/passwd`},
		{"app:ghosts", "", `group "ghosts" is not in the image's /etc/group`},
		{"70000", "", "uid must be between 0 and 65535"},
		{"", "/etc/passwd", "working directory"},
	} {
		rfs := rootfs
		rfs.User, rfs.Workdir = tc.user, tc.workdir
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("bad"), Rootfs: rfs})
		if err == nil {
			_ = inst.Destroy(ctx)
			t.Errorf("user %q workdir %q: created", tc.user, tc.workdir)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("user %q workdir %q: %v, want it to say %q", tc.user, tc.workdir, err, tc.want)
		}
	}
	// Bad values never reach a sandbox.
	for _, rfs := range []runtime.Rootfs{{User: "a b"}, {User: strings.Repeat("u", 300)}, {Workdir: "rel"}, {Workdir: "/a/../b"}} {
		rfs.Layers = rootfs.Layers
		if _, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("bad"), Rootfs: rfs}); err == nil || !strings.Contains(err.Error(), "rootfs:") {
			t.Errorf("%+v: %v, want a validation error", rfs, err)
		}
	}
}

// TestBuildSandbox checks what a build sandbox's root may do: make
// top-level directories and chown to any id with exactly the build
// capabilities, while the sandbox user gets none, a plain sandbox's root
// gets none, and no capability reaches a host file bound into the
// sandbox (it belongs to an id the sandbox does not map).
func TestBuildSandbox(t *testing.T) {
	setupBase(t)
	rt := newRuntime(t)
	ctx := context.Background()
	hostDir := filepath.Join(baseDir(t), "host-secret")
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "secret"), []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootfs := hostRootfsFor(t)
	rootfs.Binds = append(append([]runtime.Bind{}, rootfs.Binds...), runtime.Bind{Source: hostDir, Target: "/mnt/host"})

	run := func(sb *runtimetest.Sandbox, user, cmd string) (string, string, int) {
		t.Helper()
		res, out, errOut := sb.Run(t, ctx, agentclient.ExecRequest{Shell: cmd, User: user, Timeout: 10 * time.Second})
		return out, errOut, res.ExitCode
	}
	capEff := "grep CapEff /proc/self/status | cut -f2"

	build := runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{Build: true})
	if out, _, _ := run(build, "root", capEff); strings.TrimSpace(out) != "00000000000004fb" {
		t.Errorf("build root's effective capabilities = %q, want 4fb (chown, dac_override, fowner, fsetid, kill, setgid, setuid, net_bind_service)", out)
	}
	if out, errOut, code := run(build, "root", "mkdir -p /newtop/sub && chown 1234:50 /newtop/sub && stat -c '%u:%g' /newtop/sub"); code != 0 || out != "1234:50\n" {
		t.Errorf("build root making a top-level directory and chowning it: %q %q", out, errOut)
	}
	if out, _, _ := run(build, "user", capEff); strings.TrimSpace(out) != "0000000000000000" {
		t.Errorf("build sandbox user's effective capabilities = %q, want none", out)
	}
	// The attack: DAC_OVERRIDE on a host file bound into the sandbox.
	if out, errOut, code := run(build, "root", "cat /mnt/host/secret"); code == 0 || strings.Contains(out, "secret") {
		t.Errorf("build root read a host root's 0600 file: %q %q", out, errOut)
	}
	if _, _, code := run(build, "root", "chown 0:0 /mnt/host/secret"); code == 0 {
		t.Error("build root chowned a host file")
	}

	plain := runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{})
	if out, _, _ := run(plain, "root", capEff); strings.TrimSpace(out) != "0000000000000000" {
		t.Errorf("plain sandbox root's effective capabilities = %q, want none", out)
	}
	if _, errOut, code := run(plain, "root", "mkdir /newtop"); code == 0 || !strings.Contains(errOut, "Permission denied") {
		t.Errorf("plain sandbox root made a top-level directory: %q", errOut)
	}
	if _, errOut, code := run(plain, "root", "touch /tmp/f && chown 1234 /tmp/f"); code == 0 || !strings.Contains(errOut, "not permitted") {
		t.Errorf("plain sandbox root chowned: %q", errOut)
	}
}

// TestSandboxUmask checks that a daemon with umask 077 still makes
// sandboxes its unprivileged agents can enter, and that sandboxed
// processes start with umask 022 whatever the daemon's is.
func TestSandboxUmask(t *testing.T) {
	rootfs := hostRootfsFor(t)
	ctx := context.Background()
	old := syscall.Umask(0o077)
	rt := newRuntime(t)
	sb := runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{})
	syscall.Umask(old)
	if _, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "umask", Timeout: 10 * time.Second}); out != "0022\n" {
		t.Errorf("umask in the sandbox = %q, want 0022", out)
	}
}
