package errdefs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestHTTP(t *testing.T) {
	codes := map[string]bool{}
	for _, c := range Classes() {
		status, code, _ := HTTP(fmt.Errorf("x: %w", c))
		if status < 400 || code == "" {
			t.Errorf("HTTP(%v) = %d %q", c, status, code)
		}
		if codes[code] {
			t.Errorf("two classes map to code %q", code)
		}
		codes[code] = true
	}
	for _, tt := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{fmt.Errorf("tool t: %w", ErrNotFound), 404, "not_found", "tool t: not found"},
		{fmt.Errorf("args.x must be a string: %w", ErrInvalidArgument), 400, "invalid_argument", "args.x must be a string"},
		{fmt.Errorf("tool t is not granted: %w", ErrPermissionDenied), 403, "permission_denied", "tool t is not granted: permission denied"},
		{fmt.Errorf("dial /var/lib/airlock/x: %w", ErrUnavailable), 503, "unavailable", "the service or sandbox is temporarily unavailable; try again"},
		{errors.New("open /var/lib/airlock/x"), 500, "internal", "internal error"},
		{Publicf(ErrUnavailable, "the upstream refused"), 503, "unavailable", "the upstream refused"},
		{ErrCanceled, StatusClientClosedRequest, "canceled", "the request was canceled"},
	} {
		status, code, msg := HTTP(tt.err)
		if status != tt.status || code != tt.code || msg != tt.msg {
			t.Errorf("HTTP(%q) = %d %q %q, want %d %q %q", tt.err, status, code, msg, tt.status, tt.code, tt.msg)
		}
		if strings.Contains(msg, "/var/lib") {
			t.Errorf("HTTP(%q) leaks a host path", tt.err)
		}
	}
}
