package errdefs_test

import (
	"fmt"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The codes HTTP answers are the public ones of package api.
func TestHTTPCodesArePublic(t *testing.T) {
	want := map[error]string{
		errdefs.ErrNotFound:           wire.CodeNotFound,
		errdefs.ErrAlreadyExists:      wire.CodeAlreadyExists,
		errdefs.ErrInvalidArgument:    wire.CodeInvalidArgument,
		errdefs.ErrUnauthenticated:    wire.CodeUnauthenticated,
		errdefs.ErrPermissionDenied:   wire.CodePermissionDenied,
		errdefs.ErrResourceExhausted:  wire.CodeResourceExhausted,
		errdefs.ErrFailedPrecondition: wire.CodeFailedPrecondition,
		errdefs.ErrUnavailable:        wire.CodeUnavailable,
		errdefs.ErrTimeout:            wire.CodeTimeout,
		errdefs.ErrCanceled:           wire.CodeCanceled,
		errdefs.ErrNotSupported:       wire.CodeNotSupported,
		errdefs.ErrInternal:           wire.CodeInternal,
	}
	for _, c := range errdefs.Classes() {
		if _, code, _ := errdefs.HTTP(fmt.Errorf("x: %w", c)); code != want[c] {
			t.Errorf("HTTP(%v) code %q, want %q", c, code, want[c])
		}
	}
}
