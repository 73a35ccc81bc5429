// Command airlock is Airlock's single binary: the in-sandbox agent and,
// for now, a one-shot demo that runs a command in a fresh sandbox. The
// daemon and the CLI verbs come with the server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/runtime/linux"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == linux.AgentCommand {
		os.Exit(linux.RunAgent())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("usage: airlock demo [--data-dir DIR] -- COMMAND [ARG...]")
	}
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		dataDir := fs.String("data-dir", "/var/lib/airlock", "state directory")
		if err := fs.Parse(args[1:]); err != nil {
			return 2, err
		}
		if fs.NArg() == 0 {
			return 2, errors.New("usage: airlock demo [--data-dir DIR] -- COMMAND [ARG...]")
		}
		return demo(ctx, *dataDir, fs.Args())
	default:
		return 2, fmt.Errorf("unknown command %q", args[0])
	}
}
