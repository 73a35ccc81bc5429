package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/backends"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// demo creates a sandbox from the host template, runs argv in it with the
// terminal's stdin/stdout/stderr, destroys it and returns the command's
// exit code.
func demo(ctx context.Context, dataDir string, argv []string) (int, error) {
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		return 1, err
	}
	// Sandbox uids must traverse the data dir to reach template layers.
	if err := os.Chmod(dataDir, 0o711); err != nil {
		return 1, err
	}
	rt, err := backends.Default().New(backends.Options{StateDir: filepath.Join(dataDir, "sandboxes")})
	if err != nil {
		return 1, err
	}
	host, err := template.NewHost(template.HostOptions{CacheDir: filepath.Join(dataDir, "templates", "host")})
	if err != nil {
		return 1, err
	}
	defer host.Close()
	rootfs, err := host.Resolve(ctx)
	if err != nil {
		return 1, err
	}
	id := fmt.Sprintf("demo-%d", time.Now().UnixNano()%1e12)
	inst, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: rootfs})
	if err != nil {
		return 1, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := inst.Destroy(dctx); err != nil {
			fmt.Fprintln(os.Stderr, "airlock: destroy:", err)
		}
	}()
	c := agentclient.New(inst.Dial)
	defer c.Close()
	res, err := c.Exec(ctx, agentclient.ExecRequest{Argv: argv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		return 1, err
	}
	fmt.Fprintf(os.Stderr, "airlock: sandbox %s: %s (exit %d) in %v, cpu %v, peak memory %d KiB\n",
		id, res.Status, res.ExitCode, res.Duration.Round(time.Microsecond), res.CPUTime.Round(time.Microsecond), res.PeakMemoryBytes>>10)
	if res.ExitCode < 0 {
		return 128 + res.Signal, nil
	}
	return res.ExitCode, nil
}

// demoMain parses `airlock demo [--data-dir DIR] -- CMD...`.
func demoMain(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "/var/lib/airlock", "state directory")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if fs.NArg() == 0 {
		return 2, errors.New("usage: airlock demo [--data-dir DIR] -- COMMAND [ARG...]")
	}
	return demo(ctx, *dataDir, fs.Args())
}
