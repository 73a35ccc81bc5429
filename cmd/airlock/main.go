// Command airlock is Airlock's single binary: the daemon (`airlock serve`),
// the in-sandbox agent (`airlock agent`, started by the daemon) and the
// command-line client (every other verb).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/hostcheck"
	"github.com/airlock-sandbox/airlock/internal/runtime/backends"
)

func main() {
	if run, ok := backends.AgentEntry(os.Args[1:]); ok {
		os.Exit(run())
	}
	if len(os.Args) > 1 && os.Args[1] == hostcheck.ProbeCommand {
		os.Exit(hostcheck.RunProbe())
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

// errUsage marks an error as a usage error (exit code 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2, nil
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:])
	case "demo":
		return demoMain(ctx, args[1:])
	case "help", "-h", "--help":
		if args[0] == "help" && len(args) > 1 {
			// airlock help CMD [SUB]: that command's own help.
			return run(ctx, append(args[1:], "--help"))
		}
		fmt.Print(usage)
		return 0, nil
	case "version", "--version":
		return printVersion(os.Stdout, args[1:])
	default:
		return cliMain(ctx, args)
	}
}

const usage = `usage: airlock COMMAND [ARG...]

Daemon:
  serve                     run the daemon (see airlock serve --help)

Client (AIRLOCK_URL, AIRLOCK_API_KEY):
  sandbox create|ls|get|rm|extend
  prune                     remove your failed sandboxes
  exec ID -- CMD...         run a command in a sandbox
  run [-t TEMPLATE] -- CMD...
                            create a sandbox, run a command, destroy it
  cp SRC DST                copy files (sandbox paths are ID:PATH)
  files ls|mkdir|rm         list, make and remove files in a sandbox
  shell ID [-- CMD...]      interactive shell, or an interactive command
  ps ID, kill ID PID...     a sandbox's processes
  code [-l LANG] [-c CODE] ID
                            run code in a stateful Python/JavaScript/bash context
                            (a REPL without -c)
  contexts ls|rm|restart|interrupt
                            a sandbox's code contexts
  template build|import|ls|inspect|rm
                            templates: from an image, Debian, an Airfile, or
                            a docker save archive or OCI layout
  audit [verify]            the audit log (newest first; --tail, --follow)
  keys create|ls|revoke     API keys
  tenants create|ls|rm      tenants (the operator's)

Other:
  doctor                    check that this host can run Airlock (as root)
  completion bash|zsh       a shell completion script
  version [--json]          this binary's version
  help [COMMAND]            this text, or a command's own help
  demo -- CMD...            run one command in a fresh sandbox without a daemon
`
