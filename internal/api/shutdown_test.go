package api

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// inflightKinds are the requests that hold a sandbox's agent for as long
// as their command runs.
var inflightKinds = []string{"exec", "exec stream", "pty", "code", "code stream", "file upload"}

// startInflight starts one request of each of inflightKinds on sandbox id,
// each running until something ends it, and returns once the audit log
// holds all their intents. Each request's error (nil if it ended well)
// arrives on its channel.
func startInflight(t *testing.T, e *realEnv, c *client.Client, id string) map[string]chan error {
	t.Helper()
	ctx := context.Background()
	before := e.intents(t)
	res := map[string]chan error{}
	for _, k := range inflightKinds {
		res[k] = make(chan error, 1)
	}
	go func() {
		_, err := c.Exec(ctx, id, client.ExecRequest{Command: "sleep 30"})
		res["exec"] <- err
	}()
	go func() {
		_, err := c.ExecStream(ctx, id, client.ExecRequest{Command: "echo started; sleep 30"}, func(client.Stream, []byte) error { return nil })
		res["exec stream"] <- err
	}()
	go func() {
		p, err := c.PTY(ctx, id, client.PTYOptions{Command: "sleep 30"})
		if err != nil {
			res["pty"] <- err
			return
		}
		defer p.Close()
		go func() { _, _ = io.Copy(io.Discard, p) }()
		_, err = p.Wait(ctx)
		res["pty"] <- err
	}()
	go func() {
		_, err := c.RunCode(ctx, id, client.RunCodeRequest{Language: "bash", Code: "sleep 30"})
		res["code"] <- err
	}()
	go func() {
		_, err := c.RunCodeStream(ctx, id, client.RunCodeRequest{Language: "python", Code: "print('started')\nimport time\ntime.sleep(30)"},
			func(client.CodeEvent) error { return nil })
		res["code stream"] <- err
	}()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() {
		// A body that keeps coming, slowly: the upload is in flight until
		// something ends it.
		go func() {
			for {
				if _, err := pw.Write(make([]byte, 4<<10)); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		_, err := c.WriteFile(ctx, id, "/tmp/upload", pr)
		res["file upload"] <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.intents(t)) < len(before)+len(inflightKinds) {
		if time.Now().After(deadline) {
			t.Fatalf("the requests did not all start: intents %v", e.intents(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // from the intent to the agent
	return res
}

// intents returns the actions of the intent records so far.
func (e *realEnv) intents(t *testing.T) []string {
	t.Helper()
	page, err := e.log.Select(context.Background(), audit.Query{Limit: 1000}, audit.PhaseIntent)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range page.Records {
		out = append(out, r.Action)
	}
	return out
}

// outcomes returns the outcome of every intent of the actions given, and
// fails the test if an intent has none.
func (e *realEnv) outcomes(t *testing.T, actions ...string) map[string]bool {
	t.Helper()
	page, err := e.log.Select(context.Background(), audit.Query{Limit: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	intents := map[uint64]string{}
	out := map[string]bool{}
	for _, r := range page.Records {
		switch {
		case r.Phase == audit.PhaseIntent:
			intents[r.Seq] = r.Action
		case r.IntentSeq != 0:
			if a, ok := intents[r.IntentSeq]; ok {
				out[a+" "+r.Outcome] = true
				delete(intents, r.IntentSeq)
			}
		}
	}
	for seq, a := range intents {
		for _, want := range actions {
			if a == want {
				t.Errorf("intent %d (%s) has no outcome", seq, a)
			}
		}
	}
	return out
}

// checkEnded checks that the in-flight requests of kinds ended with an
// API error of code, whose message contains text, within limit. Those
// whose kind starts with one of results may end with a result instead.
func checkEnded(t *testing.T, res map[string]chan error, kinds []string, code, text string, limit time.Duration, results ...string) {
	t.Helper()
	timer := time.After(limit)
	for _, k := range kinds {
		select {
		case err := <-res[k]:
			if err == nil && slices.ContainsFunc(results, func(p string) bool { return strings.HasPrefix(k, p) }) {
				continue
			}
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Code != code || !strings.Contains(ae.Message, text) {
				t.Errorf("%s ended with %v; want an error %s saying %q", k, err, code, text)
			}
		case <-timer:
			t.Fatalf("%s did not end within %v", k, limit)
		}
	}
}

// TestShutdownEndsRequestsInFlight: the graceful stop ends sessions at
// once and the other requests after the grace, each with an answer that
// says why and an audit outcome, so no intent stays open (issue 13,
// finding 4); requests after it are refused.
func TestShutdownEndsRequestsInFlight(t *testing.T) {
	e := newCodeEnv(t)
	c := e.client(e.adminA)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res := startInflight(t, e, c, sb.ID)
	const grace = 1500 * time.Millisecond
	t0 := time.Now()
	done := make(chan error, 1)
	go func() { done <- e.h.Shutdown(ctx, grace) }()

	// The PTY session ends at once; the others wait for the grace.
	select {
	case err := <-res["pty"]:
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Code != CodeUnavailable || !strings.Contains(ae.Message, "shutting down") {
			t.Errorf("pty ended with %v, want the shutdown error", err)
		}
		if d := time.Since(t0); d > grace/2 {
			t.Errorf("pty ended %v after the shutdown began, want at once", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the PTY session did not end")
	}
	if _, err := c.GetSandbox(ctx, sb.ID); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("a request after the shutdown began = %v, want unavailable", err)
	}
	// The interpreter ends a cell whose caller goes away with a result
	// (status interrupted), which is an answer too.
	checkEnded(t, res, slices.DeleteFunc(slices.Clone(inflightKinds), func(k string) bool { return k == "pty" }),
		CodeUnavailable, "shutting down", 10*time.Second, "code")
	if d := time.Since(t0); d < grace {
		t.Errorf("execs ended %v after the shutdown began, before the grace of %v", d, grace)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	got := e.outcomes(t, ActionSandboxExec, ActionSandboxPTY, ActionSandboxCode, ActionFileWrite)
	for _, want := range []string{"sandbox.exec unavailable", "sandbox.pty unavailable", "file.write unavailable"} {
		if !got[want] {
			t.Errorf("no outcome %q; outcomes %v", want, got)
		}
	}
	rep, err := e.log.Verify(ctx)
	if err != nil || !rep.OK || rep.OpenIntents != 0 {
		t.Errorf("verify after the shutdown: %+v, %v; want ok without open intents", rep, err)
	}
}

// TestRequestsCutBySandboxEnd: an exec, PTY session, code cell or upload
// cut by the sandbox's deletion or its agent's death is answered as a
// conflict that says what happened, and audited so (issue 13, finding 5),
// not as a 500 internal error.
func TestRequestsCutBySandboxEnd(t *testing.T) {
	// A cell whose context dies ends with a result (status died); on a
	// delete, the fake runtime's agent may report the kill of an exec's or
	// a PTY's process (status killed) before its connection goes.
	for _, tc := range []struct {
		name    string
		end     func(e *realEnv, c *client.Client, id string) error
		text    string
		results []string
	}{
		{"deleted", func(e *realEnv, c *client.Client, id string) error {
			return c.DeleteSandbox(context.Background(), id)
		}, "was deleted while the request ran", []string{"code", "exec", "pty"}},
		{"agent died", func(e *realEnv, c *client.Client, id string) error {
			return e.rt.Crash(id)
		}, "its agent stopped", []string{"code"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCodeEnv(t)
			c := e.client(e.adminA)
			sb, err := c.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			res := startInflight(t, e, c, sb.ID)
			if err := tc.end(e, c, sb.ID); err != nil {
				t.Fatal(err)
			}
			checkEnded(t, res, inflightKinds, CodeFailedPrecondition, tc.text, 15*time.Second, tc.results...)
			got := e.outcomes(t, ActionSandboxExec, ActionSandboxPTY, ActionSandboxCode, ActionFileWrite)
			want := []string{"file.write failed_precondition"}
			if !slices.Contains(tc.results, "exec") {
				want = append(want, "sandbox.exec failed_precondition", "sandbox.pty failed_precondition")
			}
			for _, want := range want {
				if !got[want] {
					t.Errorf("no outcome %q; outcomes %v", want, got)
				}
			}
			for k := range got {
				if strings.HasSuffix(k, " internal") {
					t.Errorf("outcome %q", k)
				}
			}
		})
	}
}

// TestExplainKeepsOtherErrors: explain changes only the errors of a cut
// agent stream, and only for requests on a sandbox's agent.
func TestExplainKeepsOtherErrors(t *testing.T) {
	e := newTestEnv(t)
	c := e.client(keyA)
	sb, err := c.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A timeout of the command is the command's, whatever the sandbox.
	res, err := c.Exec(context.Background(), sb.ID, client.ExecRequest{Command: "sleep 5", Timeout: time.Second})
	if err != nil || res.Status != client.StatusTimeout {
		t.Errorf("exec past its timeout = %+v, %v; want a timeout result", res, err)
	}
	// A sandbox that is fine does not turn an agent's refusal into a
	// conflict.
	if _, err := c.ReadFile(context.Background(), sb.ID, "/no/such/file"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("read of a missing file = %v, want not found", err)
	}
}
