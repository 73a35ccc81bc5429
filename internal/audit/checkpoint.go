package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/fsutil"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Checkpoint is a signed statement by a daemon that its audit chain ended
// at Seq, with the record Hash, at Time. Kept where the daemon's host
// cannot change it, a checkpoint lets Verify catch what the chain alone
// cannot: a log truncated (its head anchor moved back), wiped, or
// rewritten with recomputed hashes. See "Checkpoints" in the package
// documentation for the signed message.
type Checkpoint struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Time is when the daemon signed it, UTC, whole seconds.
	Time time.Time `json:"time"`
	// KeyID names the signing key: the first 16 hex digits of the
	// SHA-256 of its 32-byte ed25519 public key.
	KeyID string `json:"key_id"`
	// Signature is the ed25519 signature of Message, base64 (standard
	// alphabet, padded).
	Signature string `json:"signature"`
}

// checkpointDomain starts every signed checkpoint message; it names the
// format version.
const checkpointDomain = "airlock-audit-checkpoint-v1"

// Formats of checkpoint fields.
var (
	hexHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	keyIDRE   = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// Head returns the chain anchor the checkpoint vouches for.
func (c Checkpoint) Head() store.AuditHead { return store.AuditHead{Seq: c.Seq, Hash: c.Hash} }

// Signed reports whether c carries a signature (or claims a key). An
// unsigned checkpoint is a bare Seq and Hash the caller saved itself.
func (c Checkpoint) Signed() bool { return c.Signature != "" || c.KeyID != "" || !c.Time.IsZero() }

// String names the checkpoint in reports: its seq, hash prefix and, when
// signed, its time and key.
func (c Checkpoint) String() string {
	if !c.Signed() {
		return fmt.Sprintf("checkpoint seq %d (hash %s)", c.Seq, short(c.Hash))
	}
	return fmt.Sprintf("checkpoint seq %d (hash %s, signed %s by key %s)", c.Seq, short(c.Hash), c.Time.UTC().Format(time.RFC3339), c.KeyID)
}

// Message returns the bytes the signature covers:
//
//	airlock-audit-checkpoint-v1\n
//	seq <Seq in decimal>\n
//	hash <Hash>\n
//	time <Time, RFC 3339 UTC, e.g. 2026-01-02T15:04:05Z>\n
//	key <KeyID>\n
func (c Checkpoint) Message() []byte {
	return fmt.Appendf(nil, "%s\nseq %d\nhash %s\ntime %s\nkey %s\n",
		checkpointDomain, c.Seq, c.Hash, c.Time.UTC().Format(time.RFC3339), c.KeyID)
}

// Validate checks the checkpoint's fields (not its signature): a seq up to
// MaxSeq, a 64-digit lowercase hex hash, a time in whole seconds from 1970
// to 9999, a key ID and a 64-byte signature.
func (c Checkpoint) Validate() error {
	if err := c.validateFields(); err != nil {
		return err
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("audit checkpoint (seq %d): signature must be a base64 ed25519 signature: %w", c.Seq, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validateFields is Validate but for the signature.
func (c Checkpoint) validateFields() error {
	bad := func(what string) error {
		return fmt.Errorf("audit checkpoint (seq %d): %s: %w", c.Seq, what, errdefs.ErrInvalidArgument)
	}
	switch {
	case c.Seq > MaxSeq:
		return bad("seq out of range")
	case !hexHashRE.MatchString(c.Hash):
		return bad("hash must be 64 lowercase hex digits")
	case c.Seq == 0 && c.Hash != store.GenesisHash:
		return bad("seq 0 has the genesis hash")
	case c.Time.Before(time.Unix(0, 0)) || c.Time.Year() > 9999 || c.Time.Nanosecond() != 0:
		return bad("time must be whole seconds from 1970 to 9999")
	case !keyIDRE.MatchString(c.KeyID):
		return bad("key_id must be 16 lowercase hex digits")
	}
	return nil
}

// PublicKey verifies checkpoints. The zero value verifies nothing.
type PublicKey struct {
	key ed25519.PublicKey
	id  string
}

func newPublicKey(k ed25519.PublicKey) PublicKey {
	sum := sha256.Sum256(k)
	return PublicKey{key: k, id: hex.EncodeToString(sum[:8])}
}

// ID is the key's ID, as checkpoints name it.
func (p PublicKey) ID() string { return p.id }

// PEM returns the key as a PEM "PUBLIC KEY" block (PKIX), the form
// `openssl pkey -pubin` reads.
func (p PublicKey) PEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(p.key)
	if err != nil { // only for a key of a type x509 does not know
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// maxKeyFileBytes caps a key file or PEM text.
const maxKeyFileBytes = 64 << 10

// ParsePublicKey reads an ed25519 public key from a PEM "PUBLIC KEY" block.
func ParsePublicKey(text []byte) (PublicKey, error) {
	if len(text) > maxKeyFileBytes {
		return PublicKey{}, fmt.Errorf("audit public key larger than %d bytes: %w", maxKeyFileBytes, errdefs.ErrInvalidArgument)
	}
	b, _ := pem.Decode(text)
	if b == nil || b.Type != "PUBLIC KEY" {
		return PublicKey{}, fmt.Errorf("audit public key: want a PEM PUBLIC KEY block: %w", errdefs.ErrInvalidArgument)
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return PublicKey{}, fmt.Errorf("audit public key: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return PublicKey{}, fmt.Errorf("audit public key: not an ed25519 key: %w", errdefs.ErrInvalidArgument)
	}
	return newPublicKey(ek), nil
}

// Verify checks that c is well formed and signed by this key. A
// checkpoint of another key, or whose signature does not match its fields
// (a forgery or an edit), fails with ErrInvalidArgument naming it.
func (p PublicKey) Verify(c Checkpoint) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if p.key == nil {
		return fmt.Errorf("%s: no key to verify it with: %w", c, errdefs.ErrFailedPrecondition)
	}
	if c.KeyID != p.id {
		return fmt.Errorf("%s: signed by key %s, not by this daemon's key %s: %w", c, c.KeyID, p.id, errdefs.ErrInvalidArgument)
	}
	sig, _ := base64.StdEncoding.DecodeString(c.Signature)
	if !ed25519.Verify(p.key, c.Message(), sig) {
		return fmt.Errorf("%s: the signature does not match (forged or edited): %w", c, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Signer signs checkpoints with a daemon's ed25519 key.
type Signer struct {
	key ed25519.PrivateKey
	pub PublicKey
	now func() time.Time
}

// NewSigner returns a Signer over key; now is its clock (nil: time.Now).
func NewSigner(key ed25519.PrivateKey, now func() time.Time) *Signer {
	if now == nil {
		now = time.Now
	}
	return &Signer{key: key, pub: newPublicKey(key.Public().(ed25519.PublicKey)), now: now}
}

// Public returns the key that verifies this Signer's checkpoints.
func (s *Signer) Public() PublicKey { return s.pub }

// Sign returns a checkpoint of head, timed now (to the second).
func (s *Signer) Sign(head store.AuditHead) (Checkpoint, error) {
	c := Checkpoint{Seq: head.Seq, Hash: head.Hash, Time: s.now().UTC().Truncate(time.Second), KeyID: s.pub.id}
	if err := c.validateFields(); err != nil {
		return Checkpoint{}, err
	}
	c.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(s.key, c.Message()))
	return c, nil
}

// keyFileMode is the mode of a signing key file.
const keyFileMode = 0o600

// LoadSigner reads the signing key at path, a PEM "PRIVATE KEY" block
// (PKCS #8, ed25519), or creates one there, mode 0600, if the file does
// not exist (created reports that). An existing key file readable by
// group or others is made 0600. The directory must exist.
func LoadSigner(path string) (s *Signer, created bool, err error) {
	s, err = readSigner(path)
	if !errors.Is(err, os.ErrNotExist) {
		return s, false, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("audit signing key: %v: %w", err, errdefs.ErrInternal)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("audit signing key: %v: %w", err, errdefs.ErrInternal)
	}
	if err := fsutil.WriteNew(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), keyFileMode); err != nil {
		if errors.Is(err, os.ErrExist) { // created meanwhile
			s, err = readSigner(path)
			return s, false, err
		}
		return nil, false, fmt.Errorf("audit signing key: %v: %w", err, errdefs.ErrInternal)
	}
	return NewSigner(key, nil), true, nil
}

// readSigner reads the key file at path; the error wraps os.ErrNotExist
// when there is none.
func readSigner(path string) (*Signer, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("audit signing key %s is not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if fi.Mode().Perm() != keyFileMode {
		if err := f.Chmod(keyFileMode); err != nil {
			return nil, fmt.Errorf("audit signing key: %v: %w", err, errdefs.ErrFailedPrecondition)
		}
	}
	text, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	b, _ := pem.Decode(text)
	if len(text) > maxKeyFileBytes || b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("audit signing key %s: want a PEM PRIVATE KEY block: %w", path, errdefs.ErrFailedPrecondition)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit signing key %s: %v: %w", path, err, errdefs.ErrFailedPrecondition)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit signing key %s: not an ed25519 key: %w", path, errdefs.ErrFailedPrecondition)
	}
	return NewSigner(key, nil), nil
}

// AppendCheckpoint appends c as one JSON line to the file at path,
// creating it with mode 0600 (an existing file is made 0600), and syncs
// it. The file is opened for each call, so an operator may rotate it
// (rename it away) at any time.
func AppendCheckpoint(path string, c Checkpoint) error {
	line, err := marshalCompact(c)
	if err != nil {
		return fmt.Errorf("audit checkpoint: %v: %w", err, errdefs.ErrInternal)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, keyFileMode)
	if err != nil {
		return fmt.Errorf("audit checkpoint file: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("audit checkpoint file %s is not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if fi.Mode().Perm() != keyFileMode {
		if err := f.Chmod(keyFileMode); err != nil {
			return fmt.Errorf("audit checkpoint file: %v: %w", err, errdefs.ErrFailedPrecondition)
		}
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("audit checkpoint file: %v: %w", err, errdefs.ErrInternal)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("audit checkpoint file: %v: %w", err, errdefs.ErrInternal)
	}
	return f.Close()
}

// MaxCheckpointLine caps one line of a checkpoint file.
const MaxCheckpointLine = 4 << 10

// ReadCheckpoints reads checkpoints, one JSON object per line (blank lines
// skipped), as AppendCheckpoint writes them; at most max of them. Fields
// are validated, signatures are not (see PublicKey.Verify).
func ReadCheckpoints(r io.Reader, max int) ([]Checkpoint, error) {
	var out []Checkpoint
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1024), MaxCheckpointLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if len(out) == max {
			return nil, fmt.Errorf("audit checkpoints: more than %d: %w", max, errdefs.ErrInvalidArgument)
		}
		var c Checkpoint
		if err := decodeStrict(line, &c); err != nil {
			return nil, fmt.Errorf("audit checkpoints: line %d: %v: %w", n, err, errdefs.ErrInvalidArgument)
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("audit checkpoints: line %d: %w", n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit checkpoints: %v (lines are at most %d bytes): %w", err, MaxCheckpointLine, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// decodeStrict decodes one JSON object into v: unknown fields and
// trailing data are errors.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
