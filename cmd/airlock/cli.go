package main

import (
	"context"
	"fmt"
)

// cliMain runs the client verbs.
func cliMain(ctx context.Context, args []string) (int, error) {
	return 2, fmt.Errorf("unknown command %q (see airlock help): %w", args[0], errUsage)
}
