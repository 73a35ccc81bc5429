package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// failingPolicies is a store.PolicyStore whose reads fail.
type failingPolicies struct{ store.PolicyStore }

func (failingPolicies) GetPolicy(context.Context, string) (string, time.Time, error) {
	return "", time.Time{}, errdefs.ErrUnavailable
}

// TestStorePolicies: the gateway reads a tenant's stored text, "" for a
// tenant without one, and a failed read as an error (which the gateway
// turns into a denied call), never as "" (which would permit it).
func TestStorePolicies(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for _, id := range []string{"a", "b"} {
		if err := st.CreateTenant(ctx, store.Tenant{ID: id, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	const text = `forbid(principal, action, resource);`
	if err := st.PutPolicy(ctx, "a", text, now); err != nil {
		t.Fatal(err)
	}
	get := storePolicies(st)
	if got, err := get(ctx, "a"); err != nil || got != text {
		t.Errorf("tenant a = %q, %v; want its text", got, err)
	}
	if got, err := get(ctx, "b"); err != nil || got != "" {
		t.Errorf("tenant b (none) = %q, %v; want \"\", nil", got, err)
	}
	if _, err := storePolicies(failingPolicies{})(ctx, "a"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a failed read = %v, want the error", err)
	}
}
