package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// An API key is the string
//
//	al_<key id>_<secret>
//
// where the key ID is 12 and the secret 52 characters of the lowercase
// base32 alphabet "a-z2-7" (RFC 4648 without padding): 60 random bits
// that name the key, and 260 that prove it. The ID is not secret (it is
// shown in listings and the audit log); the secret is shown once, at
// creation, and only its hash is stored.
const (
	tokenPrefix  = "al_"
	keyIDLen     = 12
	secretLen    = 52
	tokenLen     = len(tokenPrefix) + keyIDLen + 1 + secretLen
	tokenAlpha   = "abcdefghijklmnopqrstuvwxyz234567"
	secretDomain = "airlock-api-key-v1\x00"
)

// TokenLen is the length of every API key string.
const TokenLen = tokenLen

// newToken returns a fresh key ID and the full key string.
func newToken() (id, token string, err error) {
	var b [keyIDLen + secretLen]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("api key: random: %v: %w", err, errdefs.ErrInternal)
	}
	for i := range b {
		b[i] = tokenAlpha[b[i]&31] // 32 divides 256: no bias
	}
	id = string(b[:keyIDLen])
	return id, tokenPrefix + id + "_" + string(b[keyIDLen:]), nil
}

// ParseToken splits an API key into its key ID and secret. It reports
// false for anything that is not exactly a well-formed key; it does not
// say what is wrong, so as not to help guessing.
func ParseToken(token string) (id, secret string, ok bool) {
	if len(token) != tokenLen || !strings.HasPrefix(token, tokenPrefix) || token[len(tokenPrefix)+keyIDLen] != '_' {
		return "", "", false
	}
	id = token[len(tokenPrefix) : len(tokenPrefix)+keyIDLen]
	secret = token[len(tokenPrefix)+keyIDLen+1:]
	if !inAlphabet(id) || !inAlphabet(secret) {
		return "", "", false
	}
	return id, secret, true
}

// validKeyID reports whether id could be a key ID.
func validKeyID(id string) bool { return len(id) == keyIDLen && inAlphabet(id) }

func inAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// hashSecret is the stored form of a key's secret: hex SHA-256 over a
// domain tag, the key ID and the secret. A fast hash is right here: the
// secret has 260 random bits, so there is nothing to brute-force, and
// binding the ID means a hash copied to another key's row does not verify.
func hashSecret(id, secret string) string {
	h := sha256.New()
	h.Write([]byte(secretDomain))
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(secret))
	return hex.EncodeToString(h.Sum(nil))
}

// secretMatches compares in constant time.
func secretMatches(id, secret, stored string) bool {
	return subtle.ConstantTimeCompare([]byte(hashSecret(id, secret)), []byte(stored)) == 1
}
