package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory (root only).
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	testutil.RequireRoot(t, "mounting a tmpfs needs root")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0711", size)); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fill writes to path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			return
		}
	}
}

// TestReadinessFullDisk: a full data dir makes the daemon not ready, and
// space freed makes it ready again; after a failed audit commit a probe
// write decides, at most once per probeInterval (issue 13, finding 6).
func TestReadinessFullDisk(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	var mu sync.Mutex
	var writeErr error
	now := time.Unix(1000, 0)
	r := &readiness{
		dataDir: dir,
		head:    func(context.Context) (store.AuditHead, error) { return store.AuditHead{}, nil },
		writeErr: func() error {
			mu.Lock()
			defer mu.Unlock()
			return writeErr
		},
		now: func() time.Time { return now },
	}
	ctx := context.Background()
	if err := r.check(ctx); err != nil {
		t.Fatalf("empty data dir: %v", err)
	}
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	if err := r.check(ctx); err == nil || !strings.Contains(err.Error(), "bytes available") {
		t.Errorf("full data dir: %v, want not ready", err)
	}
	// The store failed a write; the disk is full: the probe fails.
	mu.Lock()
	writeErr = errors.New("database or disk is full")
	mu.Unlock()
	if err := os.Truncate(filler, 2<<20); err != nil { // leaves 2 MiB
		t.Fatal(err)
	}
	probe := filepath.Join(dir, probeFile)
	if err := os.Mkdir(probe, 0o700); err != nil { // the probe write fails
		t.Fatal(err)
	}
	if err := r.check(ctx); err == nil || !strings.Contains(err.Error(), "last write failed") {
		t.Errorf("after a failed commit with a failing probe: %v, want not ready", err)
	}
	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	// Within probeInterval the last probe's answer stands: no write.
	if err := r.check(ctx); err == nil {
		t.Error("a second check within probeInterval probed again")
	}
	now = now.Add(probeInterval)
	if err := r.check(ctx); err != nil {
		t.Errorf("after space came back: %v, want ready", err)
	}
	if _, err := os.Stat(probe); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the probe file is left: %v", err)
	}
	// The store fails reads: not ready.
	r.head = func(context.Context) (store.AuditHead, error) { return store.AuditHead{}, errors.New("db gone") }
	if err := r.check(ctx); err == nil {
		t.Error("a store that fails reads is ready")
	}
}

// lineCounter is a log writer that counts lines and keeps the text.
type lineCounter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lineCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lineCounter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimRight(w.buf.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestDedupHandler: identical warnings in a row are logged once, then once
// more with their count when the window ends; other lines pass.
func TestDedupHandler(t *testing.T) {
	w := &lineCounter{}
	h, flush := newDedupHandler(slog.NewTextHandler(w, nil), 200*time.Millisecond)
	log := slog.New(h).With("component", "api")
	diskFull := errors.New("database or disk is full")
	for i := range 1000 {
		log.Error("request failed", "path", fmt.Sprintf("/v1/x/%d", i), "status", 503, "err", diskFull)
		log.Warn("audit commit failed", "first_seq", i, "err", diskFull)
	}
	log.Error("request failed", "err", errors.New("something else"))
	log.Info("serving")
	log.Info("serving")
	if got := w.lines(); len(got) != 5 {
		t.Fatalf("during the burst: %d lines, want 5 (two first lines, another error, two infos):\n%s", len(got), strings.Join(got, "\n"))
	}
	time.Sleep(400 * time.Millisecond)
	got := w.lines()
	if len(got) != 7 {
		t.Fatalf("after the window: %d lines, want 7:\n%s", len(got), strings.Join(got, "\n"))
	}
	var counts int
	for _, l := range got[5:] {
		if strings.Contains(l, "repeated=999") {
			counts++
		}
	}
	if counts != 2 {
		t.Errorf("the window's end logged %v, want both lines with repeated=999", got[5:])
	}
	// A new window starts with the next line.
	log.Error("request failed", "err", diskFull)
	log.Error("request failed", "err", diskFull)
	if n := len(w.lines()); n != 8 {
		t.Errorf("after the window: %d lines, want 8", n)
	}
	flush()
	got = w.lines()
	if len(got) != 9 || !strings.Contains(got[8], "repeated=1") {
		t.Errorf("flush: %v, want the count of the suppressed line", got[7:])
	}
	log.Error("request failed", "err", diskFull)
	log.Error("request failed", "err", diskFull)
	if n := len(w.lines()); n != 11 {
		t.Errorf("after flush lines pass through: %d lines, want 11", n)
	}
}

// TestCheckpointExportBacksOff: an export that keeps failing is retried,
// and logged, less and less often (issue 13, finding 6: the warning
// repeated every 0.5 s), and the interval comes back once it works.
func TestCheckpointExportBacksOff(t *testing.T) {
	w := &lineCounter{}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seq := uint64(0)
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.jsonl")
	if err := os.Mkdir(path, 0o700); err != nil { // appending to it fails
		t.Fatal(err)
	}
	x := &checkpointExporter{
		head: func() store.AuditHead {
			mu.Lock()
			defer mu.Unlock()
			seq++ // the head moves at every export
			return store.AuditHead{Seq: seq, Hash: strings.Repeat("a", 64)}
		},
		signer: audit.NewSigner(key, time.Now),
		path:   path,
		log:    slog.New(slog.NewTextHandler(w, nil)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.run(ctx, 5*time.Millisecond)
	}()
	time.Sleep(500 * time.Millisecond)
	failures := len(w.lines())
	// 5, 10, 20, 40, 80, 160 ms, ...: 6 or 7 tries in 500 ms (100 without
	// the back-off).
	if failures < 2 || failures > 8 {
		t.Errorf("%d failed exports logged in 500 ms, want 2 to 8:\n%s", failures, strings.Join(w.lines(), "\n"))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(strings.Join(w.lines(), "\n"), "works again") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if !strings.Contains(strings.Join(w.lines(), "\n"), "works again") {
		t.Fatal("the export did not recover")
	}
	if cps := readExport(t, path); len(cps) < 5 {
		t.Errorf("%d checkpoints in 100 ms after recovery, want the 5 ms interval back", len(cps))
	}
}
