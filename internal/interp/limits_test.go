package interp

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// These tests check the daemon-side limits without a sandbox or an
// interpreter: each would fail if its limit were removed.

func TestCheckRunLimits(t *testing.T) {
	m := &Manager{lim: Limits{MaxCodeBytes: 100, MaxTimeout: time.Minute, DefaultTimeout: 7 * time.Second}.withDefaults()}
	manyVars := map[string]string{}
	for i := range maxEnvKeys + 1 {
		manyVars[fmt.Sprintf("V%d", i)] = ""
	}
	tests := []struct {
		name string
		req  RunRequest
		ok   bool
	}{
		{"code at the cap", RunRequest{Language: Python, Code: strings.Repeat("x", 100)}, true},
		{"code over the cap", RunRequest{Language: Python, Code: strings.Repeat("x", 101)}, false},
		{"timeout at the cap", RunRequest{Language: Python, Timeout: time.Minute}, true},
		{"timeout over the cap", RunRequest{Language: Python, Timeout: time.Minute + 1}, false},
		{"env value at the cap", RunRequest{Language: Python, Env: map[string]string{"A": strings.Repeat("v", maxEnvValue)}}, true},
		{"env value over the cap", RunRequest{Language: Python, Env: map[string]string{"A": strings.Repeat("v", maxEnvValue+1)}}, false},
		{"too many env vars", RunRequest{Language: Python, Env: manyVars}, false},
		{"bad env name", RunRequest{Language: Python, Env: map[string]string{"1A": ""}}, false},
		{"no language without a context", RunRequest{Code: "1"}, false},
		{"no language with a context", RunRequest{ContextID: "ctx-aaaaaaaaaaaaaaaa", Code: "1"}, true},
		{"bad language with a context", RunRequest{ContextID: "ctx-aaaaaaaaaaaaaaaa", Language: "ruby"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			err := m.checkRun(&req)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
				t.Fatalf("checkRun: %v, want ok=%v", err, tt.ok)
			}
			if err == nil && tt.req.Timeout == 0 && req.Timeout != 7*time.Second {
				t.Errorf("default timeout %v", req.Timeout)
			}
		})
	}
}

func TestContextCap(t *testing.T) {
	m := &Manager{lim: Limits{MaxContexts: 2}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	b := newBox(m, "sb")
	c1, err := b.add(Python, "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.defaultContext(Bash); err != nil {
		t.Fatal(err)
	}
	if _, err := b.add(Python, "", nil, false); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "sandbox sb has 2 code contexts, the most it may have; delete one") {
		t.Errorf("a named context over the cap: %v", err)
	}
	if _, err := b.defaultContext(Python); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a default context over the cap: %v", err)
	}
	b.remove(c1)
	if _, err := b.add(Python, "", nil, false); err != nil {
		t.Errorf("after a delete: %v", err)
	}
}

// drain returns the events a cell has delivered so far.
func drain(cl *cell) []Event {
	var evs []Event
	for len(cl.events) > 0 {
		evs = append(evs, <-cl.events)
	}
	return evs
}

func TestCellCaps(t *testing.T) {
	lim := Limits{MaxOutputBytes: 10, MaxTextBytes: 8, MaxResultBytes: 2000}.withDefaults()

	interrupts := 0
	cl := newCell(1, lim, func() { interrupts++ })
	cl.output(EventStdout, "123456", false)
	cl.output(EventStderr, "7890ab", false) // driver output over the cap: cut, no interrupt
	if evs := drain(cl); len(evs) != 2 || evs[1].Text != "7890" || !cl.outTrunc || interrupts != 0 {
		t.Errorf("output cap: %+v, truncated %v, interrupts %d", evs, cl.outTrunc, interrupts)
	}
	cl.output(EventStdout, "more", true) // raw output over the cap: the cell is interrupted
	if evs := drain(cl); len(evs) != 1 || evs[0].Type != EventError || evs[0].Error.Name != overflowError || interrupts != 1 {
		t.Errorf("raw output over the cap: %+v, interrupts %d", evs, interrupts)
	}

	cl = newCell(2, lim, func() {})
	cl.result(Result{Text: strings.Repeat("r", 1500)})
	cl.result(Result{Text: strings.Repeat("s", 1500), HTML: "<p>"})
	evs := drain(cl)
	if len(evs) != 2 || len(evs[0].Result.Text) != 1500 || evs[1].Result.Omitted == "" ||
		len(evs[1].Result.Text) != 1024 || evs[1].Result.HTML != "" || !cl.resTrunc {
		t.Errorf("results cap: %+v", evs)
	}

	cl.error(ExecError{Name: "E", Value: strings.Repeat("v", 20), Traceback: strings.Repeat("t", 20)})
	if evs := drain(cl); len(evs) != 1 || len(evs[0].Error.Value) != 8 || len(evs[0].Error.Traceback) != 8 {
		t.Errorf("text cap on errors: %+v", evs)
	}
}

func TestTextLimit(t *testing.T) {
	tests := []struct {
		lang             Language
		text, fail, json string
	}{
		{Python, "'x' * 5000", "raise ValueError('v' * 5000)",
			"class J:\n    def _repr_json_(self): return {'a': 'x' * 200000}\n    def __repr__(self): return 'J()'\nJ()"},
		{JavaScript, "'x'.repeat(5000)", "throw new Error('v'.repeat(5000))", "display.json({a: 'x'.repeat(200000)})"},
	}
	for _, tt := range tests {
		t.Run(string(tt.lang), func(t *testing.T) {
			t.Parallel()
			need(t, tt.lang)
			e := newEnv(t, Limits{MaxTextBytes: 1000})
			id := e.sandbox()
			o := e.run(id, RunRequest{Language: tt.lang, Code: tt.text})
			if n := len(o.main()); n < 1000 || n > 1100 {
				t.Errorf("a result text of 5000 characters came back with %d", n)
			}
			o = e.run(id, RunRequest{Language: tt.lang, Code: tt.fail})
			if o.err == nil {
				t.Fatalf("no error: %+v", o.end)
			}
			if len(o.err.Value) > 1000 || len(o.err.Traceback) > 1000 {
				t.Errorf("error over the text cap: value %d bytes, traceback %d bytes", len(o.err.Value), len(o.err.Traceback))
			}
			// A JSON value over the cap is left out, not sent (its frame
			// would be over the daemon's frame cap and kill the context).
			o = e.run(id, RunRequest{Language: tt.lang, Code: tt.json})
			if o.end.Status != StatusOK || len(o.results) != 1 || o.results[0].JSON != nil {
				t.Errorf("JSON over the text cap: %s %v, %d results", o.end.Status, o.err, len(o.results))
			}
		})
	}
}
