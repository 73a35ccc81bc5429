package e2e

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestFilesActAsUser drives the file API of a real daemon and checks what
// the agent does inside a real sandbox: a request acts with its user's
// permissions, the sandbox's user by default, root only when asked. The
// default user cannot overwrite /etc/passwd or read /root (403
// permission_denied with the kernel's words), root can; what a request
// creates belongs to its user, as `stat -c %u` inside the sandbox shows.
func TestFilesActAsUser(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	sh := func(user, cmd string) string {
		t.Helper()
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: cmd, User: user})
		if err != nil || res.Status != client.StatusSuccess {
			t.Fatalf("exec %q as %q: %+v, %v", cmd, user, res, err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	denied := func(what string, err error) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != "permission_denied" || !strings.Contains(ae.Message, "permission denied") {
			t.Errorf("%s: %v; want 403 permission_denied saying permission denied", what, err)
		}
	}
	read := func(p string, opts ...client.FileOption) (string, error) {
		rc, err := d.C.ReadFile(ctx, sb.ID, p, opts...)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	root := client.AsUser("root")
	userUID := sh("", "id -u")
	if userUID == "0" {
		t.Fatalf("the default user is root")
	}
	passwd := sh("", "cat /etc/passwd")
	sh("root", "mkdir -p /root && chmod 700 /root && echo root-only > /root/secret && chmod 600 /root/secret")

	// The default user: refused, in the system's words, and nothing changes.
	_, err = d.C.WriteFile(ctx, sb.ID, "/etc/passwd", strings.NewReader("pwned\n"))
	denied("write /etc/passwd", err)
	_, err = read("/root/secret")
	denied("read /root/secret", err)
	_, _, err = d.C.ListDir(ctx, sb.ID, "/root", 1)
	denied("list /root", err)
	err = d.C.RemoveFile(ctx, sb.ID, "/etc/passwd", false)
	denied("remove /etc/passwd", err)
	_, err = d.C.MakeDir(ctx, sb.ID, "/etc/e2e-dir")
	denied("mkdir /etc/e2e-dir", err)
	if got := sh("", "cat /etc/passwd"); got != passwd {
		t.Errorf("/etc/passwd changed: %q", got)
	}

	// Root, when asked, can.
	if _, err := d.C.WriteFile(ctx, sb.ID, "/etc/passwd", strings.NewReader(passwd+"\n# e2e\n"), root); err != nil {
		t.Fatalf("write /etc/passwd as root: %v", err)
	}
	if got := sh("", "tail -n 1 /etc/passwd"); got != "# e2e" {
		t.Errorf("root's write of /etc/passwd: last line %q", got)
	}
	if got, err := read("/root/secret", root); err != nil || got != "root-only\n" {
		t.Errorf("read /root/secret as root: %q, %v", got, err)
	}
	if _, err := d.C.WriteFile(ctx, sb.ID, "/etc/e2e-root", strings.NewReader("x"), root); err != nil {
		t.Fatal(err)
	}

	// What a request creates belongs to its user.
	if _, err := d.C.WriteFile(ctx, sb.ID, "up/deep/f.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.MakeDir(ctx, sb.ID, "made"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"/home/user/up": userUID, "/home/user/up/deep": userUID, "/home/user/up/deep/f.txt": userUID,
		"/home/user/made": userUID, "/etc/e2e-root": "0", "/etc/passwd": "0",
	} {
		if got := sh("", "stat -c %u "+p); got != want {
			t.Errorf("%s is owned by uid %s, want %s", p, got, want)
		}
	}
	// The user can change what it made, as a command of its own could.
	if got := sh("", "echo more >> up/deep/f.txt && rm -r made && echo ok"); got != "ok" {
		t.Errorf("the user's command on its files: %q", got)
	}
}
