package runtimefake

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// TestConformance runs the backend conformance suite (minus the isolation
// and limit checks, which the fake does not provide).
func TestConformance(t *testing.T) {
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T) runtime.Runtime {
			r, err := New(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close(context.Background()) })
			return r
		},
		// The fake's restart is the same value (see the package doc).
		Reopen: func(t *testing.T, prev runtime.Runtime) runtime.Runtime { return prev },
		Rootfs: func(t *testing.T) runtime.Rootfs { return runtime.Rootfs{Layers: []string{"/nonexistent"}} },
		KillAgent: func(t *testing.T, inst runtime.Instance) {
			if err := inst.(*Instance).rt.Crash(inst.ID()); err != nil {
				t.Fatal(err)
			}
		},
	})
}
