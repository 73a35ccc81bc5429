package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFile)
	old := syscall.Umask(0) // a umask does not make the new file wider
	defer syscall.Umask(old)

	k1, created, err := LoadKey(path, "")
	if err != nil || !created {
		t.Fatalf("first load = %v, created %v", err, created)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("new key file mode %04o, want 0600", fi.Mode().Perm())
	}
	text, _ := os.ReadFile(path)
	if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(text))); err != nil || len(raw) != KeySize {
		t.Errorf("key file holds %d bytes of %q, want the base64 of %d bytes", len(raw), err, KeySize)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("data dir holds %d entries after creating the key, want 1 (no temporary file left)", len(entries))
	}

	k2, created, err := LoadKey(path, "")
	if err != nil || created || k2.ID() != k1.ID() {
		t.Errorf("second load = %v, created %v, id %s; want the same key %s", err, created, k2.ID(), k1.ID())
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if k, _, err := LoadKey(path, ""); err != nil || k.ID() != k1.ID() {
		t.Errorf("mode 0400: %v", err)
	}

	// The environment wins and the file is neither read nor created.
	raw := bytes.Repeat([]byte{7}, KeySize)
	envKey, _ := NewKey(bytes.Clone(raw))
	k, created, err := LoadKey(filepath.Join(dir, "absent.key"), base64.StdEncoding.EncodeToString(raw))
	if err != nil || created || k.ID() != envKey.ID() {
		t.Errorf("env key = %v, created %v", err, created)
	}
	if _, err := os.Stat(filepath.Join(dir, "absent.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key file was created although %s was set", KeyEnv)
	}
	_, _, err = LoadKey(path, "c2VjcmV0LWJ1dC1zaG9ydA==")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), KeyEnv) || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("bad env key = %v; want an invalid argument naming %s, without the value", err, KeyEnv)
	}
}

func TestLoadKeyFileRefused(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, KeySize)) + "\n"
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"group readable", writeMode(good, 0o640), "mode 0640"},
		{"world readable", writeMode(good, 0o644), "mode 0644"},
		{"group writable", writeMode(good, 0o620), "mode 0620"},
		{"not base64", writeMode("not a key\n", 0o600), "not base64"},
		{"short key", writeMode(base64.StdEncoding.EncodeToString(make([]byte, 16)), 0o600), "not 16"},
		{"too large", writeMode(strings.Repeat("A", maxKeyFileBytes+1), 0o600), "larger than"},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "real.key")
			writeMode(good, 0o600)(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"another owner", func(t *testing.T, path string) {
			testutil.RequireRoot(t, "changing a file's owner needs root")
			writeMode(good, 0o600)(t, path)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), KeyFile)
			tt.setup(t, path)
			before, _ := os.Lstat(path)
			k, created, err := LoadKey(path, "")
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || k != nil || created || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("load = %v, %v, created %v; want failed precondition saying %q", k, err, created, tt.want)
			}
			if strings.Contains(err.Error(), strings.TrimSpace(good)) || strings.Contains(err.Error(), "CQkJ") {
				t.Errorf("the error shows key material: %v", err)
			}
			after, _ := os.Lstat(path)
			if before.Mode() != after.Mode() || before.ModTime() != after.ModTime() {
				t.Errorf("a refused key file was changed")
			}
		})
	}
}

func writeMode(text string, mode os.FileMode) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
}
