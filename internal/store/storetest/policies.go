package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// testPolicies checks put, replace, get and delete of a tenant's policy,
// tenant scoping, the refusals, and that deleting a tenant deletes its
// policy and refuses a new one.
func testPolicies(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant t1", s.CreateTenant(ctx, store.Tenant{ID: "t1", CreatedAt: base}))
	must(t, "tenant t2", s.CreateTenant(ctx, store.Tenant{ID: "t2", CreatedAt: base}))
	later := base.Add(time.Minute)

	_, _, err := s.GetPolicy(ctx, "t1")
	wantClass(t, "get before put", err, errdefs.ErrNotFound)
	wantClass(t, "delete before put", s.DeletePolicy(ctx, "t1"), errdefs.ErrNotFound)

	must(t, "put t1", s.PutPolicy(ctx, "t1", "permit(principal, action, resource);", base))
	must(t, "put t2", s.PutPolicy(ctx, "t2", "forbid(principal, action, resource);", base))
	must(t, "replace t1", s.PutPolicy(ctx, "t1", "// v2\npermit(principal, action, resource);", later))
	text, at, err := s.GetPolicy(ctx, "t1")
	must(t, "get t1", err)
	if text != "// v2\npermit(principal, action, resource);" || !at.Equal(later) {
		t.Errorf("get t1 = %q at %v, want the replacement at %v", text, at, later)
	}
	if text, _, err := s.GetPolicy(ctx, "t2"); err != nil || text != "forbid(principal, action, resource);" {
		t.Errorf("get t2 = %q, %v: another tenant's put changed it", text, err)
	}

	wantClass(t, "unknown tenant", s.PutPolicy(ctx, "nope", "permit(principal, action, resource);", base), errdefs.ErrNotFound)
	bad := []struct {
		name, tenant, text string
		at                 time.Time
	}{
		{"empty", "t1", "", base},
		{"too large", "t1", strings.Repeat("x", store.MaxPolicyBytes+1), base},
		{"not utf-8", "t1", "permit\xff", base},
		{"nul", "t1", "permit\x00", base},
		{"no time", "t1", "permit", time.Time{}},
		{"time out of range", "t1", "permit", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"bad tenant", "a b", "permit", base},
	}
	for _, b := range bad {
		wantClass(t, "put "+b.name, s.PutPolicy(ctx, b.tenant, b.text, b.at), errdefs.ErrInvalidArgument)
	}
	if text, _, err := s.GetPolicy(ctx, "t1"); err != nil || text != "// v2\npermit(principal, action, resource);" {
		t.Errorf("get t1 after refused puts = %q, %v", text, err)
	}
	largest := strings.Repeat("x", store.MaxPolicyBytes)
	must(t, "put the largest", s.PutPolicy(ctx, "t2", largest, later))
	if text, _, err := s.GetPolicy(ctx, "t2"); err != nil || text != largest {
		t.Errorf("the largest policy did not read back intact: %d bytes, %v", len(text), err)
	}

	must(t, "delete t1", s.DeletePolicy(ctx, "t1"))
	_, _, err = s.GetPolicy(ctx, "t1")
	wantClass(t, "get deleted", err, errdefs.ErrNotFound)
	wantClass(t, "delete again", s.DeletePolicy(ctx, "t1"), errdefs.ErrNotFound)
	if _, _, err := s.GetPolicy(ctx, "t2"); err != nil {
		t.Errorf("t2's policy after deleting t1's: %v", err)
	}

	// Deleting a tenant deletes its policy; none can be put afterwards.
	must(t, "delete tenant t2", s.DeleteTenant(ctx, "t2", later))
	_, _, err = s.GetPolicy(ctx, "t2")
	wantClass(t, "get policy of deleted tenant", err, errdefs.ErrNotFound)
	wantClass(t, "put policy in deleted tenant", s.PutPolicy(ctx, "t2", "permit(principal, action, resource);", later), errdefs.ErrNotFound)
}
