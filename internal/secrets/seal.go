package secrets

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The sealed form of a value, stored as a row's ciphertext:
//
//	format (1 byte, 1) | nonce (12 bytes, random per write) | AES-256-GCM ciphertext and tag
//
// The additional data binds the ciphertext to its place: format, tenant
// ID, secret name and key ID, each prefixed by its length. A ciphertext
// copied to another name, another tenant or a row claiming another key
// does not open.
const (
	formatV1  = 1
	nonceSize = 12
	tagSize   = 16
	// overhead is what sealing adds to a value.
	overhead = 1 + nonceSize + tagSize
)

// additionalData returns the bytes a ciphertext is bound to.
func additionalData(tenantID, name, keyID string) []byte {
	ad := make([]byte, 0, 32+len(tenantID)+len(name)+len(keyID))
	ad = append(ad, "airlock secret\x00"...)
	ad = append(ad, formatV1)
	for _, s := range []string{tenantID, name, keyID} {
		ad = binary.BigEndian.AppendUint32(ad, uint32(len(s)))
		ad = append(ad, s...)
	}
	return ad
}

// seal encrypts plain under k for the secret tenantID/name. It does not
// modify plain.
func seal(k *Key, tenantID, name string, plain []byte) ([]byte, error) {
	out := make([]byte, 1+nonceSize, overhead+len(plain))
	out[0] = formatV1
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("seal secret: %v: %w", err, errdefs.ErrInternal)
	}
	return k.aead.Seal(out, out[1:1+nonceSize], plain, additionalData(tenantID, name, k.id)), nil
}

// open decrypts a sealed value of the secret tenantID/name with k, the
// key whose ID the row records. A ciphertext that does not authenticate
// (tampered, moved from another row, or sealed by another key with the
// same recorded ID) is ErrFailedPrecondition and never yields bytes.
func open(k *Key, tenantID, name string, sealed []byte) ([]byte, error) {
	if len(sealed) < overhead || sealed[0] != formatV1 {
		return nil, fmt.Errorf("secret %s: stored ciphertext is malformed: %w", name, errdefs.ErrFailedPrecondition)
	}
	plain, err := k.aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], additionalData(tenantID, name, k.id))
	if err != nil {
		return nil, fmt.Errorf("secret %s: stored ciphertext does not authenticate with key %s (tampered, or moved from another secret): %w",
			name, k.id, errdefs.ErrFailedPrecondition)
	}
	return plain, nil
}
