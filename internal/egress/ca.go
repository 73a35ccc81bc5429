package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/fsutil"
)

// The CA's files in its directory (LoadCA).
const (
	// CACertFile is the CA certificate, PEM, 0644: public.
	CACertFile = "ca.pem"
	// CAKeyFile is the CA's private key, PEM (PKCS #8), 0600: only the
	// daemon's user may read it; LoadCA refuses it otherwise.
	CAKeyFile = "ca-key.pem"
)

// Validity of the certificates.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
	// leafRenewBefore: a cached leaf this close to its end is minted
	// again.
	leafRenewBefore = 24 * time.Hour
	// clockSkew back-dates NotBefore, for a sandbox clock a little behind.
	clockSkew = time.Hour
	// MaxLeafCache bounds the leaf certificates a CA keeps; the oldest
	// minted goes first.
	MaxLeafCache = 1024
)

// CA is the daemon's egress certificate authority: the proxy presents a
// leaf certificate it mints for a destination's name when it terminates
// TLS to add a credential (see Interception). Sandboxes trust its
// certificate; its key never leaves the daemon. A CA is safe for
// concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	// leafKey is the one key of every leaf this CA mints in this
	// process: minting then costs a signature, not a key generation.
	leafKey *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
	order  []string // names in leaves, oldest minted first
}

// NewCA makes a fresh CA held in memory only (tests; LoadCA persists
// one).
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA: key: %w", err)
	}
	now := time.Now()
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Airlock egress CA", Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: certificate: %w", err)
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA: certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("egress CA: the certificate is not a CA's: %w", errdefs.ErrInvalidArgument)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("egress CA: the key does not match the certificate: %w", errdefs.ErrInvalidArgument)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA: leaf key: %w", err)
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		leafKey: leafKey,
		now:     time.Now,
		leaves:  map[string]*tls.Certificate{},
	}, nil
}

// LoadCA loads the CA kept in dir, or, when dir holds neither of its
// files, makes one and writes them (the directory is made 0700 if
// missing). It refuses, as ErrFailedPrecondition, a key file that its
// group or others may read or write, one of the two files without the
// other, and a key that does not match the certificate.
func LoadCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, certErr := os.Lstat(certPath)
	keyInfo, keyErr := os.Lstat(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		return createCA(certPath, keyPath)
	case certErr != nil:
		return nil, fmt.Errorf("egress CA: %s: %w", CACertFile, precondition(certErr))
	case keyErr != nil:
		return nil, fmt.Errorf("egress CA: %s: %w", CAKeyFile, precondition(keyErr))
	}
	if !keyInfo.Mode().IsRegular() {
		return nil, fmt.Errorf("egress CA: %s is not a regular file: %w", keyPath, errdefs.ErrFailedPrecondition)
	}
	if perm := keyInfo.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("egress CA: %s has mode %#o; it must be readable by its owner only (chmod 600): %w", keyPath, perm, errdefs.ErrFailedPrecondition)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	defer clear(keyPEM)
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("egress CA: %s or %s is not the expected PEM: %w", CACertFile, CAKeyFile, errdefs.ErrFailedPrecondition)
	}
	defer clear(kb.Bytes)
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %s: not a PKCS #8 key: %w", CAKeyFile, errdefs.ErrFailedPrecondition)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("egress CA: %s: not an ECDSA P-256 key: %w", CAKeyFile, errdefs.ErrFailedPrecondition)
	}
	ca, err := newCA(cb.Bytes, key)
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", err, errdefs.ErrFailedPrecondition)
	}
	return ca, nil
}

func precondition(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("missing while the other CA file exists: %w", errdefs.ErrFailedPrecondition)
	}
	return err
}

// createCA makes a CA and writes its files: the key first, 0600, created
// exclusively, then the certificate.
func createCA(certPath, keyPath string) (*CA, error) {
	ca, err := NewCA()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	clear(der)
	defer clear(keyPEM)
	if err := fsutil.WriteNew(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if err := fsutil.WriteNew(certPath, ca.certPEM, 0o644); err != nil {
		_ = os.Remove(keyPath)
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return ca, nil
}

// CertPEM returns the CA certificate, PEM: what a sandbox trusts.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate returns the CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// leaf returns a certificate for name (a DNS name, as a tunnel's host),
// signed by the CA: from the cache while it is valid for more than
// leafRenewBefore, or minted now.
func (ca *CA) leaf(name string) (*tls.Certificate, error) {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[name]; ok && now.Add(leafRenewBefore).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: name},
		DNSNames:       []string{name},
		NotBefore:      now.Add(-clockSkew),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA: leaf for %s: %w", name, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ca.leafKey, Leaf: leaf}
	if _, ok := ca.leaves[name]; !ok {
		if len(ca.order) >= MaxLeafCache {
			delete(ca.leaves, ca.order[0])
			ca.order = ca.order[1:]
		}
		ca.order = append(ca.order, name)
	}
	ca.leaves[name] = c
	return c, nil
}

// cachedLeaves is how many leaves the cache holds.
func (ca *CA) cachedLeaves() int {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	return len(ca.leaves)
}

func randSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("egress CA: serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(b)
	return sum[:20]
}
