package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func secret(tenant, name string, at time.Time) store.SecretRecord {
	return store.SecretRecord{TenantID: tenant, Name: name, Description: "d " + name, KeyID: "k1",
		Ciphertext: []byte("sealed:" + tenant + "/" + name), CreatedAt: at, UpdatedAt: at}
}

func testSecrets(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant t1", s.CreateTenant(ctx, store.Tenant{ID: "t1", CreatedAt: base}))
	must(t, "tenant t2", s.CreateTenant(ctx, store.Tenant{ID: "t2", CreatedAt: base}))

	got, err := s.PutSecret(ctx, secret("t1", "B_TOKEN", base), 3)
	must(t, "put B", err)
	if got.Version != 1 || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(base) || got.Ciphertext != nil ||
		got.Description != "d B_TOKEN" || got.KeyID != "k1" || got.TenantID != "t1" || got.Name != "B_TOKEN" {
		t.Errorf("put B = %+v", got)
	}
	_, err = s.PutSecret(ctx, secret("t1", "a.key", base), 3)
	must(t, "put a", err)
	_, err = s.PutSecret(ctx, secret("t2", "B_TOKEN", base), 3)
	must(t, "put B in t2", err)

	// A replacement keeps the creation time and bumps the version.
	later := base.Add(time.Minute)
	r := secret("t1", "B_TOKEN", later)
	r.Ciphertext, r.KeyID, r.Description = []byte("sealed again"), "k2", ""
	got, err = s.PutSecret(ctx, r, 3)
	must(t, "replace B", err)
	if got.Version != 2 || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(later) || got.KeyID != "k2" || got.Description != "" {
		t.Errorf("replace B = %+v", got)
	}
	got, err = s.GetSecret(ctx, "t1", "B_TOKEN")
	must(t, "get B", err)
	if got.Version != 2 || !bytes.Equal(got.Ciphertext, []byte("sealed again")) || got.KeyID != "k2" || !got.CreatedAt.Equal(base) {
		t.Errorf("get B = %+v", got)
	}
	got, err = s.GetSecret(ctx, "t2", "B_TOKEN")
	must(t, "get B in t2", err)
	if got.Version != 1 || string(got.Ciphertext) != "sealed:t2/B_TOKEN" {
		t.Errorf("get B in t2 = %+v: another tenant's put changed it", got)
	}
	_, err = s.GetSecret(ctx, "t2", "a.key")
	wantClass(t, "get from other tenant", err, errdefs.ErrNotFound)
	_, err = s.GetSecret(ctx, "t1", "missing")
	wantClass(t, "get missing", err, errdefs.ErrNotFound)

	list, err := s.ListSecrets(ctx, "t1")
	must(t, "list", err)
	if len(list) != 2 || list[0].Name != "B_TOKEN" || list[1].Name != "a.key" || list[0].Ciphertext != nil || list[1].Ciphertext != nil {
		t.Errorf("list t1 = %+v, want B_TOKEN, a.key without ciphertext", list)
	}
	if l, err := s.ListSecrets(ctx, "nope"); err != nil || len(l) != 0 {
		t.Errorf("list of unknown tenant = %v, %v", l, err)
	}

	// The cap counts names, not writes: at the cap a new name is refused,
	// a replacement is not.
	_, err = s.PutSecret(ctx, secret("t1", "c", base), 3)
	must(t, "put c", err)
	_, err = s.PutSecret(ctx, secret("t1", "d", base), 3)
	wantClass(t, "over cap", err, errdefs.ErrResourceExhausted)
	_, err = s.PutSecret(ctx, secret("t1", "c", later), 3)
	must(t, "replace at cap", err)
	_, err = s.GetSecret(ctx, "t1", "d")
	wantClass(t, "refused put stored nothing", err, errdefs.ErrNotFound)

	wantClass(t, "delete from other tenant", s.DeleteSecret(ctx, "t2", "c"), errdefs.ErrNotFound)
	must(t, "delete c", s.DeleteSecret(ctx, "t1", "c"))
	wantClass(t, "delete again", s.DeleteSecret(ctx, "t1", "c"), errdefs.ErrNotFound)
	_, err = s.PutSecret(ctx, secret("t1", "d", base), 3)
	must(t, "put after delete", err)

	counts, err := s.CountSecretsByKey(ctx)
	must(t, "count by key", err)
	if len(counts) != 2 || counts["k1"] != 3 || counts["k2"] != 1 {
		t.Errorf("counts by key = %v, want k1:3 k2:1", counts)
	}

	_, err = s.PutSecret(ctx, secret("nope", "x", base), 3)
	wantClass(t, "unknown tenant", err, errdefs.ErrNotFound)
	bad := []func(*store.SecretRecord){
		func(r *store.SecretRecord) { r.Name = "" },
		func(r *store.SecretRecord) { r.Name = "1abc" },
		func(r *store.SecretRecord) { r.Name = "a b" },
		func(r *store.SecretRecord) { r.Name = "a/b" },
		func(r *store.SecretRecord) { r.Name = strings.Repeat("a", store.MaxSecretNameBytes+1) },
		func(r *store.SecretRecord) { r.TenantID = "a b" },
		func(r *store.SecretRecord) { r.KeyID = "" },
		func(r *store.SecretRecord) { r.Ciphertext = nil },
		func(r *store.SecretRecord) { r.Ciphertext = make([]byte, store.MaxSecretCiphertextBytes+1) },
		func(r *store.SecretRecord) { r.Description = strings.Repeat("d", store.MaxSecretDescriptionBytes+1) },
		func(r *store.SecretRecord) { r.Description = "nul\x00" },
		func(r *store.SecretRecord) { r.CreatedAt = time.Time{} },
		func(r *store.SecretRecord) { r.UpdatedAt = time.Time{} },
	}
	for i, mut := range bad {
		r := secret("t2", "ok", base)
		mut(&r)
		_, err := s.PutSecret(ctx, r, 3)
		wantClass(t, fmt.Sprintf("bad record %d", i), err, errdefs.ErrInvalidArgument)
	}
	for _, n := range []int{0, -1, store.MaxSecretsPerTenant + 1} {
		_, err := s.PutSecret(ctx, secret("t2", "ok", base), n)
		wantClass(t, fmt.Sprintf("cap %d", n), err, errdefs.ErrInvalidArgument)
	}
	if _, err := s.GetSecret(ctx, "t2", "ok"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused put stored a row: %v", err)
	}
	longest := secret("t2", "L"+strings.Repeat("x", store.MaxSecretNameBytes-1), base)
	longest.Ciphertext = bytes.Repeat([]byte{0xff}, store.MaxSecretCiphertextBytes)
	_, err = s.PutSecret(ctx, longest, 3)
	must(t, "put the largest record", err)
	got, err = s.GetSecret(ctx, "t2", longest.Name)
	must(t, "get the largest record", err)
	if !bytes.Equal(got.Ciphertext, longest.Ciphertext) {
		t.Errorf("largest ciphertext did not read back intact (%d bytes)", len(got.Ciphertext))
	}
}

// testSecretCapConcurrent checks that concurrent puts of new names never
// exceed the cap, and that concurrent replacements of one name lose no
// version.
func testSecretCapConcurrent(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	const limit, tries = 5, 40
	must(t, "tenant", s.CreateTenant(ctx, store.Tenant{ID: "t", CreatedAt: base}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, exhausted := 0, 0
	for i := range tries {
		wg.Go(func() {
			_, err := s.PutSecret(ctx, secret("t", fmt.Sprintf("s%d", i), base), limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, errdefs.ErrResourceExhausted):
				exhausted++
			default:
				t.Errorf("put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok != limit || exhausted != tries-limit {
		t.Errorf("stored %d, refused %d; want %d, %d", ok, exhausted, limit, tries-limit)
	}
	if l, _ := s.ListSecrets(ctx, "t"); len(l) != limit {
		t.Errorf("listed %d secrets, want %d", len(l), limit)
	}

	must(t, "tenant u", s.CreateTenant(ctx, store.Tenant{ID: "u", CreatedAt: base}))
	for range tries {
		wg.Go(func() {
			if _, err := s.PutSecret(ctx, secret("u", "same", base), limit); err != nil {
				t.Errorf("replace: %v", err)
			}
		})
	}
	wg.Wait()
	if r, err := s.GetSecret(ctx, "u", "same"); err != nil || r.Version != tries {
		t.Errorf("after %d concurrent puts: version %d, %v", tries, r.Version, err)
	}
}

// testSecretsOfDeletedTenant checks that deleting a tenant deletes its
// secrets and that none can be stored in it afterwards.
func testSecretsOfDeletedTenant(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant gone", s.CreateTenant(ctx, store.Tenant{ID: "gone", CreatedAt: base}))
	must(t, "tenant kept", s.CreateTenant(ctx, store.Tenant{ID: "kept", CreatedAt: base}))
	for _, r := range []store.SecretRecord{secret("gone", "a", base), secret("gone", "b", base), secret("kept", "a", base)} {
		_, err := s.PutSecret(ctx, r, 10)
		must(t, "put "+r.TenantID+"/"+r.Name, err)
	}
	must(t, "delete tenant", s.DeleteTenant(ctx, "gone", base.Add(time.Hour)))
	if l, err := s.ListSecrets(ctx, "gone"); err != nil || len(l) != 0 {
		t.Errorf("secrets of a deleted tenant = %+v, %v; want none", l, err)
	}
	_, err := s.GetSecret(ctx, "gone", "a")
	wantClass(t, "get from deleted tenant", err, errdefs.ErrNotFound)
	_, err = s.PutSecret(ctx, secret("gone", "c", base), 10)
	wantClass(t, "put into deleted tenant", err, errdefs.ErrNotFound)
	if _, err := s.GetSecret(ctx, "kept", "a"); err != nil {
		t.Errorf("deleting a tenant deleted another tenant's secret: %v", err)
	}
	if counts, err := s.CountSecretsByKey(ctx); err != nil || counts["k1"] != 1 {
		t.Errorf("counts after delete = %v, %v; want k1:1", counts, err)
	}
}
