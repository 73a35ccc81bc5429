package egress

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// Caps on credentials.
const (
	// MaxCredentials is the most credentials a proxy may hold.
	MaxCredentials = 64
	// MaxFormatLen is the longest Credential.Format.
	MaxFormatLen = 256
	// SecretPlaceholder is what Credential.Format holds once, where the
	// secret's value goes.
	SecretPlaceholder = "{secret}"
)

// Credential is a header the proxy adds to every HTTP request a sandbox
// sends to one destination, with a stored secret's value in it, so that
// the sandbox uses an API without holding its key. Over TLS this needs
// the proxy to terminate the sandbox's TLS (see Interception).
type Credential struct {
	// Host is the destination's name, exact (no wildcard, no address:
	// TLS to an address carries no name to mint a certificate for).
	Host string `json:"host"`
	// Port limits the credential to one port; 0 is every port the
	// allowlist allows for Host.
	Port uint16 `json:"port,omitempty"`
	// Header is the header's name ("Authorization", "X-Api-Key"). A
	// header of the same name that the sandbox sent is replaced.
	Header string `json:"header"`
	// Secret names the stored secret, of the sandbox's tenant.
	Secret string `json:"secret"`
	// Format is the header's value with SecretPlaceholder where the
	// secret goes ("Bearer {secret}"); empty is the secret alone.
	Format string `json:"format,omitempty"`
}

// forbiddenHeaders are headers a credential may not set: they frame the
// message or the connection, which the proxy owns.
var forbiddenHeaders = []string{
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Te", "Trailer", "Upgrade", "Expect",
}

// Credentials is a validated set of credentials, by host. It is
// immutable; a proxy swaps a whole set (SetCredentials).
type Credentials struct {
	list   []Credential
	byHost map[string][]Credential
}

// ParseCredentials validates list and returns it in canonical form (host
// lower case, header canonical). Errors wrap ErrInvalidArgument and name
// the credential at fault, never a value (there is none here: a
// credential names its secret).
func ParseCredentials(list []Credential) (*Credentials, error) {
	if len(list) > MaxCredentials {
		return nil, fmt.Errorf("egress credentials: %d, at most %d: %w", len(list), MaxCredentials, errdefs.ErrInvalidArgument)
	}
	cs := &Credentials{byHost: map[string][]Credential{}}
	for i, c := range list {
		c, err := c.canonical()
		if err != nil {
			return nil, fmt.Errorf("egress credential %d: %w", i+1, err)
		}
		for _, o := range cs.byHost[c.Host] {
			if o.Header == c.Header && (o.Port == 0 || c.Port == 0 || o.Port == c.Port) {
				return nil, fmt.Errorf("egress credential %d: header %s for %s is given twice: %w", i+1, c.Header, c.Host, errdefs.ErrInvalidArgument)
			}
		}
		cs.list = append(cs.list, c)
		cs.byHost[c.Host] = append(cs.byHost[c.Host], c)
	}
	return cs, nil
}

func (c Credential) canonical() (Credential, error) {
	if strings.HasPrefix(c.Host, "*.") || looksLikeAddr(c.Host) || c.Host == "" {
		return c, invalid("host %s: must be an exact host name (no wildcard, no address)", quoteEntry(c.Host))
	}
	name, err := parseName(c.Host)
	if err != nil {
		return c, fmt.Errorf("host %s: %w", quoteEntry(c.Host), err)
	}
	c.Host = name
	if c.Header == "" || len(c.Header) > 128 || !isToken(c.Header) {
		return c, invalid("header %s: not a header name", quoteEntry(c.Header))
	}
	c.Header = textproto.CanonicalMIMEHeaderKey(c.Header)
	if slices.Contains(forbiddenHeaders, c.Header) || strings.HasPrefix(c.Header, "Proxy-") {
		return c, invalid("header %s: the proxy sets it itself", c.Header)
	}
	if err := secrets.ValidateName(c.Secret); err != nil {
		return c, fmt.Errorf("secret: %w", err)
	}
	if len(c.Format) > MaxFormatLen {
		return c, invalid("format: %d bytes, at most %d", len(c.Format), MaxFormatLen)
	}
	if c.Format != "" && strings.Count(c.Format, SecretPlaceholder) != 1 {
		return c, invalid("format must hold %s exactly once", SecretPlaceholder)
	}
	for _, r := range c.Format {
		if r < ' ' && r != '\t' || r == 0x7f {
			return c, invalid("format holds a control character")
		}
	}
	return c, nil
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// List returns the credentials, canonical, in the order given.
func (cs *Credentials) List() []Credential {
	if cs == nil {
		return nil
	}
	return slices.Clone(cs.list)
}

// Len is the number of credentials.
func (cs *Credentials) Len() int {
	if cs == nil {
		return 0
	}
	return len(cs.list)
}

// For returns the credentials for a tunnel or request to host (a
// canonical name) on port, or nil.
func (cs *Credentials) For(host string, port uint16) []Credential {
	if cs == nil {
		return nil
	}
	var out []Credential
	for _, c := range cs.byHost[host] {
		if c.Port == 0 || c.Port == port {
			out = append(out, c)
		}
	}
	return out
}

// Interception is what a proxy needs to add credentials: the CA it
// mints the destinations' certificates with, the roots it verifies the
// real destinations' certificates against, and the way to a secret's
// value.
type Interception struct {
	// CA signs the certificate the proxy presents to the sandbox for a
	// destination with a credential. Required.
	CA *CA
	// Roots verify the destinations' certificates; nil is the host's
	// system pool. Tests give the pool of their test server.
	Roots *x509.CertPool
	// Reveal returns the value of the sandbox's tenant's secret name,
	// which the proxy puts in one request's header and then wipes. It
	// is called once per request that goes out, never before. Required.
	Reveal func(ctx context.Context, secret string) (secrets.Value, error)
}

func (ic *Interception) validate() error {
	if ic.CA == nil || ic.Reveal == nil {
		return fmt.Errorf("egress interception: a CA and a Reveal function are required: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// errCredential is a credential that could not be revealed; its text
// names the secret, never a value.
type errCredential struct{ secret string }

func (e errCredential) Error() string { return "secret " + e.secret + " could not be revealed" }

// addCredentials sets each credential's header on h, replacing any the
// sandbox sent, with its secret revealed now; the revealed bytes are
// wiped once the header's value is built. It returns the secrets' names,
// for the event.
func (s *session) addCredentials(ctx context.Context, h http.Header, creds []Credential) (string, error) {
	ic := s.p.intercept
	if ic == nil {
		return "", errCredential{}
	}
	ctx, cancel := context.WithTimeout(ctx, s.p.limits.DialTimeout)
	defer cancel()
	names := make([]string, 0, len(creds))
	for _, c := range creds {
		v, err := ic.Reveal(ctx, c.Secret)
		if err != nil {
			return "", errCredential{secret: c.Secret}
		}
		val := string(v.Bytes())
		v.Wipe()
		if c.Format != "" {
			val = strings.Replace(c.Format, SecretPlaceholder, val, 1)
		}
		if strings.ContainsAny(val, "\r\n\x00") {
			return "", errCredential{secret: c.Secret}
		}
		h.Del(c.Header)
		h[c.Header] = []string{val}
		names = append(names, c.Secret)
	}
	return strings.Join(names, ","), nil
}
