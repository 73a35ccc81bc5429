//go:build linux

package vmtest

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The suites of other packages, run in cgroup v2 guests from the shape that
// failed on v2 hosts: a nested per-service cgroup that another process
// shares.

// runSuite runs a package's test binary in the guest with args and fails t
// with the guest's failing tests when it does not pass.
func runSuite(t *testing.T, vm VM, pkg string, timeout time.Duration, args ...string) []byte {
	t.Helper()
	bin := GoTest(t, pkg)
	name := "/opt/" + pkg[strings.LastIndex(pkg, "/")+1:] + ".test"
	res := run(t, vm, Guest{
		Files:    []File{{Guest: name, Host: bin}},
		FromHost: HostTools,
		Command:  append([]string{name, "-test.v", "-test.count=1", "-test.timeout=" + timeout.String()}, args...),
		Timeout:  timeout + 30*time.Second,
	})
	if res.ExitCode != 0 {
		// The whole output first, then what failed and its lines: CI
		// shows a log's tail.
		failed := failedTests(res.Output)
		t.Errorf("%s\n%s in the guest exited %d; failed: %v\n%s", res.Output, pkg, res.ExitCode, failed, failureLines(res.Output, failed))
	}
	return res.Output
}

// failureLines returns, for each failed test, the lines of a -test.v
// output from its "=== RUN" to its "--- FAIL", at most 30 each.
func failureLines(out []byte, failed []string) string {
	var b strings.Builder
	lines := strings.Split(string(out), "\n")
	for _, name := range failed {
		start := -1
		for i, l := range lines {
			if strings.TrimSpace(l) == "=== RUN   "+name {
				start = i
			}
			if start >= 0 && strings.HasPrefix(strings.TrimSpace(l), "--- FAIL: "+name+" ") {
				block := lines[start : i+1]
				if len(block) > 30 {
					block = append(append([]string{}, block[:10]...), append([]string{"\t..."}, block[len(block)-19:]...)...)
				}
				b.WriteString(strings.Join(block, "\n") + "\n")
				break
			}
		}
	}
	return b.String()
}

// requirePassed fails t unless a -test.v output reports each of tests
// passed (a test that skipped in the guest proves nothing).
func requirePassed(t *testing.T, out []byte, tests ...string) {
	t.Helper()
	for _, name := range tests {
		if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(name) + ` `).Match(out) {
			t.Errorf("%s did not pass in the guest", name)
		}
	}
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failedTests lists the tests a -test.v output reports failed.
func failedTests(out []byte) []string {
	var names []string
	for _, m := range failRE.FindAllSubmatch(out, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// TestVMCgroups runs internal/cgroups's tests on a v2-only kernel: the v2
// manager and delegation under a daemon that is not in the root cgroup.
func TestVMCgroups(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	forEachKernel(t, func(t *testing.T, vm VM) {
		out := runSuite(t, vm, "github.com/airlock-sandbox/airlock/internal/cgroups", 2*time.Minute)
		// The v2-only tests skip on a v1 host: here they must run.
		requirePassed(t, out, "TestNewManagerSettlesOwnCgroup", "TestExecOOMKillsTree/v2")
	})
}

// vmRuntimeTests are the native runtime's tests that depend on the cgroup
// version or the kernel: limits, tree kill, the sandbox-wide caps, destroy
// at any depth, the syscall surface, what /proc/self/cgroup shows, leaks,
// and what the agent's descriptors and mountinfo name. The containment suite's many execs take over a minute under TCG:
// it runs on the host.
const vmRuntimeTests = "TestConformance/(Lifecycle|Exec|Limits|Recover|AgentExit)|TestAttackForkBomb|TestAttackMemoryBomb|TestThreadsAndFDsPerSandbox|" +
	"TestAttackInfiniteLoopTreeKilled|TestAttackHostVisibility|TestAttackSyscallsBlocked|TestAttackOutputFlood|" +
	"TestSandboxCgroupCaps|TestUploadBeyondMemoryCap|TestDestroyDeepCgroupTree|TestNoLeaksAfterCycles|" +
	// Layers that cannot be id-mapped here (tmpfs before 6.3) are bound:
	// no host path in mountinfo or in a descriptor of the agent.
	"TestAttackContainment/sandbox/(agent-dirs-detached|file-api-host-details)"

// TestVMRuntimeLimits runs vmRuntimeTests on a v2-only kernel, the
// daemon's process in a per-service cgroup another process shares. The
// host template is the guest's own /usr: busybox and HostTools.
func TestVMRuntimeLimits(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	forEachKernel(t, func(t *testing.T, vm VM) {
		runSuite(t, vm, "github.com/airlock-sandbox/airlock/internal/runtime/linux", 3*time.Minute,
			"-test.run", vmRuntimeTests, "-test.short")
	})
}
