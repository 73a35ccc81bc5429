package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// A ticket is a short-lived, single-use credential that stands for an API
// key for one purpose on one resource, for a client that cannot send the
// key itself: a browser's WebSocket cannot set an Authorization header,
// so a web terminal opens the PTY with a ticket in its URL. The ticket
// string is
//
//	alt_<52 characters of a-z2-7>
//
// 260 random bits (crypto/rand). A ticket is kept in memory only, as the
// SHA-256 of its string (a dump of the daemon's memory shows no usable
// ticket), and is gone with the daemon. Presenting it consumes it,
// whether or not it fits the request, so that a ticket that leaked (a
// browser history, a proxy's log) is of no use once its owner has used
// it, and of none after its TTL. It carries no scopes of its own: the
// request that redeems it is authorized as its key is at that moment, so
// a key revoked meanwhile, or one that lost a scope, takes its tickets
// with it (see Service.KeyPrincipal).
const (
	ticketPrefix = "alt_"
	ticketLen    = len(ticketPrefix) + secretLen
)

// ErrInvalidTicket is the one error Redeem returns for a ticket that is
// malformed, unknown, used, expired or presented for another purpose or
// resource, so that a caller cannot tell which. It wraps
// errdefs.ErrUnauthenticated.
var ErrInvalidTicket = fmt.Errorf("invalid, used or expired token: %w", errdefs.ErrUnauthenticated)

// Default limits of Tickets.
const (
	DefaultTicketTTL = 30 * time.Second
	// maxTickets caps the tickets not yet redeemed nor expired, and
	// maxTicketsPerKey those of one key, so that minting cannot fill the
	// daemon's memory (each costs about 200 bytes).
	maxTickets       = 10000
	maxTicketsPerKey = 64
)

// Tickets issues and redeems tickets. It is safe for concurrent use.
type Tickets struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	byHash map[[sha256.Size]byte]ticket
	perKey map[string]int
}

// ticket is what a ticket stands for.
type ticket struct {
	keyID, tenantID   string
	purpose, resource string
	expires           time.Time
}

// NewTickets returns an empty ticket store whose tickets live ttl
// (DefaultTicketTTL if zero); now is the clock (time.Now if nil).
func NewTickets(ttl time.Duration, now func() time.Time) *Tickets {
	if ttl <= 0 {
		ttl = DefaultTicketTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Tickets{ttl: ttl, now: now, byHash: map[[sha256.Size]byte]ticket{}, perKey: map[string]int{}}
}

// Issue returns a new ticket that lets p's key act once, within the TTL,
// for purpose on resource, and when it expires. It fails with
// ErrResourceExhausted when the key, or the store, holds too many
// tickets not yet used.
func (t *Tickets) Issue(p Principal, purpose, resource string) (string, time.Time, error) {
	if p.KeyID == "" || p.TenantID == "" || purpose == "" || resource == "" {
		return "", time.Time{}, fmt.Errorf("ticket: key, tenant, purpose and resource are required: %w", errdefs.ErrInvalidArgument)
	}
	var b [secretLen]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("ticket: random: %v: %w", err, errdefs.ErrInternal)
	}
	for i := range b {
		b[i] = tokenAlpha[b[i]&31] // 32 divides 256: no bias
	}
	token := ticketPrefix + string(b[:])
	now := t.now()
	tk := ticket{keyID: p.KeyID, tenantID: p.TenantID, purpose: purpose, resource: resource, expires: now.Add(t.ttl)}

	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.byHash) >= maxTickets/2 || t.perKey[p.KeyID] >= maxTicketsPerKey {
		t.purgeLocked(now)
	}
	switch {
	case t.perKey[p.KeyID] >= maxTicketsPerKey:
		return "", time.Time{}, fmt.Errorf("this API key holds %d unused tokens, the limit; use them or wait %v: %w",
			maxTicketsPerKey, t.ttl, errdefs.ErrResourceExhausted)
	case len(t.byHash) >= maxTickets:
		return "", time.Time{}, fmt.Errorf("too many unused tokens; try again in %v: %w", t.ttl, errdefs.ErrResourceExhausted)
	}
	t.byHash[sha256.Sum256([]byte(token))] = tk
	t.perKey[p.KeyID]++
	return token, tk.expires, nil
}

// Redeem consumes token and returns the key and tenant it was issued to,
// if it is unexpired and was issued for purpose on resource. Every other
// case is ErrInvalidTicket; the ticket is consumed either way.
func (t *Tickets) Redeem(token, purpose, resource string) (keyID, tenantID string, err error) {
	if len(token) != ticketLen || !strings.HasPrefix(token, ticketPrefix) || !inAlphabet(token[len(ticketPrefix):]) {
		return "", "", ErrInvalidTicket
	}
	h := sha256.Sum256([]byte(token))
	now := t.now()
	t.mu.Lock()
	tk, ok := t.byHash[h]
	if ok {
		t.removeLocked(h, tk)
	}
	t.mu.Unlock()
	if !ok || !now.Before(tk.expires) || tk.purpose != purpose || tk.resource != resource {
		return "", "", ErrInvalidTicket
	}
	return tk.keyID, tk.tenantID, nil
}

// Len returns how many tickets are held (unused ones, and expired ones
// not yet purged).
func (t *Tickets) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byHash)
}

// purgeLocked drops the expired tickets.
func (t *Tickets) purgeLocked(now time.Time) {
	for h, tk := range t.byHash {
		if !now.Before(tk.expires) {
			t.removeLocked(h, tk)
		}
	}
}

func (t *Tickets) removeLocked(h [sha256.Size]byte, tk ticket) {
	delete(t.byHash, h)
	if t.perKey[tk.keyID]--; t.perKey[tk.keyID] <= 0 {
		delete(t.perKey, tk.keyID)
	}
}

// KeyPrincipal returns the principal of the key called id as it is now,
// as Authenticate would for its secret: ErrInvalidKey when it is unknown,
// revoked or expired. It is for credentials derived from a key (tickets),
// which must stop working with it. Like Authenticate, it may use a key
// record read up to CacheTTL ago; revocation through this Service takes
// effect at once.
func (s *Service) KeyPrincipal(ctx context.Context, id string) (Principal, error) {
	if !validKeyID(id) {
		return Principal{}, ErrInvalidKey
	}
	now := s.opts.Now()
	rec, err := s.lookup(ctx, id, now)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Principal{}, ErrInvalidKey
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	if !rec.RevokedAt.IsZero() || (!rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt)) {
		return Principal{}, ErrInvalidKey
	}
	scopes := make([]Scope, len(rec.Scopes))
	for i, sc := range rec.Scopes {
		scopes[i] = Scope(sc)
	}
	return Principal{TenantID: rec.TenantID, KeyID: rec.ID, Scopes: scopes}, nil
}
