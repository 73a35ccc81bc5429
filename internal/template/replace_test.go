package template

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// layeredSource is a fakeSource whose root filesystem says which version
// it is.
type layeredSource struct{ name, layer string }

func (f layeredSource) Name() string { return f.name }
func (f layeredSource) Resolve(context.Context) (runtime.Rootfs, error) {
	return runtime.Rootfs{Layers: []string{f.layer}}, nil
}

func TestRegistryReplace(t *testing.T) {
	r, err := NewRegistry(layeredSource{"a", "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	// Replacing an existing source and adding a new one both work.
	for _, s := range []Source{layeredSource{"a", "/v2"}, layeredSource{"b", "/b"}} {
		if err := r.Replace(s); err != nil {
			t.Fatalf("Replace(%v): %v", s, err)
		}
	}
	for name, want := range map[string]string{"a": "/v2", "b": "/b"} {
		s, err := r.Get(name)
		if err != nil {
			t.Fatalf("Get(%s): %v", name, err)
		}
		rfs, _ := s.Resolve(context.Background())
		if rfs.Layers[0] != want {
			t.Errorf("%s resolves to %v, want %s", name, rfs.Layers, want)
		}
	}
	if n := len(r.List()); n != 2 {
		t.Errorf("List has %d templates, want 2", n)
	}
	for _, bad := range []Source{nil, layeredSource{"", "/x"}, layeredSource{"../x", "/x"}} {
		if err := r.Replace(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Replace(%v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}
