package audit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// crashChildEnv, when set to a database path, turns the test binary into
// the child of TestCrashSafety: it appends from several goroutines until
// killed and prints "seq target" after each Append returns.
const crashChildEnv = "AIRLOCK_AUDIT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path))
	}
	os.Exit(m.Run())
}

func crashChild(path string) int {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	l, err := New(ctx, st, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "new:", err)
		return 2
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second) // never outlive a lost parent
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				target := fmt.Sprintf("g%d-%d", g, i)
				rec, err := l.AppendRecord(ctx, Event{Action: "sandbox.exec", Outcome: "ok", Target: target,
					Details: map[string]any{"i": i, "pad": strings.Repeat("x", 200)}})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				mu.Lock()
				// Unbuffered: the line is in the pipe before the next append.
				fmt.Fprintf(os.Stdout, "%d %s\n", rec.Seq, target)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}

// TestCrashSafety kills a process in the middle of a burst of appends
// and checks that every append it acknowledged survived and that the chain
// still verifies.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[uint64]string{}
	for round := range 3 { // the second and third rounds continue the chain
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		killAt := 1500 + 700*round
		n := 0
		killed := false
		for sc.Scan() {
			seqStr, target, ok := strings.Cut(sc.Text(), " ")
			seq, err := strconv.ParseUint(seqStr, 10, 64)
			if !ok || err != nil {
				t.Fatalf("child printed %q", sc.Text())
			}
			if prev, dup := acked[seq]; dup {
				t.Fatalf("seq %d acknowledged twice (%s, %s)", seq, prev, target)
			}
			acked[seq] = target
			n++
			if n == killAt && !killed {
				// Mid-burst: the writer has batches in flight.
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("child exited after %d appends: %v; stderr: %s", n, err, stderr.String())
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child was not killed by SIGKILL: %v; stderr: %s", err, stderr.String())
		}

		ctx := context.Background()
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
		if err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		rep, err := Verify(ctx, st)
		if err != nil || !rep.OK {
			t.Fatalf("round %d: verify after kill: %+v, %v", round, rep, err)
		}
		stored := map[uint64]string{}
		var after uint64
		for {
			page, err := st.ListAudit(ctx, Query{AfterSeq: after, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, r := range page {
				stored[r.Seq] = r.Target
			}
			after = page[len(page)-1].Seq
		}
		for seq, target := range acked {
			if stored[seq] != target {
				t.Fatalf("round %d: acknowledged seq %d (%s) is %q after the kill", round, seq, target, stored[seq])
			}
		}
		t.Logf("round %d: %d acknowledged in total, %d stored, head %d", round, len(acked), len(stored), rep.Head.Seq)
		st.Close()
	}
}
