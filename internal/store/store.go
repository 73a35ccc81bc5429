// Package store is Airlock's durable state: tenants, API keys, the record of
// every sandbox the API created or destroyed, the rows of the audit log,
// the encrypted rows of internal/secrets and the tools and toolsets of
// internal/gateway.
//
// The Store interface is what the rest of the daemon uses. It speaks only
// in the plain Go types of this package (no driver types), so that a
// PostgreSQL implementation can satisfy it later; every implementation
// must pass the conformance suite in store/storetest. The embedded
// implementation is store/sqlitestore (pure-Go SQLite, no cgo).
//
// Errors wrap a class from internal/errdefs: ErrNotFound for a missing row,
// ErrAlreadyExists for a duplicate ID, ErrInvalidArgument for a value this
// package refuses (Validate methods below), ErrResourceExhausted for a
// tenant quota, ErrFailedPrecondition for an audit append that does not
// continue the stored chain.
//
// Times are stored with nanosecond precision in UTC; the zero time.Time
// means "not set" wherever a field is optional.
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Store is the whole of Airlock's durable state. Implementations are safe
// for concurrent use by many goroutines.
type Store interface {
	TenantStore
	KeyStore
	SandboxStore
	AuditStore
	SecretStore
	ToolStore
	PolicyStore
	// Close releases the store. Calls after Close fail.
	Close() error
}

// TenantStore keeps tenants.
type TenantStore interface {
	// CreateTenant inserts t; ErrAlreadyExists if its ID is taken.
	CreateTenant(ctx context.Context, t Tenant) error
	// GetTenant returns the tenant with this ID or ErrNotFound.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// ListTenants returns every tenant, ordered by ID.
	ListTenants(ctx context.Context) ([]Tenant, error)
	// UpdateTenant replaces the name and quota of an existing tenant;
	// ErrNotFound for a deleted one.
	UpdateTenant(ctx context.Context, t Tenant) error
	// DeleteTenant marks the tenant deleted at the given time, revokes
	// every key of it and deletes its secrets, tools, toolsets and policy, in one transaction. It is ErrNotFound for a
	// missing or already deleted tenant and ErrFailedPrecondition while
	// the tenant has an active sandbox record (state other than
	// SandboxStopped). A deleted tenant's row stays (GetTenant and
	// ListTenants return it with DeletedAt set) so that its ID, which
	// names its audit records and sandbox records, is never reused; no
	// key or sandbox can be created in it.
	DeleteTenant(ctx context.Context, id string, at time.Time) error
}

// KeyStore keeps API keys. The store never sees a key's secret, only the
// hash that internal/auth computes.
type KeyStore interface {
	// CreateAPIKey inserts k; ErrAlreadyExists if its ID is taken,
	// ErrNotFound if its tenant does not exist or is deleted.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey returns the key with this ID (in any tenant) or ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (APIKey, error)
	// ListAPIKeys returns the keys of one tenant, revoked ones included,
	// ordered by creation.
	ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error)
	// CountAPIKeys counts every key of every tenant, revoked ones included.
	CountAPIKeys(ctx context.Context) (int, error)
	// RevokeAPIKey marks the key revoked at the given time. It is
	// ErrNotFound unless the key belongs to tenantID. Revoking a revoked
	// key succeeds and keeps the first revocation time.
	RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) error
	// TouchAPIKey sets the key's last use time.
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
	// SetAPIKeyScopes replaces the scopes of the key with this ID (in any
	// tenant; for the daemon's bootstrap, never for a caller's request);
	// ErrNotFound if there is none.
	SetAPIKeyScopes(ctx context.Context, id string, scopes []string) error
}

// SandboxStore keeps the API's record of sandboxes.
type SandboxStore interface {
	// CreateSandbox inserts s if its tenant has fewer active sandboxes
	// than its MaxSandboxes quota (a quota of 0 means unlimited). The
	// check and the insert are one atomic step, so concurrent creations
	// never exceed the quota: ErrResourceExhausted when it is reached,
	// ErrAlreadyExists for a duplicate ID, ErrNotFound for an unknown or
	// deleted tenant.
	CreateSandbox(ctx context.Context, s Sandbox) error
	// PutSandbox inserts s or replaces the record with its ID, without a
	// quota check. A record cannot move to another tenant:
	// ErrAlreadyExists if the ID belongs to a different tenant.
	PutSandbox(ctx context.Context, s Sandbox) error
	// GetSandbox returns one record. With a non-empty tenantID a record of
	// another tenant is ErrNotFound; an empty tenantID matches any tenant
	// and is for the daemon's own use, never for a caller's request.
	GetSandbox(ctx context.Context, tenantID, id string) (Sandbox, error)
	// ListSandboxes returns the records f selects, oldest first.
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, error)
	// CountActiveSandboxes counts the tenant's records whose state is not
	// SandboxStopped.
	CountActiveSandboxes(ctx context.Context, tenantID string) (int, error)
}

// AuditStore keeps the rows of the hash-chained audit log. It stores what
// internal/audit computes and checks only that an append continues the
// stored chain; hashing and verification live in internal/audit.
type AuditStore interface {
	// AppendAudit inserts recs, which must have consecutive sequence
	// numbers, and moves the head anchor to the last of them, all in one
	// transaction that is durable when AppendAudit returns. The first
	// record must continue the current head (Seq = head.Seq+1 and
	// PrevHash = head.Hash), otherwise nothing is written and the error
	// wraps ErrFailedPrecondition.
	AppendAudit(ctx context.Context, recs []AuditRecord) error
	// AuditHead returns the head anchor: the sequence number and hash of
	// the last record appended, kept apart from the records so that a
	// deleted tail is detectable; {0, GenesisHash} for an empty log.
	AuditHead(ctx context.Context) (AuditHead, error)
	// ListAudit returns the records q selects, in ascending Seq order.
	ListAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error)
}

// SecretStore keeps the rows of internal/secrets. It never sees a
// secret's value, only the ciphertext internal/secrets sealed, which it
// stores and returns as opaque bytes; encryption, keys and the value
// caps live in internal/secrets.
type SecretStore interface {
	// PutSecret inserts r or replaces the tenant's secret of the same
	// name. The check of the count cap and the write are one atomic step:
	// a new name is ErrResourceExhausted when the tenant already has
	// maxPerTenant secrets (1-MaxSecretsPerTenant); replacing an existing
	// one always succeeds. An insert stores Version 1 and CreatedAt; a
	// replacement keeps CreatedAt and increments Version. It returns the
	// stored row without its ciphertext. ErrNotFound for an unknown or
	// deleted tenant.
	PutSecret(ctx context.Context, r SecretRecord, maxPerTenant int) (SecretRecord, error)
	// GetSecret returns the tenant's secret of this name, ciphertext
	// included, or ErrNotFound.
	GetSecret(ctx context.Context, tenantID, name string) (SecretRecord, error)
	// ListSecrets returns the tenant's secrets without their ciphertext,
	// ordered by name.
	ListSecrets(ctx context.Context, tenantID string) ([]SecretRecord, error)
	// DeleteSecret removes the tenant's secret of this name; ErrNotFound
	// if there is none.
	DeleteSecret(ctx context.Context, tenantID, name string) error
	// CountSecretsByKey counts the secrets of every tenant by the ID of
	// the key that sealed them, so that the daemon can tell whether a
	// key is still needed.
	CountSecretsByKey(ctx context.Context) (map[string]int, error)
}

// ToolStore keeps the tool gateway's tools and toolsets, each a
// ToolRecord: a tenant's name for it and the JSON document
// internal/gateway validated, which the store keeps as it is. The two
// kinds have their own names: a tool and a toolset may share one. A
// tenant has at most MaxToolsPerTenant tools and MaxToolsetsPerTenant
// toolsets; the check of the cap and the insert are one atomic step.
type ToolStore interface {
	// CreateTool inserts r: ErrAlreadyExists if the tenant has a tool
	// of that name, ErrResourceExhausted at the cap, ErrNotFound for an
	// unknown or deleted tenant.
	CreateTool(ctx context.Context, r ToolRecord) error
	// ReplaceTool replaces the document and UpdatedAt of the tenant's
	// tool r.Name, keeping its CreatedAt, and returns the stored record;
	// ErrNotFound if there is none.
	ReplaceTool(ctx context.Context, r ToolRecord) (ToolRecord, error)
	// GetTool returns the tenant's tool of this name or ErrNotFound.
	GetTool(ctx context.Context, tenantID, name string) (ToolRecord, error)
	// ListTools returns the tenant's tools, ordered by name.
	ListTools(ctx context.Context, tenantID string) ([]ToolRecord, error)
	// DeleteTool removes the tenant's tool of this name; ErrNotFound if
	// there is none.
	DeleteTool(ctx context.Context, tenantID, name string) error
	// CreateToolset, ReplaceToolset, GetToolset, ListToolsets and
	// DeleteToolset are the same for toolsets.
	CreateToolset(ctx context.Context, r ToolRecord) error
	ReplaceToolset(ctx context.Context, r ToolRecord) (ToolRecord, error)
	GetToolset(ctx context.Context, tenantID, name string) (ToolRecord, error)
	ListToolsets(ctx context.Context, tenantID string) ([]ToolRecord, error)
	DeleteToolset(ctx context.Context, tenantID, name string) error
}

// PolicyStore keeps each tenant's Cedar policy document for the tool
// gateway: at most one per tenant, the text as it was given (the API
// checks that it parses), at most MaxPolicyBytes.
type PolicyStore interface {
	// PutPolicy sets the tenant's policy text, replacing any, with its
	// update time; ErrNotFound for an unknown or deleted tenant,
	// ErrInvalidArgument for an empty or too large text.
	PutPolicy(ctx context.Context, tenantID, text string, updatedAt time.Time) error
	// GetPolicy returns the tenant's policy text and its update time, or
	// ErrNotFound if it has none.
	GetPolicy(ctx context.Context, tenantID string) (text string, updatedAt time.Time, err error)
	// DeletePolicy removes the tenant's policy; ErrNotFound if it has
	// none.
	DeletePolicy(ctx context.Context, tenantID string) error
}

// Caps on stored values.
const (
	MaxIDBytes           = 64
	MaxNameBytes         = 128
	MaxTemplateBytes     = 128
	MaxStateBytes        = 32
	MaxMetadataJSONBytes = 64 << 10
	MaxAuditFieldBytes   = 1024
	MaxAuditDetailsBytes = 64 << 10
	MaxListLimit         = 1000
	DefaultListLimit     = 100
	maxScopes            = 32
	hashHexLen           = 64
	maxQuota             = 1 << 20
	// MaxSecretNameBytes, MaxSecretDescriptionBytes, MaxSecretKeyIDBytes
	// and MaxSecretCiphertextBytes cap a SecretRecord: the ciphertext cap
	// leaves room for internal/secrets' 64 KiB values with their header,
	// nonce and tag.
	MaxSecretNameBytes        = 128
	MaxSecretDescriptionBytes = 1024
	MaxSecretKeyIDBytes       = 64
	MaxSecretCiphertextBytes  = 64<<10 + 1024
	// MaxSecretsPerTenant is the highest count cap PutSecret accepts, so
	// that ListSecrets stays bounded.
	MaxSecretsPerTenant = 1000
	// MaxToolsPerTenant and MaxToolsetsPerTenant cap a tenant's tools
	// and toolsets; MaxToolNameBytes a name of either, MaxToolDocBytes
	// the document of either (a tool's two schemas of up to 64 KiB, a
	// body template of 64 KiB, 32 header templates of 4 KiB and the
	// rest, with room for JSON escaping).
	MaxToolsPerTenant    = 1000
	MaxToolsetsPerTenant = 100
	MaxToolNameBytes     = 64
	MaxToolDocBytes      = 1 << 20
	// MaxPolicyBytes caps a tenant's Cedar policy text.
	MaxPolicyBytes = 256 << 10
)

// The range of times the store keeps: nanoseconds since 1970 fit an
// int64 until 2262.
var (
	minTime = time.Unix(0, 0)
	maxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// checkTime refuses a set time outside [minTime, maxTime).
func checkTime(what string, t time.Time) error {
	if !t.IsZero() && (t.Before(minTime) || !t.Before(maxTime)) {
		return fmt.Errorf("%s %s is outside 1970-2261: %w", what, t.UTC().Format(time.RFC3339), errdefs.ErrInvalidArgument)
	}
	return nil
}

// idPattern is what tenant, key and sandbox IDs look like.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func validID(what, id string) error {
	if id == "" || len(id) > MaxIDBytes || !idPattern.MatchString(id) {
		return fmt.Errorf("%s ID %q: must be 1-%d letters, digits, '.', '_' or '-': %w",
			what, Clip(id), MaxIDBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validText(what, s string, max int, required bool) error {
	switch {
	case required && s == "":
		return fmt.Errorf("%s is required: %w", what, errdefs.ErrInvalidArgument)
	case len(s) > max:
		return fmt.Errorf("%s is longer than %d bytes: %w", what, max, errdefs.ErrInvalidArgument)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return fmt.Errorf("%s is not valid UTF-8 text: %w", what, errdefs.ErrInvalidArgument)
	}
	return nil
}

// isHash reports whether h is a lowercase hex SHA-256 digest.
func isHash(h string) bool {
	if len(h) != hashHexLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Clip makes s, a value from a caller, safe and short for an error
// message: at most 32 bytes, non-printable runes replaced by '?'.
func Clip(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i >= 32 {
			b.WriteString("...")
			break
		}
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Tenant is an isolated customer of the daemon: keys and sandboxes belong
// to exactly one tenant.
type Tenant struct {
	ID        string
	Name      string
	CreatedAt time.Time
	// MaxSandboxes caps the tenant's active sandboxes; 0 means unlimited.
	MaxSandboxes int
	// DeletedAt is when the tenant was deleted (see DeleteTenant); zero
	// for a live tenant. CreateTenant and UpdateTenant ignore it.
	DeletedAt time.Time
}

// Validate reports a field the store refuses.
func (t Tenant) Validate() error {
	if err := validID("tenant", t.ID); err != nil {
		return err
	}
	if err := validText("tenant name", t.Name, MaxNameBytes, false); err != nil {
		return err
	}
	if err := checkTime("tenant creation time", t.CreatedAt); err != nil {
		return err
	}
	if t.MaxSandboxes < 0 || t.MaxSandboxes > maxQuota {
		return fmt.Errorf("tenant quota %d out of range 0-%d: %w", t.MaxSandboxes, maxQuota, errdefs.ErrInvalidArgument)
	}
	return nil
}

// APIKey is the stored part of an API key: everything but the secret.
type APIKey struct {
	ID       string
	TenantID string
	Name     string
	// Hash is the lowercase hex SHA-256 that internal/auth derives from
	// the key's secret.
	Hash string
	// Scopes are the permissions the key carries (internal/auth.Scope
	// values, kept as strings so this package does not depend on auth).
	Scopes     []string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero: never used
	RevokedAt  time.Time // zero: not revoked
	ExpiresAt  time.Time // zero: never expires
}

// Validate reports a field the store refuses.
func (k APIKey) Validate() error {
	if err := validID("key", k.ID); err != nil {
		return err
	}
	if err := validID("tenant", k.TenantID); err != nil {
		return err
	}
	if err := validText("key name", k.Name, MaxNameBytes, false); err != nil {
		return err
	}
	if !isHash(k.Hash) {
		return fmt.Errorf("key hash must be %d lowercase hex digits: %w", hashHexLen, errdefs.ErrInvalidArgument)
	}
	if err := ValidateScopes(k.Scopes); err != nil {
		return err
	}
	if k.CreatedAt.IsZero() {
		return fmt.Errorf("key creation time is required: %w", errdefs.ErrInvalidArgument)
	}
	for _, t := range []time.Time{k.CreatedAt, k.LastUsedAt, k.RevokedAt, k.ExpiresAt} {
		if err := checkTime("key time", t); err != nil {
			return err
		}
	}
	return nil
}

// ValidateScopes reports a scope list the store refuses: it needs 1-32
// scopes, each non-empty, at most 64 bytes, without blanks or commas.
func ValidateScopes(scopes []string) error {
	if len(scopes) == 0 || len(scopes) > maxScopes {
		return fmt.Errorf("a key needs 1-%d scopes: %w", maxScopes, errdefs.ErrInvalidArgument)
	}
	for _, s := range scopes {
		if s == "" || len(s) > 64 || strings.ContainsAny(s, ", \t\r\n") || !utf8.ValidString(s) {
			return fmt.Errorf("scope %q is malformed: %w", Clip(s), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// SandboxStopped is the state of a sandbox that no longer exists; every
// other state counts as active against the tenant's quota.
const SandboxStopped = "stopped"

// Sandbox is the API's record of one sandbox. State is one of the
// lifecycle states of internal/sandbox, kept as a string.
type Sandbox struct {
	ID        string
	TenantID  string
	Template  string
	State     string
	CreatedAt time.Time
	StoppedAt time.Time // zero while active
	Metadata  map[string]string
}

// Validate reports a field the store refuses.
func (s Sandbox) Validate() error {
	if err := validID("sandbox", s.ID); err != nil {
		return err
	}
	if err := validID("tenant", s.TenantID); err != nil {
		return err
	}
	if err := validText("template", s.Template, MaxTemplateBytes, false); err != nil {
		return err
	}
	if err := validState(s.State); err != nil {
		return err
	}
	if s.CreatedAt.IsZero() {
		return fmt.Errorf("sandbox creation time is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkTime("sandbox creation time", s.CreatedAt); err != nil {
		return err
	}
	if err := checkTime("sandbox stop time", s.StoppedAt); err != nil {
		return err
	}
	if _, err := encodeMetadata(s.Metadata); err != nil {
		return err
	}
	return nil
}

func validState(st string) error {
	if st == "" || len(st) > MaxStateBytes || strings.Trim(st, "abcdefghijklmnopqrstuvwxyz_") != "" {
		return fmt.Errorf("sandbox state %q is malformed: %w", Clip(st), errdefs.ErrInvalidArgument)
	}
	return nil
}

// EncodeMetadata returns the JSON text under which implementations store
// a sandbox's metadata ("" for none), or ErrInvalidArgument if it is
// larger than MaxMetadataJSONBytes or not valid UTF-8.
func EncodeMetadata(m map[string]string) (string, error) { return encodeMetadata(m) }

func encodeMetadata(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "", nil
	}
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return "", fmt.Errorf("sandbox metadata is not valid UTF-8: %w", errdefs.ErrInvalidArgument)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("sandbox metadata: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(b) > MaxMetadataJSONBytes {
		return "", fmt.Errorf("sandbox metadata is larger than %d bytes: %w", MaxMetadataJSONBytes, errdefs.ErrInvalidArgument)
	}
	return string(b), nil
}

// SandboxFilter selects sandbox records. Empty fields match everything.
type SandboxFilter struct {
	// TenantID keeps one tenant's records. Empty means every tenant and
	// is for the daemon's own use only.
	TenantID string
	// States keeps records in one of these states.
	States []string
	// Limit caps the records returned: DefaultListLimit if 0, at most
	// MaxListLimit.
	Limit int
}

// Validate reports a field the store refuses.
func (f SandboxFilter) Validate() error {
	if f.TenantID != "" {
		if err := validID("tenant", f.TenantID); err != nil {
			return err
		}
	}
	if len(f.States) > 16 {
		return fmt.Errorf("at most 16 states per filter: %w", errdefs.ErrInvalidArgument)
	}
	for _, s := range f.States {
		if err := validState(s); err != nil {
			return err
		}
	}
	return validLimit(f.Limit)
}

func validLimit(n int) error {
	if n < 0 || n > MaxListLimit {
		return fmt.Errorf("limit %d out of range 0-%d: %w", n, MaxListLimit, errdefs.ErrInvalidArgument)
	}
	return nil
}

// EffectiveLimit is the number of rows a query with limit n returns at
// most.
func EffectiveLimit(n int) int {
	if n <= 0 {
		return DefaultListLimit
	}
	return min(n, MaxListLimit)
}

// AuditRecord is one stored audit log row; see internal/audit for how
// PrevHash and Hash are computed.
type AuditRecord struct {
	// Seq numbers records from 1 without gaps.
	Seq      uint64
	Time     time.Time
	TenantID string
	KeyID    string
	Action   string
	Target   string
	Outcome  string
	// Details is compact JSON, or empty.
	Details []byte
	// PrevHash and Hash are lowercase hex SHA-256 digests.
	PrevHash string
	Hash     string
}

// Validate reports a field the store refuses.
func (r AuditRecord) Validate() error {
	if r.Seq == 0 || r.Seq > 1<<62 {
		return fmt.Errorf("audit seq %d out of range: %w", r.Seq, errdefs.ErrInvalidArgument)
	}
	if r.Time.IsZero() {
		return fmt.Errorf("audit record time is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkTime("audit record time", r.Time); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    string
	}{{"audit tenant", r.TenantID}, {"audit key", r.KeyID}, {"audit action", r.Action}, {"audit target", r.Target}, {"audit outcome", r.Outcome}} {
		if err := validText(f.name, f.v, MaxAuditFieldBytes, f.name == "audit action"); err != nil {
			return err
		}
	}
	if len(r.Details) > MaxAuditDetailsBytes {
		return fmt.Errorf("audit details larger than %d bytes: %w", MaxAuditDetailsBytes, errdefs.ErrInvalidArgument)
	}
	if len(r.Details) > 0 && !json.Valid(r.Details) {
		return fmt.Errorf("audit details are not JSON: %w", errdefs.ErrInvalidArgument)
	}
	for _, h := range []string{r.PrevHash, r.Hash} {
		if !isHash(h) {
			return fmt.Errorf("audit hash must be %d lowercase hex digits: %w", hashHexLen, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// ValidateAuditBatch checks that recs are valid and consecutive.
func ValidateAuditBatch(recs []AuditRecord) error {
	if len(recs) == 0 {
		return fmt.Errorf("empty audit batch: %w", errdefs.ErrInvalidArgument)
	}
	for i, r := range recs {
		if err := r.Validate(); err != nil {
			return err
		}
		if i > 0 && (r.Seq != recs[i-1].Seq+1 || r.PrevHash != recs[i-1].Hash) {
			return fmt.Errorf("audit batch is not a chain at seq %d: %w", r.Seq, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// GenesisHash is the PrevHash of the first audit record (Seq 1) and the
// Hash of the head of an empty log: 64 zeros.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// AuditHead is the anchor of the audit chain: the last record's Seq and
// Hash; {0, GenesisHash} for an empty log.
type AuditHead struct {
	Seq  uint64
	Hash string
}

// AuditQuery selects audit records. Empty fields match everything.
type AuditQuery struct {
	// TenantID keeps one tenant's records; empty means every tenant.
	TenantID string
	// Action and Target keep records with exactly this value.
	Action string
	Target string
	// Since keeps records with Time >= Since, Until those with
	// Time < Until.
	Since, Until time.Time
	// AfterSeq keeps records with Seq > AfterSeq: pass the last Seq of a
	// page to get the next one.
	AfterSeq uint64
	// Limit caps the records returned: DefaultListLimit if 0, at most
	// MaxListLimit.
	Limit int
}

// Validate reports a field the store refuses.
func (q AuditQuery) Validate() error {
	for _, f := range []struct{ name, v string }{{"audit query tenant", q.TenantID}, {"audit query action", q.Action}, {"audit query target", q.Target}} {
		if err := validText(f.name, f.v, MaxAuditFieldBytes, false); err != nil {
			return err
		}
	}
	if err := checkTime("audit query start", q.Since); err != nil {
		return err
	}
	if err := checkTime("audit query end", q.Until); err != nil {
		return err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return fmt.Errorf("audit query ends before it starts: %w", errdefs.ErrInvalidArgument)
	}
	if q.AfterSeq > 1<<62 {
		return fmt.Errorf("audit query seq out of range: %w", errdefs.ErrInvalidArgument)
	}
	return validLimit(q.Limit)
}

// NormalizeScopes returns scopes sorted and without duplicates.
func NormalizeScopes(scopes []string) []string {
	out := slices.Clone(scopes)
	slices.Sort(out)
	return slices.Compact(out)
}

// secretNamePattern is what a secret's name looks like: an identifier
// that can also name an environment variable or a header template's
// reference.
var secretNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// ValidateSecretName reports a secret name the store refuses: it must be
// 1-128 bytes, start with a letter or '_' and go on with letters, digits,
// '_', '.' or '-'.
func ValidateSecretName(name string) error {
	if name == "" || len(name) > MaxSecretNameBytes || !secretNamePattern.MatchString(name) {
		return fmt.Errorf("secret name %q: must be 1-%d letters, digits, '_', '.' or '-', starting with a letter or '_': %w",
			Clip(name), MaxSecretNameBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// SecretRecord is one stored secret: its metadata and the ciphertext that
// internal/secrets sealed (the value never reaches the store).
type SecretRecord struct {
	TenantID    string
	Name        string
	Description string
	// KeyID names the key that sealed Ciphertext.
	KeyID string
	// Ciphertext is opaque to the store; nil in what ListSecrets and
	// PutSecret return.
	Ciphertext []byte
	// Version is 1 for a new secret and grows by one at each
	// replacement; PutSecret sets it.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Validate reports a field the store refuses.
func (r SecretRecord) Validate() error {
	if err := validID("tenant", r.TenantID); err != nil {
		return err
	}
	if err := ValidateSecretName(r.Name); err != nil {
		return err
	}
	if err := validText("secret description", r.Description, MaxSecretDescriptionBytes, false); err != nil {
		return err
	}
	if r.KeyID == "" || len(r.KeyID) > MaxSecretKeyIDBytes || !idPattern.MatchString(r.KeyID) {
		return fmt.Errorf("secret key ID %q is malformed: %w", Clip(r.KeyID), errdefs.ErrInvalidArgument)
	}
	if len(r.Ciphertext) == 0 || len(r.Ciphertext) > MaxSecretCiphertextBytes {
		return fmt.Errorf("secret ciphertext must be 1-%d bytes: %w", MaxSecretCiphertextBytes, errdefs.ErrInvalidArgument)
	}
	if r.CreatedAt.IsZero() || r.UpdatedAt.IsZero() {
		return fmt.Errorf("secret creation and update times are required: %w", errdefs.ErrInvalidArgument)
	}
	for _, t := range []time.Time{r.CreatedAt, r.UpdatedAt} {
		if err := checkTime("secret time", t); err != nil {
			return err
		}
	}
	return nil
}

// ValidateSecretCap reports a count cap PutSecret refuses.
func ValidateSecretCap(maxPerTenant int) error {
	if maxPerTenant < 1 || maxPerTenant > MaxSecretsPerTenant {
		return fmt.Errorf("secret count cap %d out of range 1-%d: %w", maxPerTenant, MaxSecretsPerTenant, errdefs.ErrInvalidArgument)
	}
	return nil
}

// toolNamePattern is what a tool's or toolset's name looks like to the
// store; internal/gateway's rules (ValidName) are stricter.
var toolNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// ToolRecord is one stored tool or toolset: its tenant, its name and its
// JSON document, opaque to the store but for being a JSON object.
type ToolRecord struct {
	TenantID string
	Name     string
	Doc      json.RawMessage
	// CreatedAt is set when the record is created and kept by a
	// replacement; UpdatedAt is set by each.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Validate reports a field the store refuses.
func (r ToolRecord) Validate() error {
	if err := validID("tenant", r.TenantID); err != nil {
		return err
	}
	if len(r.Name) > MaxToolNameBytes || !toolNamePattern.MatchString(r.Name) {
		return fmt.Errorf("tool name %q: must be 1-%d lower-case letters, digits or '_', starting with a letter: %w",
			Clip(r.Name), MaxToolNameBytes, errdefs.ErrInvalidArgument)
	}
	if len(r.Doc) > MaxToolDocBytes {
		return fmt.Errorf("tool document is larger than %d bytes: %w", MaxToolDocBytes, errdefs.ErrInvalidArgument)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(r.Doc, &obj) != nil || obj == nil {
		return fmt.Errorf("tool document is not a JSON object: %w", errdefs.ErrInvalidArgument)
	}
	if r.CreatedAt.IsZero() || r.UpdatedAt.IsZero() {
		return fmt.Errorf("tool creation and update times are required: %w", errdefs.ErrInvalidArgument)
	}
	for _, t := range []time.Time{r.CreatedAt, r.UpdatedAt} {
		if err := checkTime("tool time", t); err != nil {
			return err
		}
	}
	return nil
}

// ValidatePolicy reports a policy the store refuses: an invalid tenant
// ID, an empty text, one larger than MaxPolicyBytes or not UTF-8, or an
// update time out of range.
func ValidatePolicy(tenantID, text string, updatedAt time.Time) error {
	if err := validID("tenant", tenantID); err != nil {
		return err
	}
	switch {
	case text == "":
		return fmt.Errorf("policy text is empty (delete the policy instead): %w", errdefs.ErrInvalidArgument)
	case len(text) > MaxPolicyBytes:
		return fmt.Errorf("policy text is %d bytes, more than the %d allowed: %w", len(text), MaxPolicyBytes, errdefs.ErrInvalidArgument)
	case !utf8.ValidString(text) || strings.ContainsRune(text, 0):
		return fmt.Errorf("policy text is not UTF-8 text: %w", errdefs.ErrInvalidArgument)
	case updatedAt.IsZero():
		return fmt.Errorf("policy update time is required: %w", errdefs.ErrInvalidArgument)
	}
	return checkTime("policy update time", updatedAt)
}
