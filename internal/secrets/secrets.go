// Package secrets is Airlock's encrypted secret store: named values (API
// tokens, passwords) that belong to a tenant and that the daemon adds to
// outgoing requests on the sandbox's behalf (the egress edge to requests
// for an allowlisted destination, the tool gateway to upstream calls), so
// that code in a sandbox uses them without ever holding them.
//
// # Two capabilities
//
// Store manages secrets: Put (create or replace), Delete, List and Get,
// which return names and metadata, never values. It is what the API's
// write-only /v1/secrets routes use. The plaintext comes back only
// through a Reader (NewReader, Reveal), which the daemon hands to the
// egress edge and the gateway and to nothing that answers a caller; a
// test of this package fails if any other package names Reader.
//
// # Encryption at rest
//
// Each value is sealed with AES-256-GCM under the daemon's Key, with a
// random 96-bit nonce per write, and with the tenant ID, the secret's name
// and the key's ID bound as additional data: a ciphertext copied to
// another row, another tenant or a row that claims another key does not
// open. Each row records the ID of the key that sealed it, so that a key
// can be rotated (Options.OldKeys still open what an older key sealed;
// a Put reseals under Options.Key), and a row sealed by a key that is not
// loaded is reported as such instead of being decrypted into garbage. The
// store (internal/store) never sees a value. LoadKey reads the key from
// KeyEnv or the key file in the data directory, creating the file on the
// first start.
//
// # Never shown
//
// A Value prints, logs and encodes as Redacted; no error of this package
// contains a value or key material; raw key bytes are zeroed once the
// cipher is set up, and whoever holds a Value (the API handler that read
// it from a request, the caller of Reveal) Wipes it once it is used.
package secrets

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Caps.
const (
	// MaxValueBytes caps a secret's value.
	MaxValueBytes = 64 << 10
	// DefaultMaxPerTenant is the default count cap per tenant.
	DefaultMaxPerTenant = 200
	// MaxDescriptionBytes caps a secret's description.
	MaxDescriptionBytes = store.MaxSecretDescriptionBytes
)

// ValidateName reports a name that is not a secret's: 1-128 bytes, a
// letter or '_' followed by letters, digits, '_', '.' or '-'.
func ValidateName(name string) error { return store.ValidateSecretName(name) }

// Options configures New.
type Options struct {
	// Key seals every value Put writes and opens what it sealed.
	// Required.
	Key *Key
	// OldKeys open values sealed by earlier keys (by the ID each row
	// records); nothing new is sealed with them.
	OldKeys []*Key
	// MaxPerTenant caps each tenant's secrets. Default
	// DefaultMaxPerTenant, at most store.MaxSecretsPerTenant.
	MaxPerTenant int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Metadata is what may be shown of a secret: everything but its value.
type Metadata struct {
	TenantID    string
	Name        string
	Description string
	// KeyID names the key that sealed the value.
	KeyID string
	// Version is 1 when the secret is created and grows by one at every
	// Put that replaces it.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Store is the encrypted secret store. It is safe for concurrent use.
type Store struct {
	db   store.SecretStore
	key  *Key
	keys map[string]*Key // by ID: Key and OldKeys
	max  int
	now  func() time.Time
}

// New returns the store over db.
func New(db store.SecretStore, opts Options) (*Store, error) {
	if db == nil || opts.Key == nil {
		return nil, fmt.Errorf("secrets: a database and a key are required: %w", errdefs.ErrInvalidArgument)
	}
	if opts.MaxPerTenant == 0 {
		opts.MaxPerTenant = DefaultMaxPerTenant
	}
	if err := store.ValidateSecretCap(opts.MaxPerTenant); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{db: db, key: opts.Key, keys: map[string]*Key{opts.Key.id: opts.Key}, max: opts.MaxPerTenant, now: opts.Now}
	for _, k := range opts.OldKeys {
		if k == nil {
			return nil, fmt.Errorf("secrets: nil old key: %w", errdefs.ErrInvalidArgument)
		}
		s.keys[k.id] = k
	}
	return s, nil
}

// Put creates the tenant's secret name or replaces its value and
// description, sealing value under the current key, and returns its
// metadata. It neither keeps nor wipes value. Errors: ErrInvalidArgument
// for a malformed name, an empty value or one over MaxValueBytes, or a
// description over MaxDescriptionBytes; ErrResourceExhausted when a new
// name would pass the tenant's count cap; ErrNotFound for an unknown or
// deleted tenant.
func (s *Store) Put(ctx context.Context, tenantID, name, description string, value Value) (Metadata, error) {
	if err := ValidateName(name); err != nil {
		return Metadata{}, err
	}
	if n := value.Len(); n == 0 || n > MaxValueBytes {
		return Metadata{}, fmt.Errorf("secret %s: the value must be 1-%d bytes, not %d: %w", name, MaxValueBytes, n, errdefs.ErrInvalidArgument)
	}
	sealed, err := seal(s.key, tenantID, name, value.Bytes())
	if err != nil {
		return Metadata{}, err
	}
	now := s.now().UTC()
	r, err := s.db.PutSecret(ctx, store.SecretRecord{
		TenantID: tenantID, Name: name, Description: description, KeyID: s.key.id,
		Ciphertext: sealed, CreatedAt: now, UpdatedAt: now,
	}, s.max)
	if err != nil {
		return Metadata{}, err
	}
	return metadata(r), nil
}

// Get returns the metadata of the tenant's secret name, or ErrNotFound.
func (s *Store) Get(ctx context.Context, tenantID, name string) (Metadata, error) {
	if err := ValidateName(name); err != nil {
		return Metadata{}, err
	}
	r, err := s.db.GetSecret(ctx, tenantID, name)
	if err != nil {
		return Metadata{}, err
	}
	return metadata(r), nil
}

// List returns the metadata of the tenant's secrets, ordered by name.
func (s *Store) List(ctx context.Context, tenantID string) ([]Metadata, error) {
	rs, err := s.db.ListSecrets(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	out := make([]Metadata, len(rs))
	for i, r := range rs {
		out[i] = metadata(r)
	}
	return out, nil
}

// Delete removes the tenant's secret name; ErrNotFound if there is none.
func (s *Store) Delete(ctx context.Context, tenantID, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return s.db.DeleteSecret(ctx, tenantID, name)
}

// CheckKeys reports, as ErrFailedPrecondition, stored secrets sealed by a
// key that is not loaded (the key was replaced without keeping the old
// one in Options.OldKeys): they cannot be revealed until that key is
// loaded again or they are Put anew. The daemon calls it at start.
func (s *Store) CheckKeys(ctx context.Context) error {
	counts, err := s.db.CountSecretsByKey(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for id, n := range counts {
		if s.keys[id] == nil {
			missing = append(missing, fmt.Sprintf("%d sealed by key %s", n, id))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return fmt.Errorf("secrets: %s, which is not loaded (the loaded key is %s): %w",
		strings.Join(missing, ", "), s.key.id, errdefs.ErrFailedPrecondition)
}

func metadata(r store.SecretRecord) Metadata {
	return Metadata{TenantID: r.TenantID, Name: r.Name, Description: r.Description, KeyID: r.KeyID,
		Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// Reader reveals secrets' values. Only the daemon's own users of values
// (the egress edge, the tool gateway) get one; nothing that answers an
// API caller does.
type Reader struct {
	s *Store
}

// NewReader returns the Reader over s.
func NewReader(s *Store) *Reader { return &Reader{s: s} }

// Reveal returns the value of the tenant's secret name. The caller puts
// it where it goes and then Wipes it. Errors: ErrNotFound for no such
// secret; ErrFailedPrecondition when the row was sealed by a key that is
// not loaded or does not authenticate (tampered, or copied from another
// row): a wrong key never yields bytes.
func (r *Reader) Reveal(ctx context.Context, tenantID, name string) (Value, error) {
	if err := ValidateName(name); err != nil {
		return Value{}, err
	}
	rec, err := r.s.db.GetSecret(ctx, tenantID, name)
	if err != nil {
		return Value{}, err
	}
	k := r.s.keys[rec.KeyID]
	if k == nil {
		return Value{}, fmt.Errorf("secret %s was sealed by key %s, which is not loaded (the loaded key is %s): %w",
			name, store.Clip(rec.KeyID), r.s.key.id, errdefs.ErrFailedPrecondition)
	}
	plain, err := open(k, tenantID, name, rec.Ciphertext)
	if err != nil {
		return Value{}, err
	}
	return NewValue(plain), nil
}
