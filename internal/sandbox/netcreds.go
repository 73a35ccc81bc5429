package sandbox

import (
	"context"
	"crypto/x509"
	"fmt"
	"path"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// Where a sandbox finds the egress CA: TrustDir (the daemon's host
// directory EgressCredentials.TrustDir, mounted read-only) holding the CA
// certificate alone and a bundle of the host's roots and the CA, which
// the CA variables (proxyCAEnv) point to. It sits beside the agent's own
// /.airlock/bin: the runtime can always make a mount point there (the
// root directory is the writable layer's), where a template's /etc may be
// a layer the sandbox's root cannot write (one that could not be
// id-mapped: a VM's bookworm kernel refused `mkdir /etc/airlock`).
const (
	TrustDir        = "/.airlock/trust"
	TrustCAFile     = "ca.pem"
	TrustBundle     = "ca-bundle.pem"
	trustCAPath     = TrustDir + "/" + TrustCAFile
	trustBundlePath = TrustDir + "/" + TrustBundle
)

// EgressCredentials lets allowlist sandboxes name stored secrets that
// their proxy adds to requests to one destination (Network.Credentials).
// Without it (nil CA) a network with credentials is refused.
type EgressCredentials struct {
	// CA signs the certificates the proxies present for destinations
	// with a credential.
	CA *egress.CA
	// Roots verify those destinations' real certificates; nil is the
	// host's system pool.
	Roots *x509.CertPool
	// TrustDir is a host directory holding TrustCAFile and TrustBundle,
	// world-readable, mounted read-only at TrustDir in every sandbox.
	TrustDir string
	// Check reports whether the tenant has the secret (ErrNotFound
	// otherwise), without revealing it: Create and SetNetwork call it
	// for each credential.
	Check func(ctx context.Context, tenant, secret string) error
	// Reveal returns the tenant's secret's value, for one request.
	Reveal func(ctx context.Context, tenant, secret string) (secrets.Value, error)
}

func (c *EgressCredentials) enabled() bool { return c != nil && c.CA != nil }

// proxyCAEnv is proxyEnv and the environment that makes common TLS
// clients trust the egress CA besides the usual roots: OpenSSL
// (SSL_CERT_FILE, which replaces its default bundle, hence the bundle),
// curl, Python's requests, pip, Node (NODE_EXTRA_CA_CERTS adds to its
// built-in roots, hence the CA alone) and git. Built once; never modified.
var proxyCAEnv = mergeEnv(map[string]string{
	"SSL_CERT_FILE":       trustBundlePath,
	"CURL_CA_BUNDLE":      trustBundlePath,
	"REQUESTS_CA_BUNDLE":  trustBundlePath,
	"PIP_CERT":            trustBundlePath,
	"GIT_SSL_CAINFO":      trustBundlePath,
	"NODE_EXTRA_CA_CERTS": trustCAPath,
}, proxyEnv)

// trustBind is the read-only mount of the trust directory, if the
// daemon has one.
func (m *Manager) trustBind() []runtime.Bind {
	c := m.cfg.Egress.Credentials
	if !c.enabled() || c.TrustDir == "" || !path.IsAbs(c.TrustDir) {
		return nil
	}
	return []runtime.Bind{{Source: c.TrustDir, Target: TrustDir}}
}

// parseCredentials validates n's credentials against its policy: each
// names a host the allowlist lists (on its port, when it names one).
func parseCredentials(list []egress.Credential, pol *egress.Policy) (*egress.Credentials, error) {
	cs, err := egress.ParseCredentials(list)
	if err != nil {
		return nil, fmt.Errorf("network.credentials: %w", err)
	}
	for i, c := range cs.List() {
		var listed bool
		if c.Port != 0 {
			listed = pol.Decide(c.Host, c.Port).Allowed
		} else {
			// Any port: an entry lists the host if it allows port 1
			// or refuses it for its port alone.
			d := pol.Decide(c.Host, 1)
			listed = d.Allowed || d.Reason == egress.ReasonPortNotListed
		}
		if !listed {
			return nil, fmt.Errorf("network.credentials %d: host %s is not in network.allow: %w", i+1, c.Host, errdefs.ErrInvalidArgument)
		}
	}
	return cs, nil
}

// checkCredentials checks that the daemon can add credentials and that
// each names a secret of the tenant.
func (m *Manager) checkCredentials(ctx context.Context, owner string, n Network) error {
	if len(n.Credentials) == 0 {
		return nil
	}
	c := m.cfg.Egress.Credentials
	if !c.enabled() {
		return fmt.Errorf("network.credentials: this daemon adds no credentials (no egress CA): %w", errdefs.ErrNotSupported)
	}
	for _, cr := range n.Credentials {
		if err := c.Check(ctx, owner, cr.Secret); err != nil {
			return fmt.Errorf("network.credentials: secret %s: %w", cr.Secret, errdefs.Class(err))
		}
	}
	return nil
}

// interception is the proxies' Interception for the tenant owner, nil
// when the daemon adds no credentials.
func (m *Manager) interception(owner string) *egress.Interception {
	c := m.cfg.Egress.Credentials
	if !c.enabled() {
		return nil
	}
	return &egress.Interception{
		CA:    c.CA,
		Roots: c.Roots,
		Reveal: func(ctx context.Context, secret string) (secrets.Value, error) {
			return c.Reveal(ctx, owner, secret)
		},
	}
}

// credsOf is n's credentials, validated by n.resolve already.
func credsOf(n Network) *egress.Credentials {
	cs, err := egress.ParseCredentials(n.Credentials)
	if err != nil {
		return nil
	}
	return cs
}

// networkEnv is the environment a sandbox's network gives its
// processes, under the sandbox's own: in allowlist mode proxyEnv, and on
// a daemon with an egress CA proxyCAEnv (every process trusts the CA, so
// that credentials added later by a PATCH work for processes started
// afterwards too). The map is shared: callers merge it, never change it.
func (m *Manager) networkEnv(n Network) map[string]string {
	switch {
	case n.Mode != NetworkAllowlist:
		return nil
	case m.trustBind() == nil:
		return proxyEnv
	}
	return proxyCAEnv
}
