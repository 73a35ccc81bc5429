//go:build linux

package vmtest

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The real daemon in cgroup v2 guests: internal/e2e's limit, restart and
// fail-closed tests run `airlock serve` (a prebuilt static binary) in the
// guest, in two host shapes.

// vmDaemonTests are the e2e tests run in the guest: every limit through the
// daemon and across its restarts (TestLimits), adoption after SIGKILL and
// SIGTERM (TestRestartAdoption), a fork bomb capped at the pids limit and
// cleared through the API (TestForkBombRecovery), and the daemon failing
// closed when a controller is withheld, at start and at a create. Each must
// pass: a skip in the guest proves nothing.
var vmDaemonTests = []string{
	"TestLimits", "TestRestartAdoption", "TestForkBombRecovery",
	"TestRefuseWithheldController", "TestCreateFailsClosed",
}

// vmServiceTests run in the service shape only (the reliability tests,
// whose subject is the daemon, not the host's shape): the SIGKILL-under-load
// crash test (every 2xx checked against the store and the audit log), a
// dead agent noticed and released, every end the daemon decides on the
// record, per-sandbox stats read from cgroup v2 (a CPU burner at its
// limit, memory rising) and the health probes' policy (about 30 s for
// both on each kernel).
var vmServiceTests = []string{"TestCrashSafety", "TestAgentDeathReleased", "TestSystemEndsRecorded", "TestStats", "TestHealthProbe"}

// vmDaemonShapes are the shapes the daemon starts in (AIRLOCK_E2E_SHAPE):
// "service", in the guest's per-service cgroup that the keeper shares,
// like a host's service; "container", in a cgroup of its own that another
// process shares, in a cgroup namespace rooted there with its own cgroup2
// mount, like a container's process.
var vmDaemonShapes = []string{"service", "container"}

// resultRE matches a -test.v line with a test's result and time.
var resultRE = regexp.MustCompile(`(?m)--- (PASS|FAIL|SKIP): \S+ \([0-9.]+s\)`)

// TestVMDaemon runs vmDaemonTests on each kernel in each shape, and
// vmServiceTests in the service shape. The
// sandboxes' host template is the guest's own /usr: busybox and HostTools
// (bash for the fork bomb, coreutils' head and tail for the memory bomb).
func TestVMDaemon(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	Require(t, kernels()[0]) // skip before building where no guest boots
	airlock := GoBuild(t, "github.com/airlock-sandbox/airlock/cmd/airlock")
	e2e := GoTest(t, "github.com/airlock-sandbox/airlock/internal/e2e")
	const timeout = 4 * time.Minute
	forEachKernel(t, func(t *testing.T, vm VM) {
		for _, shape := range vmDaemonShapes {
			t.Run(shape, func(t *testing.T) {
				tests := vmDaemonTests
				if shape == "service" {
					tests = append(slices.Clone(tests), vmServiceTests...)
				}
				res := run(t, vm, Guest{
					Files: []File{
						{Guest: "/opt/airlock", Host: airlock},
						{Guest: "/opt/e2e.test", Host: e2e},
					},
					FromHost: HostTools,
					Env:      []string{"AIRLOCK_E2E_BIN=/opt/airlock", "AIRLOCK_E2E_SHAPE=" + shape},
					Command: []string{"/opt/e2e.test", "-test.v", "-test.count=1", "-test.timeout=" + timeout.String(),
						"-test.run", "^(" + strings.Join(tests, "|") + ")$"},
					Timeout: timeout + 30*time.Second,
				})
				if res.ExitCode != 0 {
					t.Errorf("internal/e2e in the guest exited %d; failed: %v\n%s", res.ExitCode, failedTests(res.Output), res.Output)
				}
				requirePassed(t, res.Output, tests...)
				t.Logf("in the guest: %s", strings.Join(resultRE.FindAllString(string(res.Output), -1), "; "))
			})
		}
	})
}
