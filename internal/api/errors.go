package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The public error codes, by their names in this package: their one list
// is package api's (api.CodeInvalidArgument, ...), which the Go client
// shares and openapi.yaml's Error schema documents.
const (
	CodeInvalidArgument      = wire.CodeInvalidArgument
	CodeUnauthenticated      = wire.CodeUnauthenticated
	CodePermissionDenied     = wire.CodePermissionDenied
	CodeNotFound             = wire.CodeNotFound
	CodeMethodNotAllowed     = wire.CodeMethodNotAllowed
	CodeAlreadyExists        = wire.CodeAlreadyExists
	CodeFailedPrecondition   = wire.CodeFailedPrecondition
	CodeRequestTooLarge      = wire.CodeRequestTooLarge
	CodeUnsupportedMediaType = wire.CodeUnsupportedMediaType
	CodeUpgradeRequired      = wire.CodeUpgradeRequired
	CodeRateLimited          = wire.CodeRateLimited
	CodeResourceExhausted    = wire.CodeResourceExhausted
	CodeCanceled             = wire.CodeCanceled
	CodeInternal             = wire.CodeInternal
	CodeNotSupported         = wire.CodeNotSupported
	CodeBadGateway           = wire.CodeBadGateway
	CodeUnavailable          = wire.CodeUnavailable
	CodeTimeout              = wire.CodeTimeout
)

// StatusClientClosedRequest is the status logged (never seen by a client)
// for a request whose client went away.
const StatusClientClosedRequest = errdefs.StatusClientClosedRequest

// maxMessageBytes caps an error message.
const maxMessageBytes = 1024

// apiError is an error the API layer itself decides (authentication, rate
// limits, request syntax), with its public status, code and message.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// invalidf is a 400 invalid_argument error.
func invalidf(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidArgument, msg: fmt.Sprintf(format, args...)}
}

// publicError is where an error becomes an HTTP status, a public code
// and a message. Errors of the API layer keep their own; the others are
// mapped by errdefs.HTTP (the mapping the tool gateway shares), and
// their messages capped.
func publicError(err error) (status int, code, msg string) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status, ae.code, clean(ae.msg)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, CodeRequestTooLarge,
			fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit)
	}
	status, code, msg = errdefs.HTTP(err)
	return status, code, clean(msg)
}

// stripClass is errdefs.StripClass.
func stripClass(msg string, class error) string { return errdefs.StripClass(msg, class) }

// errShuttingDown is the cause with which the daemon's graceful stop ends
// the requests still in flight (see Handler.Shutdown).
var errShuttingDown = errors.New("the server is shutting down")

// shutdownError is the answer of a request that the graceful stop ended
// or refused.
func shutdownError() error {
	return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
		msg: "the server is shutting down; the request was ended before it finished (retry once the server is back)"}
}

// explain gives err, the failure of the call, the class of what really
// happened where the error that reached the handler hides it, before
// publicError maps it. Handlers return errors as they get them; fail,
// the stream and PTY endings pass them through here. Three causes are
// told apart:
//
//   - the daemon's graceful stop ended the request (its context was
//     cancelled with errShuttingDown): unavailable, saying so;
//   - the sandbox whose agent served the request (see agentSandbox) was
//     deleted meanwhile, or has ended (failed, or its agent no longer
//     accepts connections): failed precondition, saying which, as the
//     sandbox manager tells it (sandbox.Manager.Ended);
//   - anything else keeps its class.
//
// Only errors of the classes a cut agent stream produces (internal,
// unavailable, canceled while the client is still there) are examined.
func (c *call) explain(err error) error {
	if err == nil {
		return nil
	}
	switch errdefs.Class(err) {
	case errdefs.ErrInternal, errdefs.ErrUnavailable, errdefs.ErrCanceled, errdefs.ErrTimeout:
	default:
		return err
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	if context.Cause(c.r.Context()) == errShuttingDown {
		return shutdownError()
	}
	if c.sandboxID == "" || errdefs.Class(err) == errdefs.ErrTimeout ||
		(errdefs.Class(err) == errdefs.ErrCanceled && c.r.Context().Err() != nil) {
		return err
	}
	if ended := c.h.mgr.Ended(c.r.Context(), c.sandboxID); ended != nil {
		return ended
	}
	return err
}

// outcomeOf is the audit outcome of err: "ok" or its public code.
func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	_, code, _ := publicError(err)
	return code
}

// clean caps a message and makes it valid UTF-8.
func clean(msg string) string { return capText(msg, maxMessageBytes) }

// capText makes s valid UTF-8 of at most n bytes (plus "..." when cut).
func capText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}

// publicError is the package's publicError with the host's paths taken
// out of the message (Config.HostPaths): every answer goes through it.
func (h *Handler) publicError(err error) (status int, code, msg string) {
	status, code, msg = publicError(err)
	if h.redact != nil {
		msg = h.redact(msg)
	}
	return status, code, msg
}

// hostPathRedactor returns a function that replaces each of paths (and
// the rest of a path that starts with one) by "<host path>"; nil when
// there is none.
func hostPathRedactor(paths []string) func(string) string {
	var alts []string
	for _, p := range paths {
		p = filepath.Clean(p)
		if p == "/" || p == "." || !filepath.IsAbs(p) {
			continue
		}
		alts = append(alts, regexp.QuoteMeta(p))
	}
	if len(alts) == 0 {
		return nil
	}
	re := regexp.MustCompile(`(?:` + strings.Join(alts, "|") + `)(?:/[^\s"':;,]*)?`)
	return func(msg string) string { return re.ReplaceAllString(msg, "<host path>") }
}

// writeError writes err as a JSON error response. Server-side failures are
// logged with the full error, which the client never sees.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := h.publicError(err)
	if status >= 500 && status != StatusClientClosedRequest {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Del("Content-Length")
	switch code {
	case CodeRateLimited:
		hdr.Set("Retry-After", "1")
	case CodeUnauthenticated:
		hdr.Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(wire.Error{Error: wire.ErrorDetail{Code: code, Message: msg}})
	_, _ = w.Write(append(b, '\n'))
}
