package daemon

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// The egress CA's directories in the data dir: the CA itself (its key
// 0600 in a 0700 directory, the daemon's alone), and the trust directory
// every sandbox mounts read-only at sandbox.TrustDir (0755, public
// certificates only).
const (
	egressCADir    = "egress-ca"
	egressTrustDir = "egress-trust"
)

// maxRootsFile caps the PEM file of extra roots (Config.EgressRoots) and
// the host's bundle.
const maxRootsFile = 8 << 20

// systemBundles are where Linux distributions keep the PEM bundle of
// their trusted roots (those crypto/x509 reads), first found wins.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// egressCredentials loads (or, on the first start, makes) the daemon's
// egress CA, writes the trust directory the sandboxes mount (the CA
// certificate, and a bundle of the host's roots and the CA, made anew at
// every start), and returns what the sandbox manager needs to add
// credentials at the edge: the proxies verify destinations against the
// host's roots and the PEM file extraRoots names, if any; secret values
// come from rd, for the sandbox's tenant only.
func egressCredentials(dataDir, extraRoots string, st *secrets.Store, log *slog.Logger) (*sandbox.EgressCredentials, error) {
	ca, err := egress.LoadCA(filepath.Join(dataDir, egressCADir))
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if extraRoots != "" {
		pem, err := readCapped(extraRoots)
		if err != nil {
			return nil, fmt.Errorf("egress roots: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("egress roots: %s holds no PEM certificate: %w", extraRoots, errdefs.ErrInvalidArgument)
		}
	}
	trust := filepath.Join(dataDir, egressTrustDir)
	if err := writeTrustDir(trust, ca.CertPEM(), log); err != nil {
		return nil, fmt.Errorf("egress trust directory: %w", err)
	}
	rd := secrets.NewReader(st)
	return &sandbox.EgressCredentials{
		CA:       ca,
		Roots:    roots,
		TrustDir: trust,
		Check: func(ctx context.Context, tenant, name string) error {
			_, err := st.Get(ctx, tenant, name)
			return err
		},
		Reveal: rd.Reveal,
	}, nil
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxRootsFile+1)); err != nil {
		return nil, err
	}
	if b.Len() > maxRootsFile {
		return nil, fmt.Errorf("%s is over %d bytes: %w", path, maxRootsFile, errdefs.ErrInvalidArgument)
	}
	return b.Bytes(), nil
}

// writeTrustDir writes the CA certificate and the bundle (the host's
// roots, then the CA) into dir, 0755, each file 0644 and replaced
// whole (written aside, then renamed), so that a sandbox never reads a
// half-written bundle.
func writeTrustDir(dir string, caPEM []byte, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	var bundle []byte
	for _, p := range systemBundles {
		b, err := readCapped(p)
		if err == nil && len(b) > 0 {
			bundle = append(b, '\n')
			break
		}
	}
	if bundle == nil {
		log.Warn("no system CA bundle found: the sandboxes' bundle holds the egress CA only")
	}
	bundle = append(bundle, caPEM...)
	for name, data := range map[string][]byte{sandbox.TrustCAFile: caPEM, sandbox.TrustBundle: bundle} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		if err := os.Chmod(tmp, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
