// Package backends is the one table of sandbox backends: the daemon and
// `airlock demo` make their runtime from it, and the airlock binary finds
// in it the command that runs it as a backend's in-sandbox agent. A new
// backend is a row here (see docs/BACKENDS.md).
package backends

import (
	"fmt"
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/linux"
)

// Options are what every backend is made with.
type Options struct {
	// StateDir holds the backend's per-sandbox state (for adoption after
	// a restart). Required.
	StateDir string
	// Logger may be nil.
	Logger *slog.Logger
}

// Backend is one row of the table.
type Backend struct {
	// Name identifies the backend (runtime.Runtime.Name).
	Name string
	// New makes the backend's runtime.
	New func(Options) (runtime.Runtime, error)
	// AgentCommand is the first argument with which the airlock binary
	// runs as this backend's in-sandbox agent (the backend starts it so);
	// RunAgent runs it and returns the exit code.
	AgentCommand string
	RunAgent     func() int
}

// table lists the backends; the first is the default.
var table = []Backend{
	{
		Name: "linux",
		New: func(o Options) (runtime.Runtime, error) {
			return linux.New(linux.Config{StateDir: o.StateDir, Logger: o.Logger})
		},
		AgentCommand: linux.AgentCommand,
		RunAgent:     linux.RunAgent,
	},
}

// Default is the backend the daemon uses.
func Default() Backend { return table[0] }

// Lookup returns the backend named name.
func Lookup(name string) (Backend, error) {
	for _, b := range table {
		if b.Name == name {
			return b, nil
		}
	}
	return Backend{}, fmt.Errorf("no sandbox backend %q (have %v): %w", name, Names(), errdefs.ErrNotFound)
}

// Names lists the backends' names, the default first.
func Names() []string {
	out := make([]string, len(table))
	for i, b := range table {
		out[i] = b.Name
	}
	return out
}

// AgentEntry returns the agent of the backend whose AgentCommand is args[0]
// (the binary's first argument), if any.
func AgentEntry(args []string) (run func() int, ok bool) {
	if len(args) == 0 {
		return nil, false
	}
	for _, b := range table {
		if b.AgentCommand != "" && args[0] == b.AgentCommand {
			return b.RunAgent, true
		}
	}
	return nil, false
}
