//go:build !linux

package confine

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Apply is only implemented on Linux.
func Apply(p Policy) (Result, error) {
	return Result{}, fmt.Errorf("confine: %w on this operating system", errdefs.ErrNotSupported)
}

// AllThreads is only implemented on Linux.
func AllThreads() error {
	return fmt.Errorf("confine: %w on this operating system", errdefs.ErrNotSupported)
}

// Status is only implemented on Linux.
func Status() (State, error) {
	return State{}, fmt.Errorf("confine: %w on this operating system", errdefs.ErrNotSupported)
}

// RestrictFiles is only implemented on Linux.
func RestrictFiles(p Policy) (Result, error) {
	return Result{}, fmt.Errorf("confine: %w on this operating system", errdefs.ErrNotSupported)
}

// NarrowBoundingForExec is only implemented on Linux.
func NarrowBoundingForExec(uint64) error {
	return fmt.Errorf("confine: %w on this operating system", errdefs.ErrNotSupported)
}

// LandlockABI is only implemented on Linux.
func LandlockABI() (int, error) {
	return 0, fmt.Errorf("confine: %w on this operating system", errdefs.ErrNotSupported)
}
