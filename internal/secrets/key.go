package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/fsutil"
)

// KeyEnv is the environment variable that holds the key, base64 of
// KeySize bytes. When it is set the key file is neither read nor created.
const KeyEnv = "AIRLOCK_SECRETS_KEY"

// KeyFile is the key file's name in the daemon's data directory.
const KeyFile = "secrets.key"

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// keyFileMode is the mode LoadKey creates the key file with; a file whose
// mode grants anything to the group or to others is refused.
const keyFileMode = 0o600

// maxKeyFileBytes caps what LoadKey reads from the key file.
const maxKeyFileBytes = 1024

// Key is an AES-256 key that seals and opens secrets, and its ID, which
// every row it seals records. The ID is derived from the key (a truncated
// SHA-256 under a fixed label), so the same key has the same ID whether
// it came from the file or the environment, and a row sealed by another
// key is told apart before any decryption is tried. A Key does not keep
// the raw key bytes, only the expanded AES cipher.
type Key struct {
	id   string
	aead cipher.AEAD
}

// NewKey returns the Key for raw, which must be KeySize bytes. It zeroes
// raw.
func NewKey(raw []byte) (*Key, error) {
	defer clear(raw)
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets key must be %d bytes, not %d: %w", KeySize, len(raw), errdefs.ErrInvalidArgument)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %v: %w", err, errdefs.ErrInternal)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %v: %w", err, errdefs.ErrInternal)
	}
	h := sha256.New()
	h.Write([]byte("airlock secrets key id v1\x00"))
	h.Write(raw)
	return &Key{id: "k1-" + hex.EncodeToString(h.Sum(nil)[:8]), aead: aead}, nil
}

// ParseKey returns the Key for text, the base64 (standard or URL
// alphabet, padded or not, surrounding blanks ignored) of KeySize bytes.
// Errors never include text.
func ParseKey(text []byte) (*Key, error) {
	text = bytes.TrimSpace(text)
	var raw []byte
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b := make([]byte, enc.DecodedLen(len(text)))
		n, err := enc.Decode(b, text)
		if err == nil {
			raw = b[:n]
			break
		}
		clear(b)
	}
	if raw == nil {
		return nil, fmt.Errorf("secrets key is not base64: %w", errdefs.ErrInvalidArgument)
	}
	if len(raw) != KeySize {
		clear(raw)
		return nil, fmt.Errorf("secrets key must be the base64 of %d bytes, not %d: %w", KeySize, len(raw), errdefs.ErrInvalidArgument)
	}
	return NewKey(raw)
}

// GenerateKey returns a new random key and its base64 text; the caller
// should clear the text once it is stored.
func GenerateKey() (*Key, []byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, nil, fmt.Errorf("secrets key: %v: %w", err, errdefs.ErrInternal)
	}
	text := make([]byte, base64.StdEncoding.EncodedLen(KeySize), base64.StdEncoding.EncodedLen(KeySize)+1)
	base64.StdEncoding.Encode(text, raw)
	k, err := NewKey(raw)
	if err != nil {
		clear(text)
		return nil, nil, err
	}
	return k, append(text, '\n'), nil
}

// ID is the key's ID, recorded with every row it seals.
func (k *Key) ID() string { return k.id }

// String shows the ID only.
func (k *Key) String() string { return "secrets key " + k.id }

// LoadKey returns the daemon's key. With env (the value of KeyEnv)
// non-empty it parses env and does not touch the file. Otherwise it
// reads the key file at path, which must be a regular file (not a
// symbolic link) owned by the daemon's effective user (root for
// `airlock serve`) with no permission for the group or others; it
// creates the file, mode 0600, with a new random key when there is none
// (created is then true). A refused file is ErrFailedPrecondition, with a
// message that says how to fix it; no error includes key material.
func LoadKey(path, env string) (k *Key, created bool, err error) {
	if env != "" {
		b := []byte(env)
		defer clear(b)
		k, err := ParseKey(b)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", KeyEnv, err)
		}
		return k, false, nil
	}
	k, err = readKeyFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return k, false, err
	}
	k, text, err := GenerateKey()
	if err != nil {
		return nil, false, err
	}
	defer clear(text)
	if err := fsutil.WriteNew(path, text, keyFileMode); err != nil {
		if errors.Is(err, os.ErrExist) { // created meanwhile
			k, err = readKeyFile(path)
			return k, false, err
		}
		return nil, false, fmt.Errorf("create secrets key file %s: %v: %w", path, err, errdefs.ErrFailedPrecondition)
	}
	return k, true, nil
}

// readKeyFile reads and checks the key file; the error wraps
// os.ErrNotExist when there is none.
func readKeyFile(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("secrets key file %s is a symbolic link; replace it with the file itself: %w", path, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key file %s is not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s has mode %04o, which lets other users read or change it; "+
			"if nobody else could have read it, chmod 600 it, otherwise replace the key: %w", path, perm, errdefs.ErrFailedPrecondition)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("secrets key file %s: cannot read its owner: %w", path, errdefs.ErrFailedPrecondition)
	}
	if euid := os.Geteuid(); st.Uid != uint32(euid) {
		return nil, fmt.Errorf("secrets key file %s is owned by uid %d, not by uid %d that runs the daemon: %w", path, st.Uid, euid, errdefs.ErrFailedPrecondition)
	}
	text, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	defer clear(text)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	if len(text) > maxKeyFileBytes {
		return nil, fmt.Errorf("secrets key file %s is larger than %d bytes: %w", path, maxKeyFileBytes, errdefs.ErrFailedPrecondition)
	}
	k, err := ParseKey(text)
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %v: %w", path, err, errdefs.ErrFailedPrecondition)
	}
	return k, nil
}
