package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
)

// fakeAPI is the part of Airlock's API the executor calls: whoami, a
// sandbox "sb1", exec (whose commands it interprets: "echo X", "exit N",
// "sleep", "deny"), files in memory and run. It records the execs.
type fakeAPI struct {
	mu     sync.Mutex
	keys   map[string][]string // key -> scopes
	files  map[string]string
	execs  []wire.ExecRequest
	runs   []wire.RunRequest
	fileQs []string
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{
		keys:  map[string][]string{"good": {"exec", "files", "tools:call", "sandboxes:read"}, "execonly": {"exec"}, "admin": {"admin"}},
		files: map[string]string{},
	}
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wire.Error{Error: wire.ErrorDetail{Code: code, Message: msg}})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	scopes, ok := f.keys[key]
	if !ok {
		apiError(w, 401, wire.CodeUnauthenticated, "invalid API key")
		return
	}
	id := r.PathValue("id")
	if id != "" && id != "sb1" {
		apiError(w, 404, wire.CodeNotFound, "sandbox "+id+" not found")
		return
	}
	ok200 := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch r.Method + " " + r.Pattern {
	case "GET GET /v1/whoami":
		ok200(wire.WhoAmI{TenantID: "t", KeyID: key, Scopes: scopes})
	case "GET GET /v1/sandboxes/{id}":
		ok200(map[string]any{"id": id, "state": "running"})
	case "POST POST /v1/sandboxes/{id}/exec":
		var req wire.ExecRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.execs = append(f.execs, req)
		cmd := strings.Join(req.Cmd, " ")
		if len(req.Cmd) == 3 && req.Cmd[0] == "bash" {
			cmd = req.Cmd[2]
		}
		res := wire.ExecResult{Status: wire.StatusSuccess}
		out, errOut := "", ""
		switch {
		case strings.HasPrefix(cmd, "echo "):
			out = strings.TrimPrefix(cmd, "echo ") + "\n"
		case strings.HasPrefix(cmd, "exit "):
			res.Status, res.ExitCode, errOut = wire.StatusError, int(cmd[5]-'0'), "failed\n"
		case cmd == "sleep":
			res.Status, res.ExitCode = wire.StatusTimeout, -1
		case cmd == "deny":
			apiError(w, 403, wire.CodePermissionDenied, "command deny is denied by rule 1")
			return
		case cmd == "flood":
			// What hostile code prints: 1 MiB a stream of the bytes JSON
			// escapes longest.
			out, errOut = strings.Repeat("<", 1<<20), strings.Repeat("\x01", 1<<20)
		case cmd == "vanish":
			apiError(w, 404, wire.CodeNotFound, "sandbox sb1 not found")
			return
		default:
			out = cmd
		}
		res.Stdout, res.Stderr = &out, &errOut
		ok200(res)
	case "PUT PUT /v1/sandboxes/{id}/files":
		b, _ := io.ReadAll(r.Body)
		p := r.URL.Query().Get("path")
		f.fileQs = append(f.fileQs, r.URL.RawQuery)
		f.files[p] = string(b)
		ok200(wire.FileWriteResult{})
	case "GET GET /v1/sandboxes/{id}/files":
		p := r.URL.Query().Get("path")
		s, ok := f.files[p]
		if !ok {
			apiError(w, 404, wire.CodeNotFound, p+": no such file or directory")
			return
		}
		_, _ = io.WriteString(w, s)
	case "DELETE DELETE /v1/sandboxes/{id}/files":
		p := r.URL.Query().Get("path")
		if _, ok := f.files[p]; !ok {
			apiError(w, 404, wire.CodeNotFound, p+": no such file or directory")
			return
		}
		delete(f.files, p)
		w.WriteHeader(204)
	case "POST POST /v1/sandboxes/{id}/run":
		var req wire.RunRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.runs = append(f.runs, req)
		out := "ran " + req.Language
		ok200(wire.RunResult{SandboxID: id, ExecResult: wire.ExecResult{Status: wire.StatusSuccess, Stdout: &out},
			ToolCalls: []wire.ToolCallTrace{{Tool: "weather", Outcome: "denied", Reason: "policy"}}})
	default:
		apiError(w, 404, wire.CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	}
}

// harness serves the executor in front of a fake API.
func harness(t *testing.T) (*fakeAPI, func(key, id, body string) (int, map[string]any)) {
	t.Helper()
	f, postRaw := harnessRaw(t)
	return f, func(key, id, body string) (int, map[string]any) {
		t.Helper()
		st, raw := postRaw(key, id, body)
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("status %d: body is not JSON: %v", st, err)
		}
		return st, out
	}
}

// harnessRaw is harness answering the body as it came.
func harnessRaw(t *testing.T) (*fakeAPI, func(key, id, body string) (int, []byte)) {
	t.Helper()
	f := newFakeAPI()
	mux := http.NewServeMux()
	for _, p := range []string{"GET /v1/whoami", "GET /v1/sandboxes/{id}", "POST /v1/sandboxes/{id}/exec", "PUT /v1/sandboxes/{id}/files",
		"GET /v1/sandboxes/{id}/files", "DELETE /v1/sandboxes/{id}/files", "POST /v1/sandboxes/{id}/run"} {
		mux.Handle(p, f)
	}
	api := httptest.NewServer(mux)
	t.Cleanup(api.Close)
	edge := httptest.NewServer(Handler(Config{APIURL: api.URL}))
	t.Cleanup(edge.Close)
	return f, func(key, id, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", edge.URL+"/v1/sandboxes/"+id+"/openai/tool-calls", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, raw
	}
}

// asJSON re-encodes v for comparisons.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestShellCall(t *testing.T) {
	f, post := harness(t)
	st, out := post("good", "sb1", `{"cwd":"work","env":{"A":"1"},"user":"root","output":[
		{"type":"reasoning","id":"r1","summary":[]},
		{"type":"shell_call","id":"sh1","call_id":"c1","status":"completed","environment":{"type":"local"},
		 "action":{"commands":["echo hello","exit 3","sleep","echo never"],"timeout_ms":1500,"max_output_length":3},
		 "caller":{"type":"direct"}},
		{"type":"message","id":"m1","role":"assistant","content":[]}]}`)
	if st != 200 {
		t.Fatalf("status %d: %v", st, out)
	}
	want := `{"input":[{"call_id":"c1","caller":{"type":"direct"},"max_output_length":3,"output":[` +
		`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"hel"},` +
		`{"outcome":{"exit_code":3,"type":"exit"},"stderr":"fai","stdout":""},` +
		`{"outcome":{"type":"timeout"},"stderr":"","stdout":""}],"type":"shell_call_output"}],"unhandled":[]}`
	if got := asJSON(t, out); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if len(f.execs) != 3 {
		t.Fatalf("%d execs, want 3 (the timeout ends the call)", len(f.execs))
	}
	e := f.execs[0]
	if !slices.Equal(e.Cmd, []string{"bash", "-lc", "echo hello"}) || e.Cwd != "work" || e.Env["A"] != "1" || e.User != "root" || e.TimeoutS != 2 {
		t.Errorf("exec request %+v", e)
	}
}

func TestShellCallFailures(t *testing.T) {
	f, post := harness(t)
	many := `"` + strings.Repeat(`x","`, maxCommands) + `x"`
	st, out := post("good", "sb1", `{"output":[
		{"type":"shell_call","call_id":"c1","action":{"commands":["deny","echo after"]}},
		{"type":"shell_call","call_id":"c2","action":{"commands":[`+many+`]}},
		{"type":"shell_call","call_id":"c3","action":{"commands":[]}},
		{"type":"shell_call","call_id":"c4","environment":{"type":"container_auto"},"action":{"commands":["echo hosted"]}},
		{"type":"shell_call","call_id":"c5","action":{"commands":["echo answered"]}},
		{"type":"shell_call_output","call_id":"c5","output":[]}]}`)
	if st != 200 {
		t.Fatalf("status %d: %v", st, out)
	}
	in := out["input"].([]any)
	if len(in) != 3 {
		t.Fatalf("%d answers, want 3 (hosted and answered calls skipped): %v", len(in), in)
	}
	first := asJSON(t, in[0])
	if !strings.Contains(first, `"stderr":"airlock: command deny is denied by rule 1"`) || !strings.Contains(first, `"exit_code":126`) ||
		!strings.Contains(first, `"stdout":"after\n"`) {
		t.Errorf("a denied command: %s", first)
	}
	if s := asJSON(t, in[1]); !strings.Contains(s, "at most 32 commands") {
		t.Errorf("too many commands: %s", s)
	}
	if s := asJSON(t, in[2]); !strings.Contains(s, "no commands") {
		t.Errorf("no commands: %s", s)
	}
	if len(f.execs) != 2 {
		t.Errorf("%d execs, want 2", len(f.execs))
	}
}

func TestLocalShellCall(t *testing.T) {
	f, post := harness(t)
	st, out := post("good", "sb1", `{"env":{"A":"1","B":"1"},"user":"user","output":[
		{"type":"local_shell_call","id":"l1","call_id":"c1","status":"completed",
		 "action":{"type":"exec","command":["printf","x y"],"env":{"B":"2"},"timeout_ms":2000,"working_directory":"/tmp","user":"root"}}]}`)
	if st != 200 {
		t.Fatalf("status %d: %v", st, out)
	}
	item := out["input"].([]any)[0].(map[string]any)
	if item["type"] != "local_shell_call_output" || item["id"] != "c1" {
		t.Fatalf("item %v", item)
	}
	var res localShellResult
	if err := json.Unmarshal([]byte(item["output"].(string)), &res); err != nil || res.Output != "printf x y" || res.Metadata.ExitCode != 0 {
		t.Errorf("output %q (%v)", item["output"], err)
	}
	e := f.execs[0]
	if !slices.Equal(e.Cmd, []string{"printf", "x y"}) || e.Cwd != "/tmp" || e.Env["A"] != "1" || e.Env["B"] != "2" || e.User != "user" || e.TimeoutS != 2 {
		t.Errorf("exec request %+v (the model's user is not followed)", e)
	}
}

func TestApplyPatchCalls(t *testing.T) {
	f, post := harness(t)
	f.files["/w/bin.dat"] = "a\x00b"
	st, out := post("good", "sb1", `{"cwd":"/w","output":[
		{"type":"apply_patch_call","call_id":"p1","status":"completed","operation":{"type":"create_file","path":"hello.py","diff":"+print('hi')\n+print('bye')\n"}},
		{"type":"apply_patch_call","call_id":"p2","status":"completed","operation":{"type":"update_file","path":"hello.py","diff":"@@\n print('hi')\n-print('bye')\n+print('ciao')\n"}},
		{"type":"apply_patch_call","call_id":"p3","status":"completed","operation":{"type":"update_file","path":"hello.py","diff":"@@\n-print('nope')\n+x\n"}},
		{"type":"apply_patch_call","call_id":"p4","status":"completed","operation":{"type":"update_file","path":"/abs/missing.txt","diff":"@@\n-a\n+b\n"}},
		{"type":"apply_patch_call","call_id":"p5","status":"completed","operation":{"type":"update_file","path":"bin.dat","diff":"@@\n-a\n+b\n"}},
		{"type":"apply_patch_call","call_id":"p6","status":"completed","operation":{"type":"create_file","path":"bad","diff":"oops\n"}},
		{"type":"apply_patch_call","call_id":"p7","status":"completed","operation":{"type":"rename_file","path":"x"}},
		{"type":"apply_patch_call","call_id":"p8","status":"completed","operation":{"type":"delete_file","path":"gone.txt"}}]}`)
	if st != 200 {
		t.Fatalf("status %d: %v", st, out)
	}
	in := out["input"].([]any)
	wants := []struct{ status, output string }{
		{"completed", "Created hello.py"},
		{"completed", "Updated hello.py"},
		{"failed", "hello.py: Invalid Context 0:\nprint('nope')"},
		{"failed", "/abs/missing.txt: /abs/missing.txt: no such file or directory"},
		{"failed", "bin.dat: not a UTF-8 text file"},
		{"failed", "bad: Invalid Add File Line: oops"},
		{"failed", `unknown operation "rename_file" (create_file, update_file or delete_file)`},
		{"failed", "gone.txt: /w/gone.txt: no such file or directory"},
	}
	if len(in) != len(wants) {
		t.Fatalf("%d answers: %v", len(in), in)
	}
	for i, w := range wants {
		it := in[i].(map[string]any)
		if it["type"] != "apply_patch_call_output" || it["call_id"] != "p"+string(rune('1'+i)) || it["status"] != w.status || it["output"] != w.output {
			t.Errorf("answer %d: %v, want %s %q", i, it, w.status, w.output)
		}
	}
	if got := f.files["/w/hello.py"]; got != "print('hi')\nprint('ciao')" {
		t.Errorf("hello.py is %q", got)
	}
}

func TestRunProgramAndOtherFunctions(t *testing.T) {
	f, post := harness(t)
	st, out := post("good", "sb1", `{"env":{"K":"v"},"output":[
		{"type":"function_call","call_id":"f1","name":"get_weather","arguments":"{}","caller":null},
		{"type":"function_call","call_id":"f2","name":"airlock_run_program","arguments":"{\"language\":\"javascript\",\"code\":\"1\",\"timeout_s\":5}","caller":null},
		{"type":"function_call","call_id":"f3","name":"airlock_run_program","arguments":"{\"code\":\"\"}"},
		{"type":"custom_tool_call","call_id":"f4","name":"mine","input":"x"}]}`)
	if st != 200 {
		t.Fatalf("status %d: %v", st, out)
	}
	if got := asJSON(t, out["unhandled"]); got != `["f1","f4"]` {
		t.Errorf("unhandled %s", got)
	}
	in := out["input"].([]any)
	if len(in) != 2 {
		t.Fatalf("answers %v", in)
	}
	if _, ok := in[0].(map[string]any)["caller"]; ok {
		t.Errorf("a null caller is echoed: %v", in[0])
	}
	var res programResult
	ran := in[0].(map[string]any)
	if err := json.Unmarshal([]byte(ran["output"].(string)), &res); err != nil || ran["call_id"] != "f2" || ran["type"] != "function_call_output" ||
		res.Stdout != "ran javascript" || len(res.ToolCalls) != 1 || res.ToolCalls[0].Outcome != "denied" {
		t.Errorf("program answer %v (%v)", ran, err)
	}
	if s := asJSON(t, in[1]); !strings.Contains(s, "code is required") {
		t.Errorf("bad program: %s", s)
	}
	if len(f.runs) != 1 || f.runs[0].TimeoutS != 5 || f.runs[0].Env["K"] != "v" {
		t.Errorf("runs %+v", f.runs)
	}
}

func TestRequestErrors(t *testing.T) {
	_, post := harness(t)
	tests := []struct {
		name, key, id, body string
		status              int
		code, msg           string
	}{
		{"no key", "", "sb1", `{"output":[]}`, 401, wire.CodeUnauthenticated, "API key is required"},
		{"bad key", "nope", "sb1", `{"output":[]}`, 401, wire.CodeUnauthenticated, "invalid API key"},
		{"missing sandbox", "good", "sb2", `{"output":[]}`, 404, wire.CodeNotFound, "sandbox sb2 not found"},
		{"missing sandbox without sandboxes:read", "execonly", "sb2", `{"output":[{"type":"shell_call","call_id":"c","action":{"commands":["echo"]}}]}`, 404, wire.CodeNotFound, "sandbox sb2 not found"},
		{"sandbox gone midway", "good", "sb1", `{"output":[{"type":"shell_call","call_id":"c","action":{"commands":["vanish"]}}]}`, 404, wire.CodeNotFound, "sandbox sb1 not found"},
		{"missing scope", "execonly", "sb1", `{"output":[{"type":"apply_patch_call","call_id":"c","operation":{"type":"delete_file","path":"x"}}]}`, 403, wire.CodePermissionDenied, "lacks the files scope"},
		{"program scope", "execonly", "sb1", `{"output":[{"type":"function_call","call_id":"c","name":"airlock_run_program","arguments":"{}"}]}`, 403, wire.CodePermissionDenied, "lacks the tools:call scope"},
		{"no output", "good", "sb1", `{}`, 400, wire.CodeInvalidArgument, "output"},
		{"both", "good", "sb1", `{"output":[],"response":{"output":[]}}`, 400, wire.CodeInvalidArgument, "not both"},
		{"response without output", "good", "sb1", `{"response":{"id":"r"}}`, 400, wire.CodeInvalidArgument, "response must be"},
		{"too many items", "good", "sb1", `{"output":[` + strings.TrimSuffix(strings.Repeat(`{"type":"message"},`, maxItems+1), ",") + `]}`, 400, wire.CodeInvalidArgument, "at most 1000 output items"},
		{"unknown field", "good", "sb1", `{"output":[],"model":"x"}`, 400, wire.CodeInvalidArgument, "unknown field"},
		{"not an item", "good", "sb1", `{"output":[1]}`, 400, wire.CodeInvalidArgument, "output[0]"},
		{"no call id", "good", "sb1", `{"output":[{"type":"shell_call","action":{"commands":["x"]}}]}`, 400, wire.CodeInvalidArgument, "call_id is required"},
		{"bad user", "good", "sb1", `{"output":[],"user":"bob"}`, 400, wire.CodeInvalidArgument, "user must be"},
		{"timeout", "good", "sb1", `{"output":[],"timeout_ms":600001}`, 400, wire.CodeInvalidArgument, "timeout_ms"},
		{"output length", "good", "sb1", `{"output":[],"max_output_length":-1}`, 400, wire.CodeInvalidArgument, "max_output_length"},
		{"trailing data", "good", "sb1", `{"output":[]} {}`, 400, wire.CodeInvalidArgument, "one JSON object"},
		{"too many calls", "good", "sb1", `{"output":[` + strings.TrimSuffix(strings.Repeat(`{"type":"shell_call","call_id":"c","action":{"commands":["x"]}},`, maxCalls+1), ",") + `]}`, 400, wire.CodeInvalidArgument, "at most 64 tool calls"},
		{"too big", "good", "sb1", `{"output":[{"type":"message","content":"` + strings.Repeat("x", maxBody) + `"}]}`, 413, wire.CodeRequestTooLarge, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, out := post(tt.key, tt.id, tt.body)
			e, _ := out["error"].(map[string]any)
			if st != tt.status || e["code"] != tt.code || !strings.Contains(e["message"].(string), tt.msg) {
				t.Errorf("status %d %v, want %d %s %q", st, out, tt.status, tt.code, tt.msg)
			}
		})
	}
}

func TestWholeResponse(t *testing.T) {
	_, post := harness(t)
	st, out := post("admin", "sb1", `{"response":{"id":"resp_1","object":"response","user":"someone","output":[
		{"type":"shell_call","call_id":"c1","action":{"commands":["echo hi"],"timeout_ms":null,"max_output_length":null}}]}}`)
	if st != 200 {
		t.Fatalf("status %d: %v", st, out)
	}
	if s := asJSON(t, out["input"]); !strings.Contains(s, `"stdout":"hi\n"`) || !strings.Contains(s, `"max_output_length":65536`) {
		t.Errorf("input %s", s)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"},
		{"h€llo", 3, "h"},
		{"h€llo", 4, "h€"},
		{"a\xffb", 10, "a\uFFFDb"},
	}
	for _, tt := range tests {
		if got := truncate([]byte(tt.in), tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestAPIUnreachable(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	edge := httptest.NewServer(Handler(Config{APIURL: url}))
	defer edge.Close()
	req, _ := http.NewRequest("POST", edge.URL+"/v1/sandboxes/sb1/openai/tool-calls", strings.NewReader(`{"output":[]}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || !strings.Contains(string(b), `"code":"unavailable"`) || strings.Contains(string(b), "127.0.0.1") {
		t.Errorf("status %d %s: want 503 unavailable without the host's address", resp.StatusCode, b)
	}
}

func TestInvalidSandboxID(t *testing.T) {
	_, post := harness(t)
	st, out := post("good", "a%3Fb", `{"output":[]}`)
	if e, _ := out["error"].(map[string]any); st != 400 || e["code"] != wire.CodeInvalidArgument {
		t.Errorf("status %d %v, want 400 invalid_argument", st, out)
	}
}
