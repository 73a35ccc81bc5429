package runtimefake

import (
	"context"
	"net"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Gated wraps rt so that the instances it recovers answer only once gate
// is closed, as starved agents would after a restart (alive, but slow):
// their Dial waits for the gate or its context, then dials.
func Gated(rt runtime.Runtime, gate <-chan struct{}) runtime.Runtime {
	return gatedRuntime{rt, gate}
}

type gatedRuntime struct {
	runtime.Runtime
	gate <-chan struct{}
}

func (g gatedRuntime) Recover(ctx context.Context) ([]runtime.Instance, error) {
	insts, err := g.Runtime.Recover(ctx)
	for i, inst := range insts {
		insts[i] = gatedInstance{inst, g.gate}
	}
	return insts, err
}

type gatedInstance struct {
	runtime.Instance
	gate <-chan struct{}
}

func (g gatedInstance) Dial(ctx context.Context) (net.Conn, error) {
	select {
	case <-g.gate:
		return g.Instance.Dial(ctx)
	case <-ctx.Done():
		return nil, errdefs.ErrTimeout
	}
}
