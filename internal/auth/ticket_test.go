package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

var ticketOwner = Principal{TenantID: "t1", KeyID: "aaaaaaaaaaaa"}

// TestTicketSingleUse: a ticket redeems once, for its purpose and
// resource, to its key and tenant; any presentation consumes it, a wrong
// one included.
func TestTicketSingleUse(t *testing.T) {
	ts := NewTickets(0, nil)
	tok, exp, err := ts.Issue(ticketOwner, "pty", "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(exp); d <= 29*time.Second || d > DefaultTicketTTL {
		t.Errorf("expires in %v, want the default TTL %v", d, DefaultTicketTTL)
	}
	if !strings.HasPrefix(tok, ticketPrefix) || len(tok) != ticketLen || !inAlphabet(tok[len(ticketPrefix):]) {
		t.Errorf("ticket %q is not alt_ and 52 characters of a-z2-7", tok)
	}
	key, tenant, err := ts.Redeem(tok, "pty", "sb-1")
	if err != nil || key != ticketOwner.KeyID || tenant != ticketOwner.TenantID {
		t.Fatalf("Redeem = %q %q %v", key, tenant, err)
	}
	if _, _, err := ts.Redeem(tok, "pty", "sb-1"); !errors.Is(err, ErrInvalidTicket) || !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("second Redeem: %v, want ErrInvalidTicket", err)
	}
	for name, redeem := range map[string]func(string) error{
		"wrong resource": func(tok string) error { _, _, err := ts.Redeem(tok, "pty", "sb-2"); return err },
		"wrong purpose":  func(tok string) error { _, _, err := ts.Redeem(tok, "files", "sb-1"); return err },
	} {
		tok, _, err := ts.Issue(ticketOwner, "pty", "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := redeem(tok); !errors.Is(err, ErrInvalidTicket) {
			t.Errorf("%s: %v, want ErrInvalidTicket", name, err)
		}
		if _, _, err := ts.Redeem(tok, "pty", "sb-1"); !errors.Is(err, ErrInvalidTicket) {
			t.Errorf("%s: the ticket still redeems after it was presented: %v", name, err)
		}
	}
	for _, bad := range []string{"", "alt_", tok + "a", strings.ToUpper(tok), "al_" + tok[4:] + "x", strings.Repeat("a", ticketLen)} {
		if _, _, err := ts.Redeem(bad, "pty", "sb-1"); !errors.Is(err, ErrInvalidTicket) {
			t.Errorf("Redeem(%q) = %v", bad, err)
		}
	}
	if n := ts.Len(); n != 0 {
		t.Errorf("%d tickets held after every one was presented", n)
	}
	if _, _, err := ts.Issue(Principal{TenantID: "t1"}, "pty", "sb-1"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Issue without a key: %v", err)
	}
}

// TestTicketExpiry: a ticket does not redeem at or after its expiry.
func TestTicketExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	ts := NewTickets(30*time.Second, clk.Now)
	early, _, _ := ts.Issue(ticketOwner, "pty", "sb-1")
	late, exp, _ := ts.Issue(ticketOwner, "pty", "sb-1")
	if !exp.Equal(clk.Now().Add(30 * time.Second)) {
		t.Errorf("expiry %v", exp)
	}
	clk.Add(29 * time.Second)
	if _, _, err := ts.Redeem(early, "pty", "sb-1"); err != nil {
		t.Errorf("29 s after it was issued: %v", err)
	}
	clk.Add(time.Second)
	if _, _, err := ts.Redeem(late, "pty", "sb-1"); !errors.Is(err, ErrInvalidTicket) {
		t.Errorf("30 s after it was issued: %v, want ErrInvalidTicket", err)
	}
}

// TestTicketCaps: a key holds at most maxTicketsPerKey unused tickets;
// expired ones make room again; another key is not affected.
func TestTicketCaps(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	ts := NewTickets(time.Second, clk.Now)
	seen := map[string]bool{}
	for i := range maxTicketsPerKey {
		tok, _, err := ts.Issue(ticketOwner, "pty", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if seen[tok] {
			t.Fatalf("ticket %q issued twice", tok)
		}
		seen[tok] = true
	}
	if _, _, err := ts.Issue(ticketOwner, "pty", "x"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("ticket %d of one key: %v, want resource exhausted", maxTicketsPerKey+1, err)
	}
	if _, _, err := ts.Issue(Principal{TenantID: "t1", KeyID: "bbbbbbbbbbbb"}, "pty", "x"); err != nil {
		t.Errorf("another key: %v", err)
	}
	clk.Add(time.Second)
	if _, _, err := ts.Issue(ticketOwner, "pty", "x"); err != nil {
		t.Errorf("after the others expired: %v", err)
	}
	if n := ts.Len(); n != 1 {
		t.Errorf("%d tickets held, want 1 (the expired ones purged)", n)
	}
}

// TestKeyPrincipal: a key's principal as it is now: unknown, revoked and
// expired keys are refused like a bad secret.
func TestKeyPrincipal(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Now()}
	s, _ := withTenant(t, Options{Now: clk.Now})
	_, key, err := s.CreateKey(ctx, "t1", "web", []Scope{ScopeExec}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_, short, err := s.CreateKey(ctx, "t1", "short", []Scope{ScopeExec}, clk.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.KeyPrincipal(ctx, key.ID)
	if err != nil || p.TenantID != "t1" || p.KeyID != key.ID || !p.Has(ScopeExec) || p.Has(ScopeFiles) {
		t.Fatalf("KeyPrincipal = %+v, %v", p, err)
	}
	for _, id := range []string{"", "nope", "aaaaaaaaaaaa"} {
		if _, err := s.KeyPrincipal(ctx, id); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("KeyPrincipal(%q) = %v, want ErrInvalidKey", id, err)
		}
	}
	if err := s.RevokeKey(ctx, "t1", key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyPrincipal(ctx, key.ID); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("a revoked key: %v, want ErrInvalidKey", err)
	}
	clk.Add(2 * time.Minute)
	if _, err := s.KeyPrincipal(ctx, short.ID); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("an expired key: %v, want ErrInvalidKey", err)
	}
}
