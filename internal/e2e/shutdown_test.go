package e2e

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/client"
)

// TestSIGTERMAudit: a graceful stop (SIGTERM) during PTY
// sessions, execs (buffered and streamed) and a code cell answers each of
// them with why it ended and records its outcome, so that the next
// daemon's audit verify finds no open intent (issue 13, finding 4: PTY
// intents stayed open for ever, and an exec past the grace got no
// response).
func TestSIGTERMAudit(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	type result struct {
		kind string
		err  error
	}
	results := make(chan result, 8)
	kinds := []string{"exec", "exec stream", "pty 1", "pty 2", "code"}
	go func() {
		_, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "sleep 60"})
		results <- result{"exec", err}
	}()
	go func() {
		_, err := d.C.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "sleep 60"}, func(client.Stream, []byte) error { return nil })
		results <- result{"exec stream", err}
	}()
	for _, k := range []string{"pty 1", "pty 2"} {
		go func() {
			p, err := d.C.PTY(ctx, sb.ID, client.PTYOptions{Command: "sleep 60"})
			if err != nil {
				results <- result{k, err}
				return
			}
			defer p.Close()
			go func() { _, _ = io.Copy(io.Discard, p) }()
			_, err = p.Wait(ctx)
			results <- result{k, err}
		}()
	}
	go func() {
		_, err := d.C.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "bash", Code: "sleep 60"})
		results <- result{"code", err}
	}()
	if !waitFor(30*time.Second, func() bool {
		rep, err := d.C.AuditVerify(ctx)
		return err == nil && rep.OpenIntents >= uint64(len(kinds))
	}) {
		t.Fatal("the requests did not all start")
	}
	time.Sleep(time.Second) // from the intents to the agent

	d.Stop()
	for range kinds {
		select {
		case r := <-results:
			var ae *client.APIError
			switch {
			case r.kind == "code" && r.err == nil:
				// The interpreter ends a cell whose request ends with a
				// result (status interrupted).
			case !errors.As(r.err, &ae) || ae.Code != "unavailable" || !strings.Contains(ae.Message, "shutting down"):
				t.Errorf("%s ended with %v; want unavailable, saying the server is shutting down", r.kind, r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a request got no answer from the stopping daemon")
		}
	}

	d = e.start()
	rep, err := d.C.AuditVerify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.OpenIntents != 0 {
		t.Errorf("audit verify after SIGTERM: %+v; want ok, no open intent", rep)
	}
}

// TestFullDataDisk: on a full data disk the daemon says it is not ready,
// refuses mutations without filling its log, words its refusal of an
// audit verification truly, and is ready again once space is freed
// (issue 13, finding 6).
func TestFullDataDisk(t *testing.T) {
	e := newEnv(t)
	// The host check wants 256 MiB free in the data dir at start.
	if err := unix.Mount("tmpfs", e.dir, "tmpfs", 0, "size=300m,mode=0711"); err != nil {
		t.Skipf("mount a tmpfs as the data dir: %v", err)
	}
	// Before the env's cleanup (which removes the directory): stop the
	// daemon, then drop the tmpfs. No sandbox is ever created here.
	t.Cleanup(func() {
		if e.d != nil {
			e.d.Stop()
		}
		if err := unix.Unmount(e.dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the data dir: %v", err)
		}
	})
	d := e.start()
	ready := func() int { return raw(t, d, "GET", "/readyz", "", "").Status }
	if s := ready(); s != http.StatusOK {
		t.Fatalf("readyz = %d on a fresh daemon", s)
	}
	keyBody := `{"name":"k","scopes":["sandboxes:read"]}`
	if r := raw(t, d, "POST", "/v1/keys", d.Key, keyBody); r.Status != http.StatusCreated {
		t.Fatalf("create key = %d %s", r.Status, r.Body)
	}

	filler := filepath.Join(e.dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill the data dir: %v", err)
			}
			break
		}
	}
	f.Close()

	if s := ready(); s != http.StatusServiceUnavailable {
		t.Errorf("readyz = %d on a full data disk, want 503", s)
	}
	warnings := func() int {
		return strings.Count(readLog(e, e.n), "level=WARN") + strings.Count(readLog(e, e.n), "level=ERROR")
	}
	before := warnings()
	const burst = 200
	for i := range burst {
		r := raw(t, d, "POST", "/v1/keys", d.Key, keyBody)
		if r.Status != http.StatusServiceUnavailable {
			t.Fatalf("create key %d on a full disk = %d %s, want 503", i, r.Status, r.Body)
		}
	}
	// Three lines per refused request before: the audit commit, the
	// append, the request. Collapsed, each is logged once per window.
	if n := warnings() - before; n > 10 {
		t.Errorf("%d refused requests logged %d warnings and errors, want at most 10", burst, n)
	}
	if r := raw(t, d, "POST", "/v1/audit/verify", d.Key, ""); r.Status != http.StatusServiceUnavailable ||
		strings.Contains(string(r.Body), "carried out") {
		t.Errorf("audit verify on a full disk = %d %s; want 503 that does not claim an action was carried out", r.Status, r.Body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return ready() == http.StatusOK }) {
		t.Errorf("readyz = %d after space was freed, want 200", ready())
	}
	if r := raw(t, d, "POST", "/v1/keys", d.Key, keyBody); r.Status != http.StatusCreated {
		t.Errorf("create key after space was freed = %d %s", r.Status, r.Body)
	}
	rep, err := d.C.AuditVerify(ctxT(t, time.Minute))
	if err != nil || !rep.OK || rep.OpenIntents != 0 {
		t.Errorf("audit verify after the full disk: %+v, %v", rep, err)
	}
	t.Logf("%d refused requests: %d log warnings and errors", burst, warnings()-before)
}
