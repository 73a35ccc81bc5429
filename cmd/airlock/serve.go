package main

import (
	"context"
	"errors"
	"flag"
	"os"

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
	log, err := daemon.NewLogger(os.Stderr, cfg.LogLevel)
	if err != nil {
		return 2, err
	}
	if err := daemon.Run(ctx, cfg, daemon.Options{Log: log, Announce: os.Stdout}); err != nil {
		return 1, err
	}
	return 0, nil
}
