package main

import (
	"context"
	"errors"
	"flag"
	"os"

	"github.com/airlock-sandbox/airlock/internal/confine"
	"github.com/airlock-sandbox/airlock/internal/daemon"
)

// serve runs `airlock serve [flags]`.
func serve(ctx context.Context, args []string) (int, error) {
	cfg, err := daemon.LoadConfig(args, os.Environ(), os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0, nil
	}
	if err != nil {
		return 2, err
	}
	// Each sandbox's agent is this binary, and it must confine every one
	// of its threads: a cgo build would start and then fail every create.
	if err := confine.AllThreads(); err != nil {
		return 1, errors.New("serve refuses to start: this binary was built with cgo, and each sandbox's agent (this binary) must confine all of its threads, which Go cannot do with cgo; rebuild it with CGO_ENABLED=0 (make build)")
	}
	log, err := daemon.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return 2, err
	}
	if err := daemon.Run(ctx, cfg, daemon.Options{Log: log, Announce: os.Stdout}); err != nil {
		return 1, err
	}
	return 0, nil
}
