package oci

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// errPlainHTTP is returned by the transport for an http:// request
// without Options.Insecure.
var errPlainHTTP = errors.New("plain-HTTP registries are refused unless the insecure option is set")

// errStalled is the cancel cause of a download that stopped moving.
var errStalled = errors.New("download stalled")

// parseRef parses an image reference.
func parseRef(ref string, insecure bool) (name.Reference, error) {
	if ref == "" || len(ref) > 1024 {
		return nil, fmt.Errorf("image reference must be 1 to 1024 characters: %w", errdefs.ErrInvalidArgument)
	}
	opts := []name.Option{name.StrictValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		// StrictValidation refuses implicit defaults; retry without it
		// so "alpine" means docker.io/library/alpine:latest.
		if insecure {
			r, err = name.ParseReference(ref, name.Insecure)
		} else {
			r, err = name.ParseReference(ref)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %v: %w", truncate(ref, 100), err, errdefs.ErrInvalidArgument)
	}
	return r, nil
}

// parseTag parses "repo:tag" for picking an image in a docker archive.
func parseTag(tag string) (name.Tag, error) {
	if len(tag) > 1024 {
		return name.Tag{}, fmt.Errorf("tag is too long: %w", errdefs.ErrInvalidArgument)
	}
	t, err := name.NewTag(tag)
	if err != nil {
		return name.Tag{}, fmt.Errorf("tag %q: %v: %w", truncate(tag, 100), err, errdefs.ErrInvalidArgument)
	}
	return t, nil
}

// remoteOptions builds go-containerregistry options: context, platform,
// credentials and the guarded transport.
func remoteOptions(ctx context.Context, ref name.Reference, plat v1.Platform, opts Options) ([]remote.Option, error) {
	auth := authn.Anonymous
	switch {
	case opts.Token != "" && (opts.Username != "" || opts.Password != ""):
		return nil, fmt.Errorf("registry credentials: give a token or a username and password, not both: %w", errdefs.ErrInvalidArgument)
	case opts.Token != "":
		auth = authn.FromConfig(authn.AuthConfig{RegistryToken: opts.Token})
	case opts.Username != "" || opts.Password != "":
		if opts.Username == "" || opts.Password == "" {
			return nil, fmt.Errorf("registry credentials: username and password go together: %w", errdefs.ErrInvalidArgument)
		}
		auth = authn.FromConfig(authn.AuthConfig{Username: opts.Username, Password: opts.Password})
	}
	base := opts.Transport
	if base == nil {
		base = defaultTransport()
	}
	ro := []remote.Option{
		remote.WithContext(ctx),
		remote.WithPlatform(plat),
		remote.WithAuth(auth),
		remote.WithTransport(&schemeGuard{base: base, insecure: opts.Insecure}),
	}
	if opts.UserAgent != "" {
		ro = append(ro, remote.WithUserAgent(opts.UserAgent))
	}
	return ro, nil
}

// defaultTransport is http.DefaultTransport with bounded connect, TLS
// and response-header waits (bodies are bounded by the stall timeout).
func defaultTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 15 * time.Second
	t.ResponseHeaderTimeout = time.Minute
	return t
}

// schemeGuard refuses http:// requests unless insecure: registry,
// token-server and redirect URLs alike, so credentials and images never
// travel in clear text by accident.
type schemeGuard struct {
	base     http.RoundTripper
	insecure bool
}

func (g *schemeGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" && !g.insecure {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("%s: %w", r.URL.Host, errPlainHTTP)
	}
	return g.base.RoundTrip(r)
}

// registryError classifies an error of a registry pull. Network failures
// get a message written for the caller (errdefs.Public: the registry's
// name and what went wrong, no detail of this host such as its resolver),
// so that the API says why, and a class that says whether retrying can
// help.
func registryError(ctx context.Context, ref string, err error) error {
	ref = truncate(ref, 200)
	if errdefs.Class(err) != errdefs.ErrInternal {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	if ctx.Err() == nil {
		if msg, class := networkCause(err); class != nil {
			return errdefs.Publicf(class, "pull %s: %s", ref, msg)
		}
	}
	return fmt.Errorf("pull %s: %w", ref, classify(ctx.Err(), err))
}

// networkCause describes a network failure reaching a registry in the
// caller's terms: a name that does not resolve or a certificate that is
// not trusted will not get better by retrying (failed precondition); a
// refused, timed-out or cut connection may (unavailable). class is nil
// for another error.
func networkCause(err error) (msg string, class error) {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		if dns.IsNotFound {
			return fmt.Sprintf("registry host %s does not exist (no such host)", truncate(dns.Name, 200)), errdefs.ErrFailedPrecondition
		}
		return fmt.Sprintf("cannot resolve the registry host %s (DNS lookup failed)", truncate(dns.Name, 200)), errdefs.ErrUnavailable
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return "the registry's TLS certificate is not trusted: " + truncate(rootCause(err).Error(), 300), errdefs.ErrFailedPrecondition
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		addr := "the registry"
		if op.Addr != nil {
			addr = "the registry at " + op.Addr.String()
		}
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return addr + " refused the connection", errdefs.ErrUnavailable
		case op.Timeout():
			return addr + " did not answer (connection timed out)", errdefs.ErrUnavailable
		case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
			return "no route to " + addr, errdefs.ErrUnavailable
		}
		return "cannot connect to " + addr, errdefs.ErrUnavailable
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return "the registry closed the connection before the transfer ended", errdefs.ErrUnavailable
	}
	return "", nil
}

// rootCause is the innermost error err wraps (through single Unwrap).
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// classify maps go-containerregistry, network and context errors to
// error classes; ctxErr is the import context's error, if any.
func classify(ctxErr, err error) error {
	if ctxErr != nil {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return fmt.Errorf("timed out: %w", errdefs.ErrTimeout)
		}
		return fmt.Errorf("canceled: %w", errdefs.ErrCanceled)
	}
	if errors.Is(err, errPlainHTTP) {
		return fmt.Errorf("%w: %w", errPlainHTTP, errdefs.ErrPermissionDenied)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		for _, d := range te.Errors {
			switch d.Code {
			case transport.UnauthorizedErrorCode:
				return fmt.Errorf("registry requires authentication or refused the credentials: %w", errdefs.ErrUnauthenticated)
			case transport.DeniedErrorCode:
				return fmt.Errorf("registry denied access: %w", errdefs.ErrPermissionDenied)
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return fmt.Errorf("image not found: %w", errdefs.ErrNotFound)
			case transport.TooManyRequestsErrorCode:
				return errdefs.Publicf(errdefs.ErrUnavailable, "registry rate limit reached (retry later, or pull with credentials)")
			}
		}
		switch {
		case te.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("registry requires authentication or refused the credentials: %w", errdefs.ErrUnauthenticated)
		case te.StatusCode == http.StatusForbidden:
			return fmt.Errorf("registry denied access: %w", errdefs.ErrPermissionDenied)
		case te.StatusCode == http.StatusNotFound:
			return fmt.Errorf("image not found: %w", errdefs.ErrNotFound)
		case te.StatusCode == http.StatusTooManyRequests:
			return errdefs.Publicf(errdefs.ErrUnavailable, "registry rate limit reached (retry later, or pull with credentials)")
		}
		return errdefs.Publicf(errdefs.ErrUnavailable, "the registry answered HTTP %d", te.StatusCode)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("registry unreachable: %v: %w", err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%v: %w", err, errdefs.ErrUnavailable)
}

// sourceError classifies an error reading an image, keeping a class it
// already has.
func sourceError(err error) error {
	if errdefs.Class(err) != errdefs.ErrInternal {
		return err
	}
	return fmt.Errorf("%v: %w", err, errdefs.ErrUnavailable)
}

// archiveError classifies an error opening a local image; the host path
// is left out of the message.
func archiveError(kind, path string, err error) error {
	msg := err.Error()
	if path != "" {
		msg = strings.ReplaceAll(msg, path, "<"+kind+">")
	}
	return fmt.Errorf("%s is not readable or not valid: %s: %w", kind, truncate(msg, 300), errdefs.ErrInvalidArgument)
}

// progressReader counts a layer's bytes, reports progress at most every
// 100ms, and cancels the import when nothing arrives for stall.
type progressReader struct {
	ctxErr func() error // the import context's Err
	r      io.Reader
	p      Progress
	f      func(Progress)
	n      int64
	last   time.Time
	timer  *time.Timer
	stall  time.Duration
}

func newProgressReader(ctx context.Context, r io.Reader, p Progress, f func(Progress), stall time.Duration, cancel context.CancelCauseFunc) *progressReader {
	pr := &progressReader{ctxErr: ctx.Err, r: r, p: p, f: f, stall: stall, last: time.Now()}
	pr.timer = time.AfterFunc(stall, func() { cancel(errStalled) })
	return pr
}

func (pr *progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	if n > 0 {
		pr.timer.Reset(pr.stall)
		pr.n += int64(n)
		if pr.f != nil && time.Since(pr.last) >= 100*time.Millisecond {
			pr.last = time.Now()
			p := pr.p
			p.Done = pr.n
			pr.f(p)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if pr.ctxErr() != nil {
			return n, err
		}
		return n, fmt.Errorf("download: %w", classify(nil, err))
	}
	return n, err
}

// final sends the last report of the layer.
func (pr *progressReader) final() {
	p := pr.p
	p.Done, p.Final = pr.n, true
	if p.Total == 0 {
		p.Total = pr.n
	}
	report(pr.f, p)
}

func (pr *progressReader) stop() { pr.timer.Stop() }
