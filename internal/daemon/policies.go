package daemon

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// storePolicies is gateway.Config.Policies over the store: a tenant's
// Cedar policy text as /v1/policies set it, "" when it has none. The
// gateway caches the parsed set by text, so each call costs one indexed
// read of the store.
func storePolicies(st store.PolicyStore) func(ctx context.Context, tenant string) (string, error) {
	return func(ctx context.Context, tenant string) (string, error) {
		text, _, err := st.GetPolicy(ctx, tenant)
		if errors.Is(err, errdefs.ErrNotFound) {
			return "", nil
		}
		return text, err
	}
}
