//go:build linux

package agent

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

func TestStdin(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("hello\nworld\n")})
	if res.Status != agentclient.StatusSuccess || stdout != "hello\nworld\n" {
		t.Errorf("cat: %+v %q", res, stdout)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB, several messages
	_, stdout, _ = h.exec(t, agentclient.ExecRequest{Argv: []string{"wc", "-c"}, Stdin: bytes.NewReader(big)})
	if strings.TrimSpace(stdout) != strconv.Itoa(len(big)) {
		t.Errorf("wc -c = %q, want %d", stdout, len(big))
	}
	// A process that exits without reading its input is not an error.
	res, _, _ = h.exec(t, agentclient.ExecRequest{Argv: []string{"true"}, Stdin: bytes.NewReader(big)})
	if res.Status != agentclient.StatusSuccess {
		t.Errorf("true with unread stdin: %+v", res)
	}
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(o *Options) { o.MaxOutputBytes = 5000 })
	start := time.Now()
	res, stdout, stderr := h.exec(t, agentclient.ExecRequest{
		Shell: "head -c 50000000 /dev/zero; echo err >&2", OutputLimit: 1024,
	})
	if res.Status != agentclient.StatusSuccess || !res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("result %+v, want success with stdout truncated only", res)
	}
	if len(stdout) != 1024 || stderr != "err\n" {
		t.Errorf("got %d stdout bytes and stderr %q, want 1024 and %q", len(stdout), stderr, "err\n")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("50 MB of discarded output took %v", d)
	}
	// Without a request limit the agent's maximum applies.
	res, stdout, _ = h.exec(t, agentclient.ExecRequest{Shell: "head -c 100000 /dev/zero"})
	if len(stdout) != 5000 || !res.StdoutTruncated {
		t.Errorf("got %d bytes (truncated %v), want 5000 and truncated", len(stdout), res.StdoutTruncated)
	}
	// Exactly at the limit is not truncated.
	res, stdout, _ = h.exec(t, agentclient.ExecRequest{Shell: "head -c 1024 /dev/zero", OutputLimit: 1024})
	if len(stdout) != 1024 || res.StdoutTruncated {
		t.Errorf("got %d bytes (truncated %v), want 1024 and not truncated", len(stdout), res.StdoutTruncated)
	}
}

// slowWriter takes its time with every write.
type slowWriter struct {
	n     int
	delay time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	w.n += len(p)
	return len(p), nil
}

func TestSlowReaderLosesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	w := &slowWriter{delay: 2 * time.Millisecond}
	const size = 8 << 20
	res, err := h.c.Exec(context.Background(), agentclient.ExecRequest{
		Shell: fmt.Sprintf("head -c %d /dev/zero", size), Stdout: w,
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.n != size || res.StdoutTruncated {
		t.Errorf("slow reader got %d of %d bytes (truncated %v)", w.n, size, res.StdoutTruncated)
	}
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.a.procs.mu.Lock()
	h.a.procs.keepalive = 50 * time.Millisecond
	h.a.procs.mu.Unlock()
	stream, err := h.raw.Start(context.Background(), connect.NewRequest(&agentv1.StartRequest{
		Config: &agentv1.ProcessConfig{Argv: []string{"sleep", "0.4"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var kinds []string
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent(); {
		case ev.GetStarted() != nil:
			kinds = append(kinds, "started")
		case ev.GetKeepalive() != nil:
			kinds = append(kinds, "keepalive")
		case ev.GetExit() != nil:
			kinds = append(kinds, "exit")
		default:
			kinds = append(kinds, "other")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	n := strings.Count(strings.Join(kinds, " "), "keepalive")
	if kinds[0] != "started" || kinds[len(kinds)-1] != "exit" || n < 3 {
		t.Errorf("events %v, want started, several keepalives, exit", kinds)
	}
}

func TestSelectByTag(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"cat"}, Tag: "svc", OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	tag := &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Tag{Tag: "svc"}}
	conn, err := h.raw.Connect(ctx, connect.NewRequest(&agentv1.ConnectRequest{Process: tag}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !conn.Receive() || conn.Msg().GetEvent().GetStarted().GetPid() != uint32(p.PID) {
		t.Fatalf("connect by tag: first event %v, %v; want started with pid %d", conn.Msg(), conn.Err(), p.PID)
	}
	if _, err := h.raw.SendInput(ctx, connect.NewRequest(&agentv1.SendInputRequest{Process: tag, Data: []byte("via tag\n")})); err != nil {
		t.Fatal(err)
	}
	if !conn.Receive() || string(conn.Msg().GetEvent().GetOutput().GetStdout()) != "via tag\n" {
		t.Errorf("output after input by tag: %v %v", conn.Msg(), conn.Err())
	}
	if _, err := h.raw.CloseStdin(ctx, connect.NewRequest(&agentv1.CloseStdinRequest{Process: tag})); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(); err != nil || res.Status != agentclient.StatusSuccess {
		t.Errorf("cat after CloseStdin: %+v %v", res, err)
	}
	missing := &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Tag{Tag: "nope"}}
	_, err = h.raw.SendSignal(ctx, connect.NewRequest(&agentv1.SendSignalRequest{Process: missing, Signal: 15}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown tag: %v, want not found", err)
	}
	_, err = h.raw.SendSignal(ctx, connect.NewRequest(&agentv1.SendSignalRequest{Signal: 15}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no selector: %v, want invalid argument", err)
	}
	big := make([]byte, maxInputChunk+1)
	_, err = h.raw.SendInput(ctx, connect.NewRequest(&agentv1.SendInputRequest{Process: tag, Data: big}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument && connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("oversized input: %v", err)
	}
}

func TestFloodKeepsMemoryBounded(t *testing.T) {
	// Not parallel: it measures allocations of the whole process.
	h := newHarness(t, nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"yes"}, Timeout: 700 * time.Millisecond, OutputLimit: 4096})
	runtime.ReadMemStats(&after)
	if res.Status != agentclient.StatusTimeout || !res.StdoutTruncated || len(stdout) != 4096 {
		t.Fatalf("yes: %+v with %d bytes", res, len(stdout))
	}
	h.a.procs.mu.Lock()
	produced := h.a.procs.byPID[res.PID].stdout.read.Load()
	h.a.procs.mu.Unlock()
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("yes wrote %d MiB; the agent allocated %d KiB", produced>>20, allocated>>10)
	if produced < 64<<20 {
		t.Skipf("yes wrote only %d bytes; too little to judge", produced)
	}
	if allocated > produced/16 {
		t.Errorf("allocated %d bytes while discarding %d", allocated, produced)
	}
}
