package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/interp"
)

// newCodeEnv is the real environment with the code interpreter on.
func newCodeEnv(t *testing.T) *realEnv {
	t.Helper()
	for _, bin := range []string{"python3", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	return newRealEnv(t, func(cfg *Config) {
		m, err := interp.New(interp.Config{Sandboxes: cfg.Sandboxes, Limits: interp.Limits{MaxContexts: 3, InterruptGrace: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		cfg.Code = m
	})
}

func TestCodeRun(t *testing.T) {
	ctx := context.Background()
	e := newCodeEnv(t)
	a := e.client(e.adminA)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: client.LangPython, Code: "x = 20\nprint('hi')\nx * 2 + 2"})
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != client.CodeStatusOK || x.Stdout != "hi\n" || x.MainResult() == nil || x.MainResult().Text != "42" ||
		x.ExecutionCount != 1 || x.ContextID == "" || x.Language != "python" || x.Error != nil {
		t.Errorf("buffered: %+v", x)
	}
	// Streamed: events in order, then the same end.
	var got []string
	x, err = a.RunCodeStream(ctx, sb.ID, client.RunCodeRequest{Language: "py", Code: "import sys\nprint('a')\nprint('b', file=sys.stderr)\ndisplay(x)\nraise KeyError('k')"},
		func(ev client.CodeEvent) error {
			switch ev.Type {
			case "stdout", "stderr":
				got = append(got, ev.Type+":"+ev.Data)
			case "result":
				got = append(got, "result:"+ev.Result.Text)
			case "error":
				got = append(got, "error:"+ev.Error.Name)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "stdout:a\n|stderr:b\n|result:20|error:KeyError" {
		t.Errorf("stream events %q", got)
	}
	if x.Status != client.CodeStatusError || x.ExecutionCount != 2 || x.Error == nil || !strings.Contains(x.Error.Traceback, "KeyError") ||
		x.Stdout != "a\n" || len(x.Results) != 1 {
		t.Errorf("stream result %+v", x)
	}
	// The raw wire format of a stream.
	status, body := e.post(e.adminA, "/v1/sandboxes/"+sb.ID+"/code", `{"language":"bash","code":"echo out; exit 3; echo no"}`, "application/x-ndjson")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if status != 200 || len(lines) != 3 || lines[0] != `{"type":"stdout","data":"out\n"}` ||
		!strings.HasPrefix(lines[1], `{"type":"error","name":"ExitStatus"`) || !strings.Contains(lines[2], `"status":"error","exit_code":3`) {
		t.Errorf("ndjson %d:\n%s", status, body)
	}
	// The buffered wire format has every field, error null when none.
	status, body = e.post(e.adminA, "/v1/sandboxes/"+sb.ID+"/code", `{"language":"javascript","code":"1"}`, "")
	if _, err := exec.LookPath("node"); err == nil {
		var doc map[string]any
		if status != 200 || json.Unmarshal([]byte(body), &doc) != nil || doc["error"] != nil || doc["status"] != "ok" ||
			doc["stdout"] != "" || len(doc["results"].([]any)) != 1 {
			t.Errorf("buffered document %d: %s", status, body)
		}
	}

	// The call is audited like exec: intent and outcome, with the code's
	// hash and length and how the cell ended.
	recs, _, err := a.AuditList(ctx, client.AuditQuery{Action: ActionSandboxCode, Phase: client.PhaseOutcome})
	if err != nil || len(recs) < 3 {
		t.Fatalf("audit: %d records, %v", len(recs), err)
	}
	var d map[string]any
	_ = json.Unmarshal(recs[len(recs)-1].Details, &d)
	sum := sha256.Sum256([]byte("x = 20\nprint('hi')\nx * 2 + 2"))
	first := recs[len(recs)-1]
	for _, r := range recs {
		if r.Seq < first.Seq {
			first = r
		}
	}
	_ = json.Unmarshal(first.Details, &d)
	if first.Target != sb.ID || first.Outcome != "ok" || d["code_sha256"] != hex.EncodeToString(sum[:]) ||
		d["code_bytes"] != float64(28) || d["status"] != "ok" || d["language"] != "python" || d["context_id"] == "" {
		t.Errorf("audit record %+v %v", first, d)
	}
}

// post sends a JSON body with an optional Accept header and returns the
// status and body.
func (e *realEnv) post(token, path, body, accept string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestCodeContextsAPI(t *testing.T) {
	ctx := context.Background()
	e := newCodeEnv(t)
	a := e.client(e.adminA)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := a.CreateCodeContext(ctx, sb.ID, client.CreateCodeContextRequest{Language: "bash", Cwd: "/tmp", Env: map[string]string{"V": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if cc.Language != "bash" || cc.State != "idle" || cc.Default || cc.Cwd != "/tmp" {
		t.Errorf("created %+v", cc)
	}
	x, err := a.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "cd /; n=$V"})
	if err != nil || x.Status != client.CodeStatusOK {
		t.Fatalf("%+v %v", x, err)
	}
	if x, _ := a.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "echo $PWD $n"}); x == nil || x.Stdout != "/ 1\n" {
		t.Errorf("bash state: %+v", x)
	}
	list, err := a.ListCodeContexts(ctx, sb.ID)
	if err != nil || len(list) != 1 || list[0].ID != cc.ID || list[0].ExecutionCount != 2 {
		t.Errorf("list %+v %v", list, err)
	}

	// A cell that runs long: a second one conflicts, interrupt ends it.
	done := make(chan *client.CodeExecution, 1)
	started := make(chan struct{})
	go func() {
		x, _ := a.RunCodeStream(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "echo go; sleep 60"}, func(ev client.CodeEvent) error {
			if ev.Type == "stdout" {
				close(started)
			}
			return nil
		})
		done <- x
	}()
	<-started
	if _, err := a.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "true"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("concurrent cell: %v", err)
	}
	if ok, err := a.InterruptCodeContext(ctx, sb.ID, cc.ID); err != nil || !ok {
		t.Errorf("interrupt: %v %v", ok, err)
	}
	if x := <-done; x == nil || x.Status != client.CodeStatusInterrupted {
		t.Errorf("interrupted cell: %+v", x)
	}
	if r, err := a.RestartCodeContext(ctx, sb.ID, cc.ID); err != nil || r.State != "idle" {
		t.Errorf("restart: %+v %v", r, err)
	}
	if x, _ := a.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "echo \"[$n]\""}); x == nil || x.Stdout != "[]\n" {
		t.Errorf("after restart: %+v", x)
	}
	// The cap on contexts: 3 here (one bash, then python's default, then one more).
	if _, err := a.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "python", Code: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCodeContext(ctx, sb.ID, client.CreateCodeContextRequest{Language: "bash"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCodeContext(ctx, sb.ID, client.CreateCodeContextRequest{Language: "bash"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("over the cap: %v", err)
	}
	if err := a.DeleteCodeContext(ctx, sb.ID, cc.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCodeContext(ctx, sb.ID, cc.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}

	// Bad requests.
	for _, tt := range []struct {
		path, body string
		status     int
	}{
		{"/code", `{"language":"ruby","code":"1"}`, 400},
		{"/code", `{"language":"python"}`, 400},
		{"/code", `{"code":"1"}`, 400},
		{"/code", `{"language":"python","code":"1","timeout_s":-1}`, 400},
		{"/code", `{"language":"python","code":"1","timeout_s":7200}`, 400},
		{"/code", `{"language":"python","code":"1","context_id":"nope"}`, 400},
		{"/code", `{"language":"python","code":"1","context_id":"ctx-aaaaaaaaaaaaaaaa"}`, 404},
		{"/code", `{"language":"python","code":"1","extra":1}`, 400},
		{"/contexts", `{"language":"cobol"}`, 400},
		{"/contexts/ctx-aaaaaaaaaaaaaaaa/restart", ``, 404},
		{"/contexts/bad/interrupt", ``, 400},
	} {
		if status, body := e.post(e.adminA, "/v1/sandboxes/"+sb.ID+tt.path, tt.body, ""); status != tt.status || !strings.Contains(body, `"message"`) {
			t.Errorf("POST %s %s: %d %s, want %d", tt.path, tt.body, status, body, tt.status)
		}
	}
	// Context operations are audited.
	recs, _, err := a.AuditList(ctx, client.AuditQuery{Action: ActionContextCreate, Phase: client.PhaseOutcome})
	if err != nil || len(recs) < 2 {
		t.Errorf("context.create records: %d %v", len(recs), err)
	}
}

func TestCodeTenancyAndScopes(t *testing.T) {
	ctx := context.Background()
	e := newCodeEnv(t)
	a := e.client(e.adminA)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := a.CreateCodeContext(ctx, sb.ID, client.CreateCodeContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	// Another tenant sees nothing, whatever the route.
	b := e.client(e.adminB)
	if _, err := b.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "python", Code: "1"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other tenant run: %v", err)
	}
	if _, err := b.ListCodeContexts(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other tenant list: %v", err)
	}
	if err := b.DeleteCodeContext(ctx, sb.ID, cc.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other tenant delete: %v", err)
	}
	if _, err := b.InterruptCodeContext(ctx, sb.ID, cc.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other tenant interrupt: %v", err)
	}
	// The exec scope is needed.
	files := e.client(e.key(tenantA, auth.ScopeFiles, auth.ScopeSandboxesRead))
	if _, err := files.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "python", Code: "1"}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("without exec scope: %v", err)
	}
	if _, err := files.ListCodeContexts(ctx, sb.ID); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("list without exec scope: %v", err)
	}
	exe := e.client(e.key(tenantA, auth.ScopeExec))
	if x, err := exe.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "6 * 7"}); err != nil || x.MainResult().Text != "42" {
		t.Errorf("with exec scope: %+v %v", x, err)
	}
	// A stopped sandbox: a conflict, no contexts.
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "python", Code: "1"}); !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stopped sandbox: %v", err)
	}
}

func TestCodeNotEnabled(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	a := e.client(e.adminA)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "python", Code: "1"}); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("run: %v", err)
	}
	if _, err := a.ListCodeContexts(ctx, sb.ID); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("list: %v", err)
	}
}
