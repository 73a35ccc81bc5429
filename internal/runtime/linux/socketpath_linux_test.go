package linux

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestControlSocketPathTooLong checks that a control socket whose path
// a unix socket address cannot hold (a long data directory) fails with
// an error that says so, not the kernel's "bind: invalid argument", and
// that one that just fits is made.
func TestControlSocketPathTooLong(t *testing.T) {
	dir := t.TempDir()
	fits := filepath.Join(dir, strings.Repeat("a", maxSocketPath-len(dir)-1))
	ln, err := listenControl(fits)
	if err != nil {
		t.Fatalf("a %d-byte socket path: %v", len(fits), err)
	}
	ln.Close()
	os.Remove(fits)
	long := fits + "b"
	_, err = listenControl(long)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "shorter data directory") {
		t.Errorf("a %d-byte socket path: %v, want failed precondition naming the data directory", len(long), err)
	}
}
