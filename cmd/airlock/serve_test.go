package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesCgoBuild: a binary built with cgo cannot confine a
// sandbox's agent, so `serve` refuses at once, in one line, and touches
// nothing (no data directory).
func TestServeRefusesCgoBuild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("serve runs on Linux")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler: a cgo binary cannot be built here")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "airlock-cgo")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build (cgo): %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	cmd := exec.CommandContext(ctx, bin, "serve", "--data-dir", data, "--listen", "127.0.0.1:0")
	// serve refuses AIRLOCK_* variables it does not know (the test
	// script sets some of its own).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("serve exited %d (%v), want 1\n%s", code, err, stderr.String())
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "built with cgo") || !strings.Contains(msg, "CGO_ENABLED=0") {
		t.Errorf("stderr = %q, want one line naming cgo and CGO_ENABLED=0", msg)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was made (%v)", err)
	}
}
