package interp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// The tests run real drivers in sandboxes of the fake runtime (a real
// agent whose processes run on the host), so they need python3, node and
// bash on the host; a missing interpreter skips its tests.

type hostSource struct{}

func (hostSource) Name() string { return "host" }
func (hostSource) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	return runtime.Rootfs{Layers: []string{"/nonexistent/host"}}, ctx.Err()
}

type testEnv struct {
	t   *testing.T
	rt  *runtimefake.Runtime
	sbm *sandbox.Manager
	m   *Manager
}

func newEnv(t *testing.T, lim Limits) *testEnv {
	t.Helper()
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	reg, err := template.NewRegistry(hostSource{})
	if err != nil {
		t.Fatal(err)
	}
	sbm, err := sandbox.New(rt, reg, sandbox.Config{StateDir: filepath.Join(t.TempDir(), "state"), HealthInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sbm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbm.Close(context.Background()) })
	m, err := New(Config{Sandboxes: sbm, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &testEnv{t: t, rt: rt, sbm: sbm, m: m}
}

func (e *testEnv) sandbox() string {
	e.t.Helper()
	sb, err := e.sbm.Create(context.Background(), sandbox.Spec{Env: map[string]string{"SANDBOX_VAR": "from-sandbox"}})
	if err != nil {
		e.t.Fatal(err)
	}
	return sb.ID
}

func need(t *testing.T, lang Language) {
	t.Helper()
	if _, err := exec.LookPath(interpreterName(lang)); err != nil {
		t.Skipf("%s is not installed", interpreterName(lang))
	}
}

// outcome is everything a cell produced.
type outcome struct {
	events  []Event
	stdout  string
	stderr  string
	order   string // "o:" and "e:" chunks in the order they came
	results []Result
	err     *ExecError
	end     End
}

func (o *outcome) main() string {
	for _, r := range o.results {
		if r.IsMain {
			return r.Text
		}
	}
	return ""
}

func (e *testEnv) run(id string, req RunRequest) *outcome {
	e.t.Helper()
	o, err := e.tryRun(id, req)
	if err != nil {
		e.t.Fatalf("run %q: %v", req.Code, err)
	}
	return o
}

func (e *testEnv) tryRun(id string, req RunRequest) (*outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	o := &outcome{}
	err := e.m.Run(ctx, id, req, func(ev Event) error {
		o.events = append(o.events, ev)
		switch ev.Type {
		case EventStdout:
			o.stdout += ev.Text
			o.order += "o:" + ev.Text
		case EventStderr:
			o.stderr += ev.Text
			o.order += "e:" + ev.Text
		case EventResult:
			o.results = append(o.results, *ev.Result)
		case EventError:
			o.err = ev.Error
		case EventEnd:
			o.end = *ev.End
		}
		return nil
	})
	if err == nil && (len(o.events) == 0 || o.events[len(o.events)-1].Type != EventEnd) {
		e.t.Fatalf("run %q: the last event is not the end: %+v", req.Code, o.events)
	}
	return o, err
}

func TestPythonCells(t *testing.T) {
	need(t, Python)
	e := newEnv(t, Limits{})
	id := e.sandbox()
	py := func(code string) *outcome { return e.run(id, RunRequest{Language: Python, Code: code}) }

	if o := py("x = 41\nimport os"); o.end.Status != StatusOK || len(o.results) != 0 || o.end.ExecutionCount != 1 {
		t.Fatalf("assignment: %+v", o)
	}
	o := py("x + 1")
	if o.main() != "42" || o.end.Status != StatusOK || o.end.ExecutionCount != 2 || o.end.ContextID == "" {
		t.Errorf("last expression: %+v", o)
	}
	// stdout and stderr, from Python and from a subprocess, in order
	// (raw writes to fds 1 and 2 keep their order per stream and before
	// the next write through sys.stdout or sys.stderr).
	o = py("import sys, subprocess\nprint('a')\nprint('b', file=sys.stderr)\n" +
		"subprocess.run(['sh', '-c', 'echo c; echo d >&2'])\nprint('e')\nos.write(1, b'f\\n')\nprint('g', file=sys.stderr)")
	if want := "o:a\ne:b\no:c\ne:d\no:e\no:f\ne:g\n"; o.order != want {
		t.Errorf("output order %q, want %q", o.order, want)
	}
	// An exception with its traceback; the namespace survives.
	o = py("def f():\n    raise ValueError('bad value')\nf()")
	if o.end.Status != StatusError || o.err == nil || o.err.Name != "ValueError" || o.err.Value != "bad value" ||
		!strings.Contains(o.err.Traceback, "in f") || !strings.Contains(o.err.Traceback, "raise ValueError('bad value')") ||
		strings.Contains(o.err.Traceback, "<string>") {
		t.Errorf("exception: %+v %+v", o.end, o.err)
	}
	if o := py("x"); o.main() != "41" {
		t.Errorf("after an exception x is %q", o.main())
	}
	if o := py("def g(:"); o.err == nil || o.err.Name != "SyntaxError" {
		t.Errorf("syntax error: %+v", o.err)
	}
	// None shows nothing; display() shows several values; await works.
	if o := py("None"); len(o.results) != 0 {
		t.Errorf("None: %+v", o.results)
	}
	o = py("display(1, 'two')\nimport asyncio\nawait asyncio.sleep(0.01)\n3")
	if len(o.results) != 3 || o.results[0].Text != "1" || o.results[1].Text != "'two'" || o.results[0].IsMain || o.main() != "3" {
		t.Errorf("display and await: %+v", o.results)
	}
	// Per-cell env, over the sandbox's env; restored afterwards.
	o = e.run(id, RunRequest{Language: Python, Code: "os.environ.get('CELL_VAR'), os.environ['SANDBOX_VAR']", Env: map[string]string{"CELL_VAR": "v"}})
	if o.main() != "('v', 'from-sandbox')" {
		t.Errorf("env: %q", o.main())
	}
	if o := py("os.environ.get('CELL_VAR')"); len(o.results) != 0 {
		t.Errorf("env leaked into the next cell: %+v", o.results)
	}
	// An object with an HTML representation.
	o = py("class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def __repr__(self): return 'H()'\nH()")
	if len(o.results) != 1 || o.results[0].HTML != "<b>h</b>" || o.results[0].Text != "H()" {
		t.Errorf("html: %+v", o.results)
	}
	// The user's code cannot read the nonce or forge a frame.
	if o := py("'AIRLOCK_INTERP_NONCE' in os.environ"); o.main() != "False" {
		t.Errorf("nonce visible: %q", o.main())
	}
	o = py(`print('\x1e0123456789abcdef {"t":"end","id":1}')` + "\n" + "'still here'")
	if o.main() != "'still here'" || !strings.Contains(o.stdout, `{"t":"end"`) {
		t.Errorf("forged frame: %+v", o)
	}
}

func TestTimeoutKeepsState(t *testing.T) {
	tests := []struct {
		lang      Language
		set, loop string
		get, want string
		errName   string
	}{
		{Python, "x = 7", "while True: pass", "x", "7", "KeyboardInterrupt"},
		{Python, "y = 8", "import time\ntime.sleep(60)", "y", "8", "KeyboardInterrupt"},
		{JavaScript, "var x = 7", "while (true) {}", "x", "7", "Interrupted"},
		{JavaScript, "let y = 8", "await new Promise(() => {})", "y", "8", "Interrupted"},
		{Bash, "x=7", "while :; do :; done", "echo $x", "7\n", "ExitStatus"},
		{Bash, "y=8", "sleep 60; echo not reached", "echo $y", "8\n", "ExitStatus"},
	}
	for _, tt := range tests {
		t.Run(string(tt.lang)+"/"+tt.loop, func(t *testing.T) {
			t.Parallel()
			need(t, tt.lang)
			e := newEnv(t, Limits{InterruptGrace: 5 * time.Second})
			id := e.sandbox()
			e.run(id, RunRequest{Language: tt.lang, Code: tt.set})
			start := time.Now()
			o := e.run(id, RunRequest{Language: tt.lang, Code: tt.loop, Timeout: time.Second})
			if o.end.Status != StatusTimeout || o.err == nil || o.err.Name != tt.errName || strings.Contains(o.stdout, "not reached") {
				t.Errorf("loop: status %s, error %+v, stdout %q", o.end.Status, o.err, o.stdout)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("the timeout took %v to end the cell", d)
			}
			o = e.run(id, RunRequest{Language: tt.lang, Code: tt.get})
			got := o.main()
			if tt.lang == Bash {
				got = o.stdout
			}
			if got != tt.want || o.end.Status != StatusOK {
				t.Errorf("after the timeout: %q (%s), want %q", got, o.end.Status, tt.want)
			}
		})
	}
}

func TestJavaScriptCells(t *testing.T) {
	need(t, JavaScript)
	e := newEnv(t, Limits{})
	id := e.sandbox()
	js := func(code string) *outcome { return e.run(id, RunRequest{Language: JavaScript, Code: code}) }
	js("let a = 1; var b = 2; function f(x) { return x * 10 }")
	if o := js("a + b + f(3)"); o.main() != "33" {
		t.Errorf("state: %q", o.main())
	}
	if o := js("const c = await Promise.resolve(5); c"); o.main() != "5" {
		t.Errorf("top-level await: %q", o.main())
	}
	if o := js("c * 2"); o.main() != "10" {
		t.Errorf("awaited declaration did not persist: %q", o.main())
	}
	o := js("({x: 1, y: [1, 2]})")
	if len(o.results) != 1 || string(o.results[0].JSON) != `{"x":1,"y":[1,2]}` {
		t.Errorf("object result: %+v", o.results)
	}
	o = js("console.log('out'); console.error('err'); process.stdout.write('w\\n'); undefined")
	if o.order != "o:out\ne:err\no:w\n" || len(o.results) != 0 {
		t.Errorf("console: %q %+v", o.order, o.results)
	}
	o = js("function boom() { throw new TypeError('nope') }\nboom()")
	if o.err == nil || o.err.Name != "TypeError" || o.err.Value != "nope" || !strings.Contains(o.err.Traceback, "boom") || o.end.Status != StatusError {
		t.Errorf("exception: %+v", o.err)
	}
	if o := js("require('child_process').execSync('echo child', {stdio: 'inherit'}); 1"); o.stdout != "child\n" || o.main() != "1" {
		t.Errorf("child output: %q %q", o.stdout, o.main())
	}
	if o := js("display.html('<i>x</i>')"); len(o.results) != 1 || o.results[0].HTML != "<i>x</i>" {
		t.Errorf("display.html: %+v", o.results)
	}
}

func TestBashCells(t *testing.T) {
	need(t, Bash)
	e := newEnv(t, Limits{})
	id := e.sandbox()
	sh := func(code string) *outcome { return e.run(id, RunRequest{Language: Bash, Code: code}) }
	sh("cd /tmp && x=5 && declare -A m=([k]=v) && f() { echo \"f:$1\"; }")
	if o := sh(`echo "$PWD $x ${m[k]}"; f 1`); !strings.HasSuffix(strings.TrimSpace(strings.Split(o.stdout, "\n")[0]), "/tmp 5 v") || !strings.Contains(o.stdout, "f:1") {
		t.Errorf("state: %q", o.stdout)
	}
	o := sh("echo out; echo err >&2; false")
	if o.stdout != "out\n" || o.stderr != "err\n" || o.end.Status != StatusError || o.end.ExitCode != 1 || o.err == nil {
		t.Errorf("exit status: %+v", o)
	}
	o = e.run(id, RunRequest{Language: Bash, Code: `echo "$CELL_VAR $SANDBOX_VAR"`, Env: map[string]string{"CELL_VAR": "c v"}})
	if o.stdout != "c v from-sandbox\n" || o.end.Status != StatusOK {
		t.Errorf("env: %q", o.stdout)
	}
	if o := sh(`echo "[${CELL_VAR-unset}]"`); o.stdout != "[unset]\n" {
		t.Errorf("env leaked: %q", o.stdout)
	}
	if o := sh("printf 'no newline'"); o.stdout != "no newline" {
		t.Errorf("output without a newline: %q", o.stdout)
	}
	// exit ends the cell, not the shell, also from inside functions.
	o = sh("g() { echo in-g; exit 4; echo not-reached; }\nh() { g; echo not-reached; }\nh\necho not-reached")
	if o.stdout != "in-g\n" || o.end.ExitCode != 4 || o.end.Status != StatusError {
		t.Errorf("exit: %q %+v", o.stdout, o.end)
	}
	if o := sh("(exit 5); echo \"sub $? $x\""); o.stdout != "sub 5 5\n" || o.end.Status != StatusOK {
		t.Errorf("exit in a subshell: %q %+v", o.stdout, o.end)
	}
}

func TestContexts(t *testing.T) {
	need(t, Python)
	e := newEnv(t, Limits{MaxContexts: 3, InterruptGrace: 2 * time.Second})
	id := e.sandbox()
	ctx := context.Background()
	c1, err := e.m.CreateContext(ctx, id, ContextOptions{Language: Python, Cwd: "/tmp", Env: map[string]string{"CTX_VAR": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !ValidContextID(c1.ID) || c1.Language != Python || c1.Default || c1.State != StateIdle {
		t.Errorf("created %+v", c1)
	}
	o := e.run(id, RunRequest{ContextID: c1.ID, Code: "import os; os.getcwd().endswith('/tmp'), os.environ['CTX_VAR']"})
	if o.main() != "(True, '1')" {
		t.Errorf("cwd and env: %q", o.main())
	}
	// The default context is another namespace.
	e.run(id, RunRequest{ContextID: c1.ID, Code: "only_in_c1 = 1"})
	if o := e.run(id, RunRequest{Language: Python, Code: "'only_in_c1' in dir()"}); o.main() != "False" {
		t.Errorf("default context sees c1's namespace: %q", o.main())
	}
	list, err := e.m.ListContexts(ctx, id)
	if err != nil || len(list) != 2 || list[0].ID != c1.ID || !list[1].Default || list[0].ExecutionCount != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// The cap.
	if _, err := e.m.CreateContext(ctx, id, ContextOptions{Language: Bash}); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatal(err)
	}
	if _, err := e.m.CreateContext(ctx, id, ContextOptions{Language: Python}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "code contexts, the most it may have") {
		t.Errorf("over the cap: %v", err)
	}
	// Bad requests.
	for _, req := range []RunRequest{
		{Code: "1"},
		{Language: "ruby", Code: "1"},
		{ContextID: "ctx-nope", Code: "1"},
		{ContextID: c1.ID, Language: JavaScript, Code: "1"},
		{Language: Python, Code: "a\x00b"},
		{Language: Python, Code: strings.Repeat("x", 600<<10)},
		{Language: Python, Code: "1", Env: map[string]string{"AIRLOCK_INTERP_NONCE": "x"}},
		{Language: Python, Code: "1", Timeout: 2 * time.Hour},
	} {
		if _, err := e.tryRun(id, req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v", req.ContextID+string(req.Language), err)
		}
	}
	if _, err := e.tryRun(id, RunRequest{ContextID: "ctx-aaaaaaaaaaaaaaaa", Code: "1"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown context: %v", err)
	}

	// One cell at a time: a second call gets a conflict at once.
	started := make(chan struct{})
	done := make(chan *outcome)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		o := &outcome{}
		_ = e.m.Run(ctx, id, RunRequest{ContextID: c1.ID, Code: "print('go', flush=True)\nimport time\ntime.sleep(60)"}, func(ev Event) error {
			if ev.Type == EventStdout {
				close(started)
			}
			if ev.Type == EventEnd {
				o.end = *ev.End
			}
			if ev.Type == EventError {
				o.err = ev.Error
			}
			return nil
		})
		done <- o
	}()
	<-started
	if _, err := e.tryRun(id, RunRequest{ContextID: c1.ID, Code: "1"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("concurrent cell: %v", err)
	}
	if l, _ := e.m.ListContexts(ctx, id); l[0].State != StateBusy {
		t.Errorf("state while running: %s", l[0].State)
	}
	// Interrupt ends it; the context lives on.
	if ok, err := e.m.InterruptContext(ctx, id, c1.ID); err != nil || !ok {
		t.Errorf("interrupt: %v %v", ok, err)
	}
	if o := <-done; o.end.Status != StatusInterrupted || o.err == nil || o.err.Name != "KeyboardInterrupt" {
		t.Errorf("interrupted cell: %+v %+v", o.end, o.err)
	}
	if ok, err := e.m.InterruptContext(ctx, id, c1.ID); err != nil || ok {
		t.Errorf("interrupt when idle: %v %v", ok, err)
	}
	if o := e.run(id, RunRequest{ContextID: c1.ID, Code: "only_in_c1"}); o.main() != "1" {
		t.Errorf("after the interrupt: %q", o.main())
	}

	// A context that dies reports it; a named one needs a restart, which
	// starts with a fresh namespace.
	o = e.run(id, RunRequest{ContextID: c1.ID, Code: "os._exit(3)"})
	if o.end.Status != StatusDied || o.err == nil || o.err.Name != "ContextDied" || !strings.Contains(o.err.Value, "code 3") {
		t.Errorf("died: %+v %+v", o.end, o.err)
	}
	if _, err := e.tryRun(id, RunRequest{ContextID: c1.ID, Code: "1"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("run on a dead context: %v", err)
	}
	if l, _ := e.m.ListContexts(ctx, id); l[0].State != StateDead || l[0].Error == "" {
		t.Errorf("dead state: %+v", l[0])
	}
	if _, err := e.m.RestartContext(ctx, id, c1.ID); err != nil {
		t.Fatal(err)
	}
	if o := e.run(id, RunRequest{ContextID: c1.ID, Code: "import os\n'only_in_c1' in dir(), os.environ['CTX_VAR']"}); o.main() != "(False, '1')" {
		t.Errorf("after restart: %q", o.main())
	}
	// A dead default context restarts by itself.
	e.run(id, RunRequest{Language: Python, Code: "import os; os._exit(0)"})
	if o := e.run(id, RunRequest{Language: Python, Code: "2 + 2"}); o.main() != "4" {
		t.Errorf("default context after death: %+v", o)
	}
	// Delete.
	if err := e.m.DeleteContext(ctx, id, c1.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.DeleteContext(ctx, id, c1.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, err := e.tryRun(id, RunRequest{ContextID: c1.ID, Code: "1"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("run on a deleted context: %v", err)
	}
}

func TestOutputLimits(t *testing.T) {
	need(t, Python)
	need(t, Bash)
	e := newEnv(t, Limits{MaxOutputBytes: 64 << 10, MaxResultBytes: 256 << 10, MaxImageBytes: 1000, InterruptGrace: 2 * time.Second})
	id := e.sandbox()
	o := e.run(id, RunRequest{Language: Python, Code: "for i in range(100000): print(i)\n'done'"})
	if !o.end.OutputTruncated || len(o.stdout) > 64<<10 || o.main() != "'done'" || o.end.Status != StatusOK {
		t.Errorf("python output cap: %d bytes, %+v", len(o.stdout), o.end)
	}
	o = e.run(id, RunRequest{Language: Python, Code: "for i in range(5): display('x' * 100000)"})
	if !o.end.ResultsTruncated || len(o.results) != 5 || o.results[4].Omitted == "" {
		t.Errorf("results cap: %+v", o.end)
	}
	o = e.run(id, RunRequest{Language: Python, Code: "class P:\n    def _repr_png_(self): return b'\\x89PNG' + b'0' * 5000\nP()"})
	if len(o.results) != 1 || o.results[0].PNG != "" || o.results[0].Omitted == "" {
		t.Errorf("image cap: %+v", o.results)
	}
	// A command that writes without end is stopped; the context survives.
	e.run(id, RunRequest{Language: Bash, Code: "keep=1"})
	start := time.Now()
	o = e.run(id, RunRequest{Language: Bash, Code: "yes", Timeout: 30 * time.Second})
	if o.end.Status != StatusInterrupted || !o.end.OutputTruncated || o.err == nil || o.err.Name != "OutputLimitExceeded" || time.Since(start) > 10*time.Second {
		t.Errorf("yes: %+v %+v after %v", o.end, o.err, time.Since(start))
	}
	if o := e.run(id, RunRequest{Language: Bash, Code: "echo $keep"}); o.stdout != "1\n" {
		t.Errorf("after yes: %q %+v", o.stdout, o.err)
	}
}

func TestOutputBudget(t *testing.T) {
	need(t, Python)
	e := newEnv(t, Limits{})
	e.m.budget = 256 << 10
	id := e.sandbox()
	c, err := e.m.CreateContext(context.Background(), id, ContextOptions{Language: Python})
	if err != nil {
		t.Fatal(err)
	}
	e.run(id, RunRequest{Language: Python, Code: "kept = 1"})
	e.run(id, RunRequest{ContextID: c.ID, Code: "kept = 1"})
	// Each context goes over its budget in its second cell.
	for _, req := range []RunRequest{{Language: Python}, {ContextID: c.ID}} {
		for i := range 2 {
			req.Code = "print('x' * 200000)"
			o := e.run(id, req)
			if spent := strings.Contains(o.stderr, "64 MiB of output"); spent != (i == 1) || o.end.Status != StatusOK {
				t.Errorf("%+v cell %d: stderr %q status %s", req, i, o.stderr, o.end.Status)
			}
		}
	}
	// The default context starts afresh; the named one must be restarted.
	if o := e.run(id, RunRequest{Language: Python, Code: "'kept' in dir()"}); o.main() != "False" {
		t.Errorf("default context after its budget: %+v", o)
	}
	if _, err := e.tryRun(id, RunRequest{ContextID: c.ID, Code: "1"}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "budget") {
		t.Errorf("named context after its budget: %v", err)
	}
}

func TestStartFailure(t *testing.T) {
	need(t, Python)
	e := newEnv(t, Limits{})
	id := e.sandbox()
	// A sandbox whose PATH has no interpreter: a clear error, no context kept.
	sb, err := e.sbm.Create(context.Background(), sandbox.Spec{Env: map[string]string{"PATH": "/nonexistent"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.tryRun(sb.ID, RunRequest{Language: Python, Code: "1"}); !errors.Is(err, errdefs.ErrFailedPrecondition) ||
			!strings.Contains(err.Error(), "python3") {
			t.Errorf("no python3: %v", err)
		}
	}
	if l, err := e.m.ListContexts(context.Background(), sb.ID); err != nil || len(l) != 0 {
		t.Errorf("contexts after failed starts: %+v %v", l, err)
	}
	if _, err := e.m.CreateContext(context.Background(), sb.ID, ContextOptions{Language: Python}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("create without python3: %v", err)
	}
	if _, err := e.m.CreateContext(context.Background(), id, ContextOptions{Language: Python, Cwd: "/no/such/dir"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("create in a missing directory: %v", err)
	}
}

// sandboxPath gives the test a sandbox's PATH, whose python3 is the host
// template's /usr/bin/python3, where this machine's PATH puts another one
// first (pyenv's): the fake runtime runs kernels with the test's PATH.
func sandboxPath(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		t.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
	}
}

func TestMatplotlibAndPandas(t *testing.T) {
	sandboxPath(t)
	need(t, Python)
	if exec.Command("python3", "-c", "import matplotlib, pandas").Run() != nil {
		t.Skip("python3-matplotlib and python3-pandas are not installed")
	}
	e := newEnv(t, Limits{})
	id := e.sandbox()
	o := e.run(id, RunRequest{Language: Python, Code: "import matplotlib.pyplot as plt\n" +
		"fig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 2, 3], [2, 4, 1])\nplt.show()\n" +
		"plt.figure(figsize=(2, 1), dpi=50)\nplt.bar(['a'], [1])\nprint('drawn')"})
	if o.end.Status != StatusOK || len(o.results) != 2 || o.stdout != "drawn\n" {
		t.Fatalf("figures: %+v %+v stdout %q stderr %q", o.end, o.err, o.stdout, o.stderr)
	}
	for i, want := range [][2]int{{400, 300}, {100, 50}} {
		b, err := base64.StdEncoding.DecodeString(o.results[i].PNG)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("figure %d is not a PNG: %v", i, err)
		}
		if s := img.Bounds().Size(); s.X != want[0] || s.Y != want[1] {
			t.Errorf("figure %d is %v, want %v", i, s, want)
		}
	}
	if o := e.run(id, RunRequest{Language: Python, Code: "len(plt.get_fignums())"}); o.main() != "0" {
		t.Errorf("figures left open: %q", o.main())
	}
	o = e.run(id, RunRequest{Language: Python, Code: "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"})
	if len(o.results) != 1 || !strings.Contains(o.results[0].HTML, "<table") || !strings.Contains(o.results[0].Text, "a  b") {
		t.Errorf("DataFrame: %+v", o.results)
	}
}

func TestAdoptionAndSandboxEnd(t *testing.T) {
	need(t, Python)
	e := newEnv(t, Limits{})
	id := e.sandbox()
	ctx := context.Background()
	c, err := e.m.CreateContext(ctx, id, ContextOptions{Language: Python})
	if err != nil {
		t.Fatal(err)
	}
	e.run(id, RunRequest{ContextID: c.ID, Code: "kept = 'yes'"})
	e.run(id, RunRequest{Language: Python, Code: "d = 1"})
	// A new Manager (a restarted daemon) adopts both kernels.
	e.m.Close()
	if _, err := e.tryRun(id, RunRequest{Language: Python, Code: "1"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("run after Close: %v", err)
	}
	m2, err := New(Config{Sandboxes: e.sbm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Close)
	e.m = m2
	if o := e.run(id, RunRequest{ContextID: c.ID, Code: "kept"}); o.main() != "'yes'" {
		t.Errorf("adopted context: %+v", o)
	}
	if o := e.run(id, RunRequest{Language: Python, Code: "d"}); o.main() != "1" {
		t.Errorf("adopted default context: %+v %+v", o.results, o.err)
	}
	// The sandbox goes: so do its contexts.
	if err := e.sbm.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.ListContexts(ctx, id); err == nil {
		t.Error("contexts of a destroyed sandbox are listed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m2.mu.Lock()
		n := len(m2.boxes)
		m2.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the destroyed sandbox's contexts are still kept")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIdleTimeoutWithContexts: a running cell keeps its sandbox from its
// idle timeout (the keepalive marks activity through the sandbox
// manager), while a kernel that waits for its next cell does not (its
// stream, started with StartBackground, is not activity).
func TestIdleTimeoutWithContexts(t *testing.T) {
	need(t, Bash)
	e := newEnv(t, Limits{})
	ctx := context.Background()
	sb, err := e.sbm.Create(ctx, sandbox.Spec{IdleTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Longer than the idle timeout, with no other request meanwhile.
	if o := e.run(sb.ID, RunRequest{Language: Bash, Code: "sleep 4.5; echo done"}); o.end.Status != StatusOK || o.stdout != "done\n" {
		t.Fatalf("a cell longer than the idle timeout: %+v %+v", o.end, o.err)
	}
	if got, err := e.sbm.Get(sb.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("the sandbox after a long cell: %+v, %v", got, err)
	}
	// The kernel waits; the sandbox ends idle.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.sbm.Get(sb.ID)
		if err == nil && got.EndReason == sandbox.EndIdle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sandbox whose only use is an idle code context did not end idle: %+v, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
