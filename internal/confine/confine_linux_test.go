package confine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// Apply cannot be undone, so each scenario runs in a re-executed copy of the
// test binary: TestMain sees the environment variables below, applies the
// test policy (unless it is a control run), runs the scenario and prints a
// childReport as JSON.
const (
	envScenario = "AIRLOCK_CONFINE_TEST_SCENARIO"
	envDir      = "AIRLOCK_CONFINE_TEST_DIR"
	envConfine  = "AIRLOCK_CONFINE_TEST_CONFINE" // "1": apply; "0": control run
	envSibling  = "AIRLOCK_CONFINE_TEST_SIBLING" // pid of a process outside the domain
	envAbstract = "AIRLOCK_CONFINE_TEST_ABSTRACT"
	childFD     = 3 // the "fdd" directory, passed as ExtraFiles[0]
)

// childReport is what a scenario child prints.
type childReport struct {
	Result   string   `json:"result"`
	Skip     string   `json:"skip,omitempty"`
	Error    string   `json:"error,omitempty"`
	ApplyNS  int64    `json:"apply_ns"`
	ABI      int      `json:"abi"`
	Missing  []string `json:"missing,omitempty"`
	Seccomps int      `json:"seccomp_instructions"`
}

func TestMain(m *testing.M) {
	if name := os.Getenv(envScenario); name != "" {
		os.Exit(runChild(name))
	}
	if mode := os.Getenv(envDomain); mode != "" {
		os.Exit(runDomainChild(mode))
	}
	os.Exit(m.Run())
}

// testPolicy is the policy the scenario children apply; dir is laid out by
// newFixture.
func testPolicy(dir string) Policy {
	return Policy{
		ReadOnly: []string{"/bin", "/usr", "/lib", "/lib64", "/etc", "/proc",
			filepath.Join(dir, "ro"), "/nonexistent-airlock-confine"},
		Writable:       []string{filepath.Join(dir, "rw")},
		WritableFDs:    []int{childFD},
		DevicePaths:    []string{"/dev/null", "/dev/zero", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"},
		MinLandlockABI: 0,
	}
}

func runChild(name string) int {
	rep := childReport{}
	defer func() {
		_ = json.NewEncoder(os.Stdout).Encode(rep)
	}()
	sc, ok := scenarios[name]
	if !ok {
		rep.Error = "unknown scenario " + name
		return 2
	}
	env := scenarioEnv{dir: os.Getenv(envDir)}
	if sc.before != nil {
		if err := sc.before(&env); err != nil {
			rep.Error = "before: " + err.Error()
			return 2
		}
	}
	if os.Getenv(envConfine) == "1" {
		policy := testPolicy(env.dir)
		policy.KeepBounding = sc.keep
		res, err := Apply(policy)
		if errors.Is(err, errdefs.ErrNotSupported) {
			rep.Skip = err.Error()
			return 0
		}
		if err != nil {
			rep.Error = "apply: " + err.Error()
			return 2
		}
		rep.ApplyNS, rep.ABI, rep.Missing, rep.Seccomps = int64(res.Duration), res.LandlockABI, res.Missing, res.SeccompInstructions
	}
	// Apply gave each thread of this process a Landlock domain of its own
	// (see Apply's doc; the agent re-executes itself to have one): a child
	// forked from one thread and signalled or inspected from another sits
	// in a sibling domain, which Landlock's scoping refuses. A scenario
	// runs on one thread, as if from the agent's single domain; the
	// signal scenarios failed about 3 runs in 10 under CPU load without it.
	runtime.LockOSThread()
	rep.Result = sc.run(&env)
	return 0
}

// fixture is the state the parent shares with scenario children.
type fixture struct {
	dir      string
	fdd      *os.File
	sibling  *exec.Cmd
	abstract string
}

// newFixture lays out dir/{ro,rw,fdd,outside} and starts a process and an
// abstract unix socket that live outside any child's Landlock domain.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"ro", "rw", "fdd", "outside"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "file"), []byte("content of "+d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ro", "victim"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// uid 1000 must be able to run things from rw.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fdd, err := os.Open(filepath.Join(dir, "fdd"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fdd.Close() })

	sibling := exec.Command("sleep", "120")
	if err := sibling.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sibling.Process.Kill(); _ = sibling.Wait() })

	// An abstract unix socket; the backlog absorbs the control runs'
	// connections, nobody accepts them.
	abstract := fmt.Sprintf("@airlock-confine-test-%d", os.Getpid())
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(ln) })
	if err := unix.Bind(ln, &unix.SockaddrUnix{Name: abstract}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 64); err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, fdd: fdd, sibling: sibling, abstract: abstract}
}

// runScenario runs one scenario in a child, confined or not.
func (f *fixture) runScenario(t *testing.T, name string, confine bool) childReport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	flag := "0"
	if confine {
		flag = "1"
	}
	cmd.Env = append(os.Environ(),
		envScenario+"="+name, envDir+"="+f.dir, envConfine+"="+flag,
		fmt.Sprintf("%s=%d", envSibling, f.sibling.Process.Pid), envAbstract+"="+f.abstract)
	cmd.ExtraFiles = []*os.File{f.fdd}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep childReport
	if jerr := json.Unmarshal(lastLine(out), &rep); jerr != nil {
		t.Fatalf("scenario %s: %v (stdout %q, stderr %q, decode %v)", name, err, out, stderr.String(), jerr)
	}
	if err != nil || rep.Error != "" {
		t.Fatalf("scenario %s: %v: %s (stderr %q)", name, err, rep.Error, stderr.String())
	}
	return rep
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// TestScenarios applies the policy in a child per scenario and checks the
// outcome; where the control run (same scenario, no Apply) must differ, it
// checks that too, so each expectation is shown to come from Apply.
func TestScenarios(t *testing.T) {
	testutil.RequireRoot(t, "needs root: Apply empties the bounding set and the scenarios switch uids")
	f := newFixture(t)
	probe := f.runScenario(t, "status", true)
	if probe.Skip != "" {
		if !raceEnabled {
			// Only the race detector excuses a cgo test binary; anything
			// else means an import (such as net) linked cgo in.
			t.Fatalf("Apply unsupported in the test binary: %s", probe.Skip)
		}
		t.Skipf("Apply needs a binary without cgo, and -race links cgo: %s", probe.Skip)
	}
	t.Logf("Apply: %v, landlock ABI %d, %d BPF instructions, missing %v",
		time.Duration(probe.ApplyNS), probe.ABI, probe.Seccomps, probe.Missing)
	if probe.ABI == 0 {
		t.Log("kernel has no Landlock: the Landlock scenarios are skipped")
	}
	if len(probe.Missing) != 1 || probe.Missing[0] != "/nonexistent-airlock-confine" {
		t.Errorf("Missing = %v", probe.Missing)
	}
	if d := time.Duration(probe.ApplyNS); d <= 0 || d > 2*time.Second {
		t.Errorf("Apply took %v", d)
	}
	for _, name := range scenarioNames() {
		sc := scenarios[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if sc.landlock && probe.ABI < sc.minABI {
				t.Skipf("needs Landlock ABI %d, kernel has %d", sc.minABI, probe.ABI)
			}
			got := f.runScenario(t, name, true).Result
			if got != sc.want {
				t.Errorf("confined: got %q, want %q", got, sc.want)
			}
			if sc.control == controlNone {
				return
			}
			ctl := f.runScenario(t, name, false).Result
			switch {
			case ctl != sc.want:
			case sc.control == controlStrict:
				t.Errorf("control run also gives %q: the test does not show Apply's effect", ctl)
			default:
				t.Logf("control run also gives %q on this host", ctl)
			}
		})
	}
}

// TestApplyRejectsBadPolicyUnchanged checks that a policy failing late in
// preparation (a writable fd that is not a directory) leaves the process
// unconfined.
func TestApplyRejectsBadPolicyUnchanged(t *testing.T) {
	testutil.RequireRoot(t, "needs root")
	f := newFixture(t)
	rep := f.runScenario(t, "bad_fd", false)
	if raceEnabled && strings.Contains(rep.Result, "not supported") {
		t.Skip("Apply needs a binary without cgo, and -race links cgo")
	}
	if rep.Result != "invalid argument, unconfined" {
		t.Errorf("got %q", rep.Result)
	}
}

func TestStatusUnconfined(t *testing.T) {
	st, err := Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.SeccompMode != 0 || st.LandlockABI != 0 {
		t.Errorf("test process already confined: %+v", st)
	}
}

func TestParseStatus(t *testing.T) {
	full := "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n" +
		"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	st, err := parseStatus(strings.NewReader(full))
	if err != nil {
		t.Fatal(err)
	}
	want := State{SeccompMode: 2, NoNewPrivs: true, CapPrm: 0x1ffffffffff, CapEff: 0x1ffffffffff}
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	for _, bad := range []string{
		"", strings.Replace(full, "Seccomp:\t2\n", "", 1), strings.Replace(full, "CapBnd:\t0000000000000000", "CapBnd:\tzz", 1),
		strings.Replace(full, "NoNewPrivs:\t1", "NoNewPrivs:\t7", 1), full + "Seccomp:\t2\n",
	} {
		if _, err := parseStatus(strings.NewReader(bad)); err == nil {
			t.Errorf("parseStatus accepted %q", bad)
		}
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add("CapInh:\t0\nCapPrm:\t0\nCapEff:\t0\nCapBnd:\t0\nCapAmb:\t0\nNoNewPrivs:\t0\nSeccomp:\t0\n")
	f.Add("Seccomp:\t2\nSeccomp:\t2\n")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseStatus(strings.NewReader(s))
		if err == nil && (st.SeccompMode < 0 || st.SeccompMode > 2) {
			t.Errorf("seccomp mode %d", st.SeccompMode)
		}
	})
}

// TestApplyClone3NeedsNoUserNamespaces: Policy.Clone3 is refused, before
// anything changes, where user namespaces can still be created.
func TestApplyClone3NeedsNoUserNamespaces(t *testing.T) {
	b, err := os.ReadFile(maxUserNamespaces)
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		t.Skipf("%s: %q %v", maxUserNamespaces, b, err)
	}
	_, err = Apply(Policy{Clone3: true, FilesRestricted: true})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "max_user_namespaces") {
		t.Fatalf("Apply with clone3 where user namespaces are open: %v", err)
	}
	if st, err := Status(); err != nil || st.SeccompMode != 0 || st.NoNewPrivs {
		t.Fatalf("the refused Apply changed the process: %+v %v", st, err)
	}
}
