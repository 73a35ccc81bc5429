//go:build linux

package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

func TestPty(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	res, stdout, stderr := h.exec(t, agentclient.ExecRequest{
		Shell: "tty; stty size; echo $TERM; echo err >&2", Pty: &agentclient.PtySize{Cols: 100, Rows: 40},
	})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("tty: %+v", res)
	}
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(stdout, "\r", "")), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "/dev/pts/") || lines[1] != "40 100" ||
		lines[2] != "xterm-256color" || lines[3] != "err" {
		t.Errorf("terminal output %q, want tty, size 40 100, TERM and stderr on the terminal", stdout)
	}
	if stderr != "" {
		t.Errorf("stderr %q, want nothing: a terminal has one output", stderr)
	}
}

func TestPtyInteractive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	var out syncBuffer
	p, err := h.c.Start(ctx, agentclient.ExecRequest{
		Shell: `stty size; read x; stty size; echo "read $x"; cat`,
		Pty:   &agentclient.PtySize{}, Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "24 80") // the default size
	if err := h.c.Resize(ctx, p.PID, agentclient.PtySize{Cols: 132, Rows: 50}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.SendInput(ctx, p.PID, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "50 132")
	out.waitFor(t, "read hello")
	// ^D ends cat.
	if err := h.c.CloseStdin(ctx, p.PID); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := p.Wait()
		if err != nil || res.Status != agentclient.StatusSuccess {
			t.Errorf("after ^D: %+v %v", res, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("cat did not end after CloseStdin on the terminal")
	}
	if err := h.c.Resize(ctx, p.PID, agentclient.PtySize{}); err == nil {
		t.Error("resize to 0x0 succeeded")
	}
}
