// Package auth identifies API callers: tenants, API keys and their scopes.
// A request that passes authentication carries a Principal in its context.
//
// # Keys
//
// An API key looks like al_<key id>_<secret> (see ParseToken for the exact
// form): the 12-character key ID names the key and is not secret; the
// 52-character secret carries 260 random bits. The store keeps only a
// SHA-256 of the secret (bound to the key ID), which is enough for a
// secret of that entropy, and the plaintext is returned once, by
// CreateKey or EnsureAdmin. Secrets are compared in constant time.
//
// # Authentication
//
// Service.Authenticate parses the key, finds its record and checks the
// secret, revocation and expiry. Every failure returns the same
// ErrInvalidKey (class errdefs.ErrUnauthenticated), whatever went wrong.
// Records are cached for at most MaxCacheTTL (1 s): a key revoked through
// the same Service stops working at once, and one revoked any other way
// (another daemon sharing the store) within 1 s. Expiry is checked against
// the clock on every request. A key's last use is written to the store at
// most once per Options.TouchInterval.
//
// # Rate limiting
//
// Limiter is a per-key token bucket with bounded memory: keys idle longer
// than it takes to refill their bucket are forgotten, and the number of
// keys tracked is capped.
//
// # Scopes and the operator
//
// A key's scopes say what it may do within its tenant; admin implies all
// of them. The operator scope belongs to the host's operator: it implies
// every scope and allows what crosses tenants (tenants, shared templates,
// registry pulls). Keys cannot grant scopes they lack, so only an
// operator key makes another.
//
// # Bootstrap
//
// Service.EnsureAdmin runs at every start. Unless a live operator key
// exists, the key in <data dir>/admin.key becomes one: created on the
// first start (in the tenant "default", with admin and operator, the file
// written mode 0600 and never overwritten), stored when the store lacks
// it, or granted the operator scope when it is an older installation's
// bootstrap key.
package auth
