package egress

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestLoadCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Certificate().Equal(ca.Certificate()) {
		t.Error("a second start made another CA")
	}
	if c := ca.Certificate(); !c.IsCA || !c.MaxPathLenZero || c.NotAfter.Before(time.Now().Add(365*24*time.Hour)) {
		t.Errorf("CA certificate: IsCA %v, MaxPathLenZero %v, NotAfter %v", c.IsCA, c.MaxPathLenZero, c.NotAfter)
	}

	// A key others may read is refused.
	if err := os.Chmod(filepath.Join(dir, CAKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("key readable by others: got %v, want ErrFailedPrecondition", err)
	}
	os.Chmod(filepath.Join(dir, CAKeyFile), 0o600)

	// A certificate without its key, or a key of another CA, is refused.
	other := filepath.Join(t.TempDir(), "ca")
	if _, err := LoadCA(other); err != nil {
		t.Fatal(err)
	}
	cert, _ := os.ReadFile(filepath.Join(other, CACertFile))
	os.WriteFile(filepath.Join(dir, CACertFile), cert, 0o644)
	if _, err := LoadCA(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("mismatched key: got %v, want ErrFailedPrecondition", err)
	}
	os.Remove(filepath.Join(other, CAKeyFile))
	if _, err := LoadCA(other); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("certificate without key: got %v, want ErrFailedPrecondition", err)
	}
}

func TestCALeaf(t *testing.T) {
	ca := newTestCA(t)
	c, err := ca.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: caPool(ca)}); err != nil {
		t.Errorf("leaf does not verify: %v", err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: caPool(ca)}); err == nil {
		t.Error("leaf verifies for another name")
	}
	if again, _ := ca.leaf("api.example.com"); again != c {
		t.Error("leaf not cached")
	}
	// Near its end, a cached leaf is minted again.
	ca.now = func() time.Time { return time.Now().Add(leafValidity - time.Hour) }
	if again, _ := ca.leaf("api.example.com"); again == c {
		t.Error("an expiring leaf was served from the cache")
	}
	ca.now = time.Now
	// The cache is bounded.
	for i := range MaxLeafCache + 10 {
		if _, err := ca.leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := ca.cachedLeaves(); n != MaxLeafCache {
		t.Errorf("cache holds %d leaves, want at most %d", n, MaxLeafCache)
	}
}
