package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// refusingRuntime fails every create as the native runtime does, naming
// the sandbox by the id the manager chose for it.
type refusingRuntime struct {
	runtime.Runtime
	err func(id string) error
}

func (r refusingRuntime) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	return nil, r.err(spec.ID)
}

// TestCreateErrorNamesNoID: a failed create says what failed without the
// id the sandbox was to have, which the caller never got and which names
// nothing; the cause and its class stay. Issue 22, finding 3.
func TestCreateErrorNamesNoID(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for _, tc := range []struct {
		err   func(id string) error
		class error
		want  string
	}{
		{func(id string) error {
			return fmt.Errorf("sandbox %s: cpus must be between 0.01 and 1024: %w", id, errdefs.ErrInvalidArgument)
		}, errdefs.ErrInvalidArgument, "create sandbox: cpus must be between 0.01 and 1024"},
		{func(id string) error {
			return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
		}, errdefs.ErrAlreadyExists, "create sandbox: already exists"},
		{func(id string) error {
			return fmt.Errorf("sandbox %s: state dir /var/lib/airlock/%s: %w", id, id, errors.New("EIO"))
		}, errdefs.ErrInternal, "create sandbox: internal error"},
	} {
		rt := refusingRuntime{Runtime: e.rt, err: func(id string) error {
			ids = append(ids, id)
			return tc.err(id)
		}}
		m, err := New(rt, e.templates, Config{StateDir: e.stateDir, HealthInterval: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, err = m.Create(context.Background(), Spec{})
		_ = m.Close(context.Background())
		if len(ids) == 0 {
			t.Fatal("the runtime was not asked")
		}
		id := ids[len(ids)-1]
		switch {
		case err == nil:
			t.Fatalf("create succeeded")
		case errdefs.Class(err) != tc.class:
			t.Errorf("%q: class %v, want %v", err, errdefs.Class(err), tc.class)
		case strings.Contains(err.Error(), id) || strings.Contains(err.Error(), IDPrefix):
			t.Errorf("%q names the sandbox id %s, which never existed", err, id)
		case !strings.HasPrefix(err.Error(), tc.want):
			t.Errorf("%q, want it to start %q", err, tc.want)
		}
		if _, gerr := m.Get(id); !errors.Is(gerr, errdefs.ErrNotFound) {
			t.Errorf("Get(%s) after the failed create: %v, want not found", id, gerr)
		}
	}
}

// TestLimitBounds: limits below the smallest a sandbox can run with or
// above the maxima fail before the runtime is asked, in MiB for memory
// and disk (the unit of the API's memory_mb and disk_mb). Issue 22,
// finding 3.
func TestLimitBounds(t *testing.T) {
	e := newEnv(t)
	m := e.manager(Config{MaxLimits: runtime.Limits{CPUs: 2, MemoryBytes: 4 << 30, DiskBytes: 8 << 30, Pids: 1024}})
	for _, tc := range []struct {
		l    runtime.Limits
		want string
	}{
		{runtime.Limits{MemoryBytes: 1 << 20}, "memory 1 MiB is below the minimum 16 MiB"},
		{runtime.Limits{MemoryBytes: 10 << 30}, "memory 10240 MiB is above the maximum 4096 MiB"},
		{runtime.Limits{MemoryBytes: 16<<20 - 1}, "memory 16777215 bytes is below the minimum 16 MiB"},
		{runtime.Limits{DiskBytes: 4096}, "disk 4096 bytes is below the minimum 1 MiB"},
		{runtime.Limits{DiskBytes: 9 << 30}, "disk 9216 MiB is above the maximum 8192 MiB"},
		{runtime.Limits{Pids: 4}, "pids 4 is below the minimum 8"},
		{runtime.Limits{Pids: 2000}, "pids 2000 is above the maximum 1024"},
		{runtime.Limits{CPUs: 0.01}, "cpus 0.01 is below the minimum 0.05"},
	} {
		before := e.rt.Creates()
		_, err := m.Create(context.Background(), Spec{Limits: tc.l})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want invalid argument %q", tc.l, err, tc.want)
		}
		if e.rt.Creates() != before {
			t.Errorf("%+v: the runtime was asked", tc.l)
		}
	}
}
