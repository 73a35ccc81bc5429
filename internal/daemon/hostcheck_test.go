package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/hostcheck"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A host that lacks a mandatory guarantee: the start is refused with one
// message naming it and the setting to change, before anything is locked,
// created or announced.
func TestRunRefusesHostMissingGuarantee(t *testing.T) {
	testutil.RequireRoot(t, "airlock serve checks the host after checking that it runs as root")
	cfg := Defaults()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Listen = "127.0.0.1:0"
	cfg.MaxSandboxes = 9
	var asked hostcheck.Options
	var announce, logs bytes.Buffer
	// A context already done: were the host not refused, Run would stop
	// at once instead of serving.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, cfg, Options{
		Log:      slog.New(slog.NewTextHandler(&logs, nil)),
		Announce: &announce,
		CheckHost: func(_ context.Context, o hostcheck.Options) hostcheck.Report {
			asked = o
			return hostcheck.Report{OK: false, Checks: []hostcheck.Check{
				{Name: "kernel", Status: hostcheck.OK, Mandatory: true, Found: "Linux 6.1"},
				{Name: "cgroup_controllers", Status: hostcheck.Fail, Mandatory: true,
					Found: "missing pids in the daemon's cgroup /system.slice/airlock.service",
					Fix:   "delegate the pids controller(s) to the daemon's cgroup: Delegate=yes"},
				{Name: "landlock", Status: hostcheck.Warn, Found: "not available", Fix: "lsm=landlock"},
			}}
		},
	})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Run = %v, want a failed precondition", err)
	}
	for _, want := range []string{
		"this host cannot run Airlock safely",
		"cgroup_controllers: missing pids in the daemon's cgroup /system.slice/airlock.service",
		"fix: delegate the pids controller(s) to the daemon's cgroup: Delegate=yes",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "landlock") || strings.Contains(err.Error(), "kernel") {
		t.Errorf("error names checks that did not fail:\n%v", err)
	}
	if asked.DataDir != cfg.DataDir || asked.MaxSandboxes != 9 {
		t.Errorf("host checked with %+v", asked)
	}
	if announce.Len() > 0 {
		t.Errorf("announced %q", announce.String())
	}
	ents, rerr := os.ReadDir(cfg.DataDir)
	if rerr != nil || len(ents) != 0 {
		t.Errorf("the refused start left %v in the data dir (%v)", ents, rerr)
	}
}

// Optional guarantees the host lacks start the daemon degraded: each is a
// warning in the log, naming what it means and the fix.
func TestAdmitHostWarns(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r := hostcheck.Report{OK: true, Checks: []hostcheck.Check{
		{Name: "kernel", Status: hostcheck.OK, Mandatory: true, Found: "Linux 6.1"},
		{Name: "landlock", Status: hostcheck.Warn, Found: "not available", Meaning: "no Landlock", Fix: "boot with lsm=landlock"},
	}}
	if err := admitHost(r, log); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{
		`level=WARN msg="host check: starting without landlock" found="not available" means="no Landlock" fix="boot with lsm=landlock"`,
		`level=INFO msg="host checked" warnings=1 kernel="Linux 6.1"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	r.Checks = append(r.Checks, hostcheck.Check{Name: "seccomp", Status: hostcheck.Fail, Mandatory: true, Found: "none", Fix: "CONFIG_SECCOMP"})
	if err := admitHost(r, log); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "seccomp: none; fix: CONFIG_SECCOMP") {
		t.Errorf("admitHost with a failure: %v", err)
	}
}
