package audit

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestObserve: Options.Observe is told of every append, with its error,
// whether it committed inline or through the writer; QueueDepth is 0 once
// the appends have returned.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var ok, failed int
	st := openStore(t, filepath.Join(t.TempDir(), "airlock.db"))
	l := newLog(t, st, Options{Observe: func(took time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if took < 0 {
			t.Errorf("negative duration %v", took)
		}
		if err != nil {
			failed++
		} else {
			ok++
		}
	}})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := l.Append(ctx, ev(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	bad := ev(99)
	bad.Action = "Not An Action"
	if err := l.Append(ctx, bad); err == nil {
		t.Fatal("a malformed action was appended")
	}
	mu.Lock()
	defer mu.Unlock()
	if ok != 20 || failed != 1 {
		t.Errorf("observed %d ok and %d failed appends, want 20 and 1", ok, failed)
	}
	if n := l.QueueDepth(); n != 0 {
		t.Errorf("queue depth %d after every append returned", n)
	}
}
