package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/hostcheck"
)

// doctor runs `airlock doctor args` in-process against a host that gives
// what report says, and returns its exit code, output and the options the
// checks were asked with.
func doctor(t *testing.T, report hostcheck.Report, env map[string]string, args ...string) (int, string, hostcheck.Options, error) {
	t.Helper()
	var out bytes.Buffer
	var got hostcheck.Options
	c := &cli{stdout: &out, getenv: func(k string) string { return env[k] },
		hostCheck: func(_ context.Context, o hostcheck.Options) hostcheck.Report { got = o; return report }}
	code, err := c.main(context.Background(), append([]string{"doctor"}, args...))
	return code, out.String(), got, err
}

var (
	okCheck   = hostcheck.Check{Name: "kernel", Status: hostcheck.OK, Mandatory: true, Found: "Linux 6.1.0", Meaning: "needs 5.12"}
	warnCheck = hostcheck.Check{Name: "landlock", Status: hostcheck.Warn, Found: "not available", Meaning: "no Landlock", Fix: "boot with lsm=landlock"}
	failCheck = hostcheck.Check{Name: "user_namespaces", Status: hostcheck.Fail, Mandatory: true, Found: "namespaces disabled: user",
		Meaning: "each sandbox has a user namespace", Fix: "sysctl -w user.max_user_namespaces=15000"}
)

func TestDoctor(t *testing.T) {
	healthy := hostcheck.Report{OK: true, Checks: []hostcheck.Check{okCheck}}
	degraded := hostcheck.Report{OK: true, Checks: []hostcheck.Check{okCheck, warnCheck}}
	broken := hostcheck.Report{OK: false, Checks: []hostcheck.Check{okCheck, warnCheck, failCheck}}
	for _, tt := range []struct {
		name   string
		report hostcheck.Report
		args   []string
		code   int
		want   []string
		absent []string
	}{
		{"healthy", healthy, nil, 0, []string{
			"Data dir: /var/lib/airlock\n",
			"CHECK   STATUS  REQUIRED  FOUND\nkernel  ok      yes       Linux 6.1.0\n",
			"This host can run Airlock.\n",
		}, []string{"means:", "Warnings", "Failed"}},
		{"verbose", healthy, []string{"-v"}, 0, []string{"OK:\n  kernel: Linux 6.1.0\n    means: needs 5.12\n"}, []string{"fix:"}},
		{"degraded", degraded, nil, 0, []string{
			"landlock  warn    no        not available\n",
			"Warnings (airlock serve starts without these):\n  landlock: not available\n    means: no Landlock\n    fix:   boot with lsm=landlock\n",
			"This host can run Airlock, degraded: 1 warning(s).\n",
		}, []string{"Failed"}},
		{"broken", broken, nil, 1, []string{
			"user_namespaces  fail    yes       namespaces disabled: user\n",
			"Failed (airlock serve refuses to start):\n  user_namespaces: namespaces disabled: user\n    means: each sandbox has a user namespace\n    fix:   sysctl -w user.max_user_namespaces=15000\n",
			"This host cannot run Airlock safely: 1 mandatory check(s) failed.\n",
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, opts, err := doctor(t, tt.report, nil, tt.args...)
			if code != tt.code || err != nil {
				t.Errorf("exit %d, %v; want %d", code, err, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(out, a) {
					t.Errorf("output has %q:\n%s", a, out)
				}
			}
			if opts.DataDir != "/var/lib/airlock" || opts.MaxSandboxes != 500 {
				t.Errorf("checked with %+v", opts)
			}
		})
	}
}

func TestDoctorJSON(t *testing.T) {
	broken := hostcheck.Report{OK: false, Checks: []hostcheck.Check{okCheck, failCheck}}
	code, out, opts, err := doctor(t, broken, map[string]string{"AIRLOCK_DATA_DIR": "/srv/airlock"}, "--json", "--max-sandboxes", "7")
	if code != 1 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if opts.DataDir != "/srv/airlock" || opts.MaxSandboxes != 7 {
		t.Errorf("checked with %+v", opts)
	}
	var got doctorReport
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if got.Runtime != "linux" || got.Version == "" || got.DataDir != "/srv/airlock" || got.Host.OK ||
		len(got.Host.Checks) != 2 || got.Host.Checks[1] != failCheck {
		t.Errorf("JSON report %+v", got)
	}
	if code, _, _, _ := doctor(t, hostcheck.Report{OK: true}, nil, "--json"); code != 0 {
		t.Errorf("exit %d for a healthy host", code)
	}
}

func TestDoctorUsage(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"--data-dir", "relative"}, {"--max-sandboxes", "-1"}, {"--bogus"}} {
		code, _, _, err := doctor(t, hostcheck.Report{OK: true}, nil, args...)
		if code != 2 || !errors.Is(err, errUsage) {
			t.Errorf("doctor %v: exit %d, %v; want a usage error", args, code, err)
		}
	}
}
