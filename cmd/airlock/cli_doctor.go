package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/internal/daemon"
	"github.com/airlock-sandbox/airlock/internal/hostcheck"
)

const doctorUsage = `usage: airlock doctor [--data-dir DIR] [--max-sandboxes N] [-v] [--json]

Checks this host, without a daemon, for each guarantee Airlock's isolation
relies on: the kernel, cgroups and their controllers, user namespaces,
seccomp, overlayfs in a user namespace, id-mapped mounts, Landlock, swap
accounting, the data dir's space and the open-file limit. Run it as root:
some checks create a user namespace and mount in it (nothing is left).

Exit status: 1 when a mandatory check fails (airlock serve would refuse to
start), 0 otherwise, warnings included; 2 for a usage error.
`

// doctorReport is what doctor --json prints: GET /v1/info's shape, without
// the daemon's start time.
type doctorReport struct {
	Version string           `json:"version"`
	Runtime string           `json:"runtime"`
	DataDir string           `json:"data_dir"`
	Host    hostcheck.Report `json:"host"`
}

// doctorCmd runs `airlock doctor`.
func (c *cli) doctorCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("doctor", doctorUsage)
	dataDir := c.getenv(envDataDir)
	if dataDir == "" {
		dataDir = defaultDataDir
	}
	fs.StringVar(&dataDir, "data-dir", dataDir, "the daemon's data `DIR` (env AIRLOCK_DATA_DIR)")
	maxSandboxes := fs.Int("max-sandboxes", daemon.Defaults().MaxSandboxes, "the daemon's sandbox cap, compared with the namespace limits")
	verbose := fs.Bool("v", false, "say what every check means, not only those that warn or fail")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) > 0 {
		return 2, usagef("doctor takes no arguments (see airlock doctor --help)")
	}
	if !filepath.IsAbs(dataDir) {
		return 2, usagef("--data-dir %q: not an absolute path", dataDir)
	}
	if *maxSandboxes < 0 {
		return 2, usagef("--max-sandboxes %d: negative", *maxSandboxes)
	}
	check := c.hostCheck
	if check == nil {
		check = hostcheck.Run
	}
	rep := doctorReport{
		Version: daemon.Version(),
		Runtime: "linux",
		DataDir: filepath.Clean(dataDir),
		Host:    check(ctx, hostcheck.Options{DataDir: filepath.Clean(dataDir), MaxSandboxes: *maxSandboxes}),
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1, err
		}
	} else if err := writeDoctor(c.stdout, rep, *verbose); err != nil {
		return 1, err
	}
	if !rep.Host.OK {
		return 1, nil
	}
	return 0, nil
}

// writeDoctor prints rep for people: a header, one aligned line per check,
// then what each warning and failure means and how to fix it.
func writeDoctor(w io.Writer, rep doctorReport, verbose bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Airlock %s, %s runtime\n", rep.Version, rep.Runtime)
	fmt.Fprintf(&b, "Data dir: %s\n\n", rep.DataDir)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tREQUIRED\tFOUND")
	for _, ch := range rep.Host.Checks {
		req := "no"
		if ch.Mandatory {
			req = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ch.Name, ch.Status, req, ch.Found)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	section := func(title string, list []hostcheck.Check) {
		if len(list) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s\n", title)
		for _, ch := range list {
			fmt.Fprintf(&b, "  %s: %s\n", ch.Name, ch.Found)
			fmt.Fprintf(&b, "    means: %s\n", ch.Meaning)
			if ch.Fix != "" {
				fmt.Fprintf(&b, "    fix:   %s\n", ch.Fix)
			}
		}
	}
	failed, warned := rep.Host.Failed(), rep.Host.Warnings()
	section("Failed (airlock serve refuses to start):", failed)
	section("Warnings (airlock serve starts without these):", warned)
	if verbose {
		var rest []hostcheck.Check
		for _, ch := range rep.Host.Checks {
			if ch.Status == hostcheck.OK {
				rest = append(rest, ch)
			}
		}
		section("OK:", rest)
	}
	b.WriteString("\n")
	switch {
	case len(failed) > 0:
		fmt.Fprintf(&b, "This host cannot run Airlock safely: %d mandatory check(s) failed.\n", len(failed))
	case len(warned) > 0:
		fmt.Fprintf(&b, "This host can run Airlock, degraded: %d warning(s).\n", len(warned))
	default:
		b.WriteString("This host can run Airlock.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
