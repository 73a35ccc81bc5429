package api

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// TestExecStartAndStdin: a streamed exec's first line is its pid; a
// process started with keep_stdin reads what POST .../stdin sends, and
// ends when it closes its stdin; a background process outlives the
// stream that started it; the buffered exec refuses both options.
func TestExecStartAndStdin(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	var mu sync.Mutex
	var out strings.Builder
	pidc := make(chan int, 1)
	done := make(chan error, 1)
	var res *client.ExecResult
	go func() {
		var err error
		res, err = c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat"}, KeepStdin: true,
			OnStart: func(pid int) { pidc <- pid }}, func(s client.Stream, b []byte) error {
			mu.Lock()
			out.Write(b)
			mu.Unlock()
			return nil
		})
		done <- err
	}()
	pid := <-pidc
	if pid <= 0 {
		t.Fatalf("start pid %d", pid)
	}
	e.audit.take()
	if err := c.SendProcessInput(ctx, sb.ID, pid, []byte("first "), false); err != nil {
		t.Fatal(err)
	}
	if err := c.SendProcessInput(ctx, sb.ID, pid, []byte("second"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.SendProcessInput(ctx, sb.ID, pid, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || res.ExitCode != 0 || out.String() != "first second" {
		t.Fatalf("cat: %v, %+v, output %q", err, res, out.String())
	}
	var recs int
	for _, ev := range e.audit.take() {
		if ev.Action == ActionProcessStdin && ev.Outcome == audit.OutcomeOK {
			recs++
			if ev.Details["stdin_sha256"] == nil || strings.Contains(strings.ToLower(stringify(ev.Details)), "second\"") {
				t.Errorf("stdin record: %+v", ev.Details)
			}
		}
	}
	if recs != 3 {
		t.Errorf("%d process.stdin records, want 3", recs)
	}
	// The process has ended: its stdin is gone.
	if err := c.SendProcessInput(ctx, sb.ID, pid, []byte("x"), false); err == nil {
		t.Error("input to an ended process was accepted")
	}

	// A background process outlives its stream.
	sctx, cancel := context.WithCancel(ctx)
	bg := make(chan int, 1)
	go func() {
		_, _ = c.ExecStream(sctx, sb.ID, client.ExecRequest{Command: "sleep 30", Background: true, Tag: "bg",
			OnStart: func(pid int) { bg <- pid }}, nil)
	}()
	bpid := <-bg
	cancel()
	time.Sleep(200 * time.Millisecond)
	list, err := c.ListProcesses(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Processes {
		if p.PID == bpid && p.Tag == "bg" && p.Background {
			found = true
		}
	}
	if !found {
		t.Errorf("the background process %d is gone after its stream ended: %+v", bpid, list.Processes)
	}
	if err := c.SignalProcess(ctx, sb.ID, bpid, "KILL"); err != nil {
		t.Fatal(err)
	}

	for _, req := range []client.ExecRequest{{Command: "true", Background: true}, {Command: "true", KeepStdin: true}} {
		if _, err := c.Exec(ctx, sb.ID, req); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("buffered exec %+v: %v", req, err)
		}
	}
	if _, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "cat", KeepStdin: true, Stdin: []byte("x")}, nil); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("stdin with keep_stdin: %v", err)
	}
}

func stringify(m map[string]any) string {
	var b strings.Builder
	for k, v := range m {
		b.WriteString(k)
		b.WriteString("=")
		if s, ok := v.(string); ok {
			b.WriteString(s)
		}
		b.WriteString(";")
	}
	return b.String()
}

// TestExecPty: a streamed exec on a terminal gets its size, reads what
// POST .../stdin types and sees POST .../resize; the buffered exec and a
// size out of range are refused.
func TestExecPty(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	var mu sync.Mutex
	var out strings.Builder
	seen := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(out.String(), s)
	}
	pidc := make(chan int, 1)
	done := make(chan error, 1)
	var res *client.ExecResult
	go func() {
		var err error
		res, err = c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh"}, Pty: &client.PtySize{Cols: 81, Rows: 23},
			OnStart: func(pid int) { pidc <- pid }}, func(s client.Stream, b []byte) error {
			mu.Lock()
			out.Write(b)
			mu.Unlock()
			return nil
		})
		done <- err
	}()
	pid := <-pidc
	wait := func(s string) {
		t.Helper()
		for i := 0; !seen(s); i++ {
			if i > 100 {
				t.Fatalf("no %q in the terminal's output %q", s, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := c.SendProcessInput(ctx, sb.ID, pid, []byte("stty size\n"), false); err != nil {
		t.Fatal(err)
	}
	wait("23 81")
	if err := c.ResizeProcess(ctx, sb.ID, pid, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := c.SendProcessInput(ctx, sb.ID, pid, []byte("stty size; exit 3\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || res.ExitCode != 3 || !seen("40 120") {
		t.Fatalf("pty exec: %v %+v, output %q", err, res, out.String())
	}
	if err := c.ResizeProcess(ctx, sb.ID, pid, 0, 10); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a size of 0: %v", err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "true", Pty: &client.PtySize{Cols: 80, Rows: 24}}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("buffered exec with pty: %v", err)
	}
}
