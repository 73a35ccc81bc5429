package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// ErrInvalidKey is the one error Authenticate returns for a key that is
// malformed, unknown, revoked, expired or has the wrong secret, so that a
// caller cannot tell which. It wraps errdefs.ErrUnauthenticated.
var ErrInvalidKey = fmt.Errorf("invalid API key: %w", errdefs.ErrUnauthenticated)

// Store is what a Service needs from the store.
type Store interface {
	store.TenantStore
	store.KeyStore
}

// Options tunes a Service. Zero values take the documented defaults.
type Options struct {
	// CacheTTL is how long Authenticate may use a key record it read
	// from the store. It bounds how long a key revoked through another
	// Service (another daemon, or the store directly) keeps working;
	// revocation through this Service takes effect at once. Default and
	// maximum 1 second; negative disables the cache.
	CacheTTL time.Duration
	// CacheSize caps the cached key records. Default 10000.
	CacheSize int
	// TouchInterval is how often, at most, a key's last use time is
	// written to the store. Default 1 minute.
	TouchInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives failures to record a key's last use, which do not
	// fail the request. Default: discard.
	Logger *slog.Logger
}

// MaxCacheTTL caps Options.CacheTTL: a revoked key stops working within
// this long everywhere.
const MaxCacheTTL = time.Second

func (o Options) withDefaults() (Options, error) {
	if o.CacheTTL == 0 {
		o.CacheTTL = MaxCacheTTL
	}
	if o.CacheSize == 0 {
		o.CacheSize = 10000
	}
	if o.TouchInterval == 0 {
		o.TouchInterval = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.CacheTTL > MaxCacheTTL:
		return o, fmt.Errorf("auth CacheTTL %v exceeds %v: %w", o.CacheTTL, MaxCacheTTL, errdefs.ErrInvalidArgument)
	case o.CacheSize < 1 || o.CacheSize > 1<<20:
		return o, fmt.Errorf("auth CacheSize %d out of range: %w", o.CacheSize, errdefs.ErrInvalidArgument)
	case o.TouchInterval < 0:
		return o, fmt.Errorf("auth TouchInterval is negative: %w", errdefs.ErrInvalidArgument)
	}
	return o, nil
}

// Service manages tenants and API keys and authenticates requests. It is
// safe for concurrent use.
type Service struct {
	st   Store
	opts Options

	mu    sync.Mutex
	cache map[string]cacheEntry
	// gen counts revocations, so that a lookup that raced with one does
	// not cache the record it read before it.
	gen uint64
}

type cacheEntry struct {
	key     store.APIKey
	fetched time.Time
}

// NewService returns a Service over st.
func NewService(st Store, opts Options) (*Service, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Service{st: st, opts: opts, cache: map[string]cacheEntry{}}, nil
}

// Key is an API key as callers see it: everything but the secret and its
// hash.
type Key struct {
	ID         string    `json:"id"`
	TenantID   string    `json:"tenant_id"`
	Name       string    `json:"name,omitempty"`
	Scopes     []Scope   `json:"scopes"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
}

func keyOf(k store.APIKey) Key {
	scopes := make([]Scope, len(k.Scopes))
	for i, s := range k.Scopes {
		scopes[i] = Scope(s)
	}
	return Key{ID: k.ID, TenantID: k.TenantID, Name: k.Name, Scopes: scopes, CreatedAt: k.CreatedAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt, ExpiresAt: k.ExpiresAt}
}

// CreateTenant creates t, generating its ID when empty, and returns it as
// stored. MaxSandboxes 0 means unlimited.
func (s *Service) CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error) {
	if t.ID == "" {
		id, _, err := newToken()
		if err != nil {
			return store.Tenant{}, err
		}
		t.ID = "t-" + id[:10]
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.opts.Now()
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if err := s.st.CreateTenant(ctx, t); err != nil {
		return store.Tenant{}, err
	}
	return t, nil
}

// GetTenant returns the tenant with this ID, a deleted one included
// (DeletedAt set); ErrNotFound if there is none.
func (s *Service) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	return s.st.GetTenant(ctx, id)
}

// ListTenants returns every tenant, deleted ones included, by ID.
func (s *Service) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	return s.st.ListTenants(ctx)
}

// DeleteTenant deletes the tenant and revokes its keys at once (see
// store.TenantStore.DeleteTenant): ErrNotFound for a missing or deleted
// tenant, ErrFailedPrecondition while it has active sandbox records. Its
// keys stop working at once through this Service and within CacheTTL
// through others sharing the store.
func (s *Service) DeleteTenant(ctx context.Context, id string) error {
	err := s.st.DeleteTenant(ctx, id, s.opts.Now())
	s.forget(func(k store.APIKey) bool { return k.TenantID == id })
	return err
}

// forget drops the cached keys drop selects and makes lookups in flight
// not cache what they read.
func (s *Service) forget(drop func(store.APIKey) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.cache {
		if drop(e.key) {
			delete(s.cache, id)
		}
	}
	s.gen++
}

// SandboxQuota returns the tenant's cap on active sandboxes (0: no cap).
func (s *Service) SandboxQuota(ctx context.Context, tenantID string) (int, error) {
	t, err := s.st.GetTenant(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	return t.MaxSandboxes, nil
}

// CreateKey creates a key in tenantID with the given scopes, expiring at
// expiresAt (zero: never). It returns the key string, which is not stored
// and cannot be shown again, and the key's record.
func (s *Service) CreateKey(ctx context.Context, tenantID, name string, scopes []Scope, expiresAt time.Time) (string, Key, error) {
	if len(name) > store.MaxNameBytes || !utf8.ValidString(name) || strings.ContainsFunc(name, isControl) {
		return "", Key{}, fmt.Errorf("key name must be at most %d bytes of printable text: %w", store.MaxNameBytes, errdefs.ErrInvalidArgument)
	}
	if len(scopes) == 0 {
		return "", Key{}, fmt.Errorf("a key needs at least one scope: %w", errdefs.ErrInvalidArgument)
	}
	strs := make([]string, 0, len(scopes))
	for _, sc := range scopes {
		if !sc.Valid() {
			return "", Key{}, fmt.Errorf("unknown scope %q: %w", store.Clip(string(sc)), errdefs.ErrInvalidArgument)
		}
		strs = append(strs, string(sc))
	}
	now := s.opts.Now().UTC()
	if !expiresAt.IsZero() && !expiresAt.After(now) {
		return "", Key{}, fmt.Errorf("key expiry must be in the future: %w", errdefs.ErrInvalidArgument)
	}
	if !expiresAt.IsZero() {
		expiresAt = expiresAt.UTC()
	}
	for range 3 { // a 60-bit ID collides about never; retry if it does
		id, token, err := newToken()
		if err != nil {
			return "", Key{}, err
		}
		_, secret, _ := ParseToken(token)
		rec := store.APIKey{ID: id, TenantID: tenantID, Name: name, Hash: hashSecret(id, secret),
			Scopes: store.NormalizeScopes(strs), CreatedAt: now, ExpiresAt: expiresAt}
		err = s.st.CreateAPIKey(ctx, rec)
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			continue
		}
		if err != nil {
			return "", Key{}, err
		}
		return token, keyOf(rec), nil
	}
	return "", Key{}, fmt.Errorf("create key: no free key ID: %w", errdefs.ErrInternal)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// ListKeys returns the keys of one tenant, revoked and expired ones
// included, oldest first.
func (s *Service) ListKeys(ctx context.Context, tenantID string) ([]Key, error) {
	recs, err := s.st.ListAPIKeys(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	out := make([]Key, len(recs))
	for i, r := range recs {
		out[i] = keyOf(r)
	}
	return out, nil
}

// RevokeKey revokes a key of tenantID; ErrNotFound if the tenant has no
// such key. It takes effect at once for this Service and within CacheTTL
// for others sharing the store.
func (s *Service) RevokeKey(ctx context.Context, tenantID, keyID string) error {
	if !validKeyID(keyID) {
		return fmt.Errorf("key %s: %w", store.Clip(keyID), errdefs.ErrNotFound)
	}
	err := s.st.RevokeAPIKey(ctx, tenantID, keyID, s.opts.Now())
	s.mu.Lock()
	delete(s.cache, keyID)
	s.gen++
	s.mu.Unlock()
	return err
}

// Authenticate returns the Principal of an API key. Every malformed,
// unknown, revoked or expired key, and every wrong secret, gets
// ErrInvalidKey; a store failure gets an error of its own class (not
// ErrUnauthenticated), since it says nothing about the key.
//
// A key record read from the store is reused for up to CacheTTL (1 second
// by default), so the usual cost is a parse and one SHA-256; the secret is
// checked, in constant time, and expiry compared with the clock on every
// call.
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	id, secret, ok := ParseToken(token)
	if !ok {
		return Principal{}, ErrInvalidKey
	}
	now := s.opts.Now()
	rec, err := s.lookup(ctx, id, now)
	if errors.Is(err, errdefs.ErrNotFound) {
		secretMatches(id, secret, store.GenesisHash) // same work as a known key
		return Principal{}, ErrInvalidKey
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	if !secretMatches(id, secret, rec.Hash) || !rec.RevokedAt.IsZero() ||
		(!rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt)) {
		return Principal{}, ErrInvalidKey
	}
	if s.opts.TouchInterval > 0 && now.Sub(rec.LastUsedAt) >= s.opts.TouchInterval {
		s.touch(ctx, rec.ID, now)
	}
	scopes := make([]Scope, len(rec.Scopes))
	for i, sc := range rec.Scopes {
		scopes[i] = Scope(sc)
	}
	return Principal{TenantID: rec.TenantID, KeyID: rec.ID, Scopes: scopes}, nil
}

// lookup returns the key record, from the cache when fresh.
func (s *Service) lookup(ctx context.Context, id string, now time.Time) (store.APIKey, error) {
	var gen uint64
	if s.opts.CacheTTL > 0 {
		s.mu.Lock()
		e, ok := s.cache[id]
		gen = s.gen
		s.mu.Unlock()
		if ok && now.Sub(e.fetched) < s.opts.CacheTTL && !now.Before(e.fetched) {
			return e.key, nil
		}
	}
	rec, err := s.st.GetAPIKey(ctx, id)
	if err != nil {
		return store.APIKey{}, err
	}
	if s.opts.CacheTTL > 0 {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen != gen { // a revocation happened meanwhile: do not cache
			return rec, nil
		}
		if len(s.cache) >= s.opts.CacheSize {
			s.evictLocked(now)
		}
		s.cache[id] = cacheEntry{key: rec, fetched: now}
	}
	return rec, nil
}

// evictLocked drops stale entries and, if the cache is still full, half
// of the rest.
func (s *Service) evictLocked(now time.Time) {
	for id, e := range s.cache {
		if now.Sub(e.fetched) >= s.opts.CacheTTL {
			delete(s.cache, id)
		}
	}
	for id := range s.cache {
		if len(s.cache) < s.opts.CacheSize/2 {
			break
		}
		delete(s.cache, id)
	}
}

// touch records a key's use. A failure is logged, not returned: the
// request is authenticated either way.
func (s *Service) touch(ctx context.Context, id string, now time.Time) {
	s.mu.Lock()
	if e, ok := s.cache[id]; ok {
		e.key.LastUsedAt = now
		s.cache[id] = e
	}
	s.mu.Unlock()
	if err := s.st.TouchAPIKey(ctx, id, now); err != nil {
		s.opts.Logger.Warn("recording API key use failed", "key_id", id, "err", err)
	}
}
