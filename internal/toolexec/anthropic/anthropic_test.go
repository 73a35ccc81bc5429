package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// fakeAPI is the part of Airlock's API the editor and the handler's
// checks use: whoami, a sandbox, and its files in memory.
type fakeAPI struct {
	mu     sync.Mutex
	keys   map[string][]string // key -> scopes
	sb     string
	files  map[string][]byte // absolute path -> content; dirs implied
	writes int
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{keys: map[string][]string{"k-admin": {"admin"}, "k-exec": {"exec", "sandboxes:read"}},
		sb: "sb-aaaaaaaaaaaaaaaa", files: map[string][]byte{}}
}

func apiErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.Error{Error: api.ErrorDetail{Code: code, Message: msg}})
}

func (f *fakeAPI) isDir(p string) bool {
	for q := range f.files {
		if strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

func (f *fakeAPI) entry(p string) (api.FileEntry, bool) {
	if b, ok := f.files[p]; ok {
		return api.FileEntry{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(b))}, true
	}
	if f.isDir(p) {
		return api.FileEntry{Name: path.Base(p), Path: p, Type: "dir"}, true
	}
	return api.FileEntry{}, false
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	scopes, ok := f.keys[key]
	if !ok {
		apiErr(w, 401, api.CodeUnauthenticated, "invalid API key")
		return
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.URL.Path == "/v1/whoami" {
		reply(api.WhoAmI{TenantID: "t1", KeyID: key, Scopes: scopes})
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/"+f.sb)
	if !ok {
		apiErr(w, 404, api.CodeNotFound, "sandbox not found")
		return
	}
	p := r.URL.Query().Get("path")
	switch r.Method + " " + rest {
	case "GET ":
		reply(api.Sandbox{ID: f.sb, State: "running"})
	case "GET /files/stat":
		e, ok := f.entry(p)
		if !ok {
			apiErr(w, 404, api.CodeNotFound, "no such file")
			return
		}
		reply(e)
	case "GET /files":
		b, ok := f.files[p]
		if !ok {
			apiErr(w, 404, api.CodeNotFound, "no such file")
			return
		}
		_, _ = w.Write(b)
	case "PUT /files":
		b, _ := io.ReadAll(r.Body)
		f.files[p] = b
		f.writes++
		e, _ := f.entry(p)
		reply(api.FileWriteResult{FileEntry: e})
	case "GET /files/list":
		var out api.DirListing
		root := strings.TrimSuffix(p, "/") + "/"
		seen := map[string]bool{}
		for q := range f.files {
			rel, ok := strings.CutPrefix(q, root)
			if !ok {
				continue
			}
			parts := strings.Split(rel, "/")
			for i := 1; i <= len(parts) && i <= 2; i++ {
				sub := root + strings.Join(parts[:i], "/")
				if !seen[sub] {
					seen[sub] = true
					e, _ := f.entry(sub)
					out.Entries = append(out.Entries, e)
				}
			}
		}
		sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Path > out.Entries[j].Path })
		reply(out)
	default:
		apiErr(w, 404, api.CodeNotFound, "no route")
	}
}

type harness struct {
	t   *testing.T
	api *fakeAPI
	srv *httptest.Server
	h   *Handler
	seq int
}

func newHarness(t *testing.T) *harness {
	f := newFakeAPI()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	h, err := New(Config{APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &harness{t: t, api: f, srv: srv, h: h}
}

// post sends body to the tool-uses route as key and returns the status
// and the decoded answer.
func (hs *harness) post(key, sandbox string, body any) (int, map[string]any) {
	hs.t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			hs.t.Fatal(err)
		}
	}
	req := httptest.NewRequest("POST", "/v1/sandboxes/"+sandbox+"/anthropic/tool-uses", bytes.NewReader(raw))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	mux := http.NewServeMux()
	for _, p := range Patterns() {
		mux.Handle(p, hs.h)
	}
	mux.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		hs.t.Fatalf("answer %d is not JSON: %q", rec.Code, rec.Body.String())
	}
	return rec.Code, out
}

// edit runs one editor tool use and returns its result.
func (hs *harness) edit(input map[string]any) ToolResult {
	hs.t.Helper()
	hs.seq++
	id := fmt.Sprintf("toolu_%d", hs.seq)
	code, out := hs.post("k-admin", hs.api.sb, map[string]any{"message": map[string]any{"content": []any{
		map[string]any{"type": "tool_use", "id": id, "name": EditorTool, "input": input},
	}}})
	if code != 200 {
		hs.t.Fatalf("status %d: %v", code, out)
	}
	raw, _ := json.Marshal(out["content"])
	var rs []ToolResult
	if err := json.Unmarshal(raw, &rs); err != nil || len(rs) != 1 || rs[0].ToolUseID != id || rs[0].Type != "tool_result" {
		hs.t.Fatalf("results %s", raw)
	}
	return rs[0]
}

func TestEditor(t *testing.T) {
	hs := newHarness(t)
	p := "/home/user/ed/lines.txt"
	ok := func(r ToolResult) ToolResult {
		t.Helper()
		if r.IsError {
			t.Fatalf("unexpected error: %s", r.Content)
		}
		return r
	}
	fails := func(r ToolResult, want string) {
		t.Helper()
		if !r.IsError || !strings.Contains(r.Content, want) {
			t.Errorf("got %+v, want an error with %q", r, want)
		}
	}
	ok(hs.edit(map[string]any{"command": "create", "path": p, "file_text": "one\ntwo\nthree\nfour\n"}))
	if got := string(hs.api.files[p]); got != "one\ntwo\nthree\nfour\n" {
		t.Fatalf("created %q", got)
	}
	full := ok(hs.edit(map[string]any{"command": "view", "path": p})).Content
	if got := full; got != "Here's the result of running `cat -n` on "+p+":\n     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n" {
		t.Errorf("view = %q", got)
	}
	if got := ok(hs.edit(map[string]any{"command": "view", "path": p, "view_range": []int{2, 3}})).Content; !strings.HasSuffix(got, ":\n     2\ttwo\n     3\tthree\n") {
		t.Errorf("view 2-3 = %q", got)
	}
	if got := ok(hs.edit(map[string]any{"command": "view", "path": p, "view_range": []int{3, -1}})).Content; !strings.HasSuffix(got, ":\n     3\tthree\n     4\tfour\n") {
		t.Errorf("view 3- = %q", got)
	}
	for _, c := range []struct {
		rng  any
		want string
	}{
		{[]int{0, 2}, "Invalid `view_range`: [0,2]. Its first element `0` should be within the range of lines of the file: [1, 4]"},
		{[]int{2, 9}, "Its second element `9` should be smaller than the number of lines in the file: `4`"},
		{[]int{3, 2}, "Its second element `2` should be larger or equal than its first `3`"},
		{[]int{1}, "It should be a list of two integers."},
		{[]any{1.5, 2}, "It should be a list of two integers."},
	} {
		fails(hs.edit(map[string]any{"command": "view", "path": p, "view_range": c.rng}), c.want)
	}
	if got := ok(hs.edit(map[string]any{"command": "view", "path": p, "max_characters": 20})).Content; !strings.HasPrefix(got, "Here's the result of") || !strings.HasSuffix(got, fmt.Sprintf("\n[output truncated to 20 of %d characters]", len(full))) {
		t.Errorf("max_characters: %q", got)
	}
	fails(hs.edit(map[string]any{"command": "view", "path": "/home/user/none"}), "The path /home/user/none does not exist.")

	// Directories: two levels, hidden entries left out.
	for _, f := range []string{"a.txt", "sub/b.txt", "sub/deeper/c.txt", ".hidden/h.txt", ".secret"} {
		hs.api.files["/home/user/tree/"+f] = []byte("x")
	}
	d := ok(hs.edit(map[string]any{"command": "view", "path": "/home/user/tree"})).Content
	want := "Here are the files and directories up to 2 levels deep in /home/user/tree, excluding hidden items:\n" +
		"/home/user/tree/\n/home/user/tree/a.txt\n/home/user/tree/sub/\n/home/user/tree/sub/b.txt\n/home/user/tree/sub/deeper/\n"
	if d != want {
		t.Errorf("dir view = %q, want %q", d, want)
	}
	fails(hs.edit(map[string]any{"command": "view", "path": "/home/user/tree", "view_range": []int{1, 2}}), "not allowed when `path` points to a directory")

	// str_replace: zero and several matches are the documented errors
	// and write nothing.
	r := "/home/user/ed/rep.py"
	hs.api.files[r] = []byte("x = 1\ny = 1\nprint(x + y)\n")
	writes := hs.api.writes
	if got := hs.edit(map[string]any{"command": "str_replace", "path": r, "old_str": "z = 1", "new_str": "z"}); !got.IsError || got.Content != "No match found for replacement. Please check your text and try again." {
		t.Errorf("zero matches: %+v", got)
	}
	if got := hs.edit(map[string]any{"command": "str_replace", "path": r, "old_str": " = 1", "new_str": " = 2"}); !got.IsError || got.Content != "Found 2 matches for replacement text. Please provide more context to make a unique match." {
		t.Errorf("two matches: %+v", got)
	}
	if hs.api.writes != writes {
		t.Errorf("a failed str_replace wrote the file")
	}
	got := ok(hs.edit(map[string]any{"command": "str_replace", "path": r, "old_str": "y = 1", "new_str": "y = $& 2"})).Content
	if !strings.HasPrefix(got, "The file "+r+" has been edited. Here's the result of running `cat -n` on a snippet of "+r+":\n     1\tx = 1\n     2\ty = $& 2\n     3\tprint(x + y)\n") {
		t.Errorf("str_replace = %q", got)
	}
	if string(hs.api.files[r]) != "x = 1\ny = $& 2\nprint(x + y)\n" {
		t.Errorf("file after str_replace = %q", hs.api.files[r])
	}
	ok(hs.edit(map[string]any{"command": "str_replace", "path": r, "old_str": "print(x + y)\n"}))
	if string(hs.api.files[r]) != "x = 1\ny = $& 2\n" {
		t.Errorf("file after deletion = %q", hs.api.files[r])
	}
	fails(hs.edit(map[string]any{"command": "str_replace", "path": "/home/user/ed", "old_str": "a", "new_str": "b"}), "is a directory")
	fails(hs.edit(map[string]any{"command": "str_replace", "path": r, "old_str": ""}), "must not be empty")

	// insert: start, middle, end; insert_text accepted.
	in := "/home/user/ed/ins.txt"
	hs.api.files[in] = []byte("b\nd")
	ok(hs.edit(map[string]any{"command": "insert", "path": in, "insert_line": 0, "new_str": "a"}))
	ok(hs.edit(map[string]any{"command": "insert", "path": in, "insert_line": 2, "new_str": "c\n"}))
	ok(hs.edit(map[string]any{"command": "insert", "path": in, "insert_line": 4, "insert_text": "e"}))
	if string(hs.api.files[in]) != "a\nb\nc\nd\ne\n" {
		t.Errorf("after inserts: %q", hs.api.files[in])
	}
	fails(hs.edit(map[string]any{"command": "insert", "path": in, "insert_line": 9, "new_str": "x"}), "Invalid `insert_line` parameter: 9. It should be within the range of lines of the file: [0, 5]")
	fails(hs.edit(map[string]any{"command": "undo_edit", "path": in}), "not supported")
	fails(hs.edit(map[string]any{"command": "rename", "path": in}), `Unrecognized command "rename"`)
	fails(hs.edit(map[string]any{"command": "create", "path": in}), "Parameter `file_text` is required for command: create")

	// CRLF kept; binary refused.
	dos := "/home/user/ed/dos.txt"
	hs.api.files[dos] = []byte("alpha\r\nbeta\r\ngamma\r\n")
	if v := ok(hs.edit(map[string]any{"command": "view", "path": dos})).Content; strings.Contains(v, "\r") || !strings.Contains(v, "     2\tbeta\n") {
		t.Errorf("CRLF view = %q", v)
	}
	ok(hs.edit(map[string]any{"command": "str_replace", "path": dos, "old_str": "beta\ngamma", "new_str": "BETA\nB2\ngamma"}))
	ok(hs.edit(map[string]any{"command": "insert", "path": dos, "insert_line": 1, "new_str": "one\ntwo"}))
	if string(hs.api.files[dos]) != "alpha\r\none\r\ntwo\r\nBETA\r\nB2\r\ngamma\r\n" {
		t.Errorf("CRLF after edits: %q", hs.api.files[dos])
	}
	bin := "/home/user/ed/blob.bin"
	hs.api.files[bin] = []byte{0x89, 0x50, 0x4e, 0x47, 0xff, 0xfe, 0x00, 0x01}
	for _, in := range []map[string]any{
		{"command": "view", "path": bin},
		{"command": "str_replace", "path": bin, "old_str": "PNG", "new_str": "JPG"},
		{"command": "insert", "path": bin, "insert_line": 0, "new_str": "x"},
	} {
		fails(hs.edit(in), "is not UTF-8 text (a binary file?)")
	}
	hs.api.files["/home/user/ed/nul.txt"] = []byte("a\x00b")
	fails(hs.edit(map[string]any{"command": "view", "path": "/home/user/ed/nul.txt"}), "contains NUL bytes")
}

func TestToolUsesRequests(t *testing.T) {
	hs := newHarness(t)
	sb := hs.api.sb
	msg := func(blocks ...any) map[string]any {
		return map[string]any{"message": map[string]any{"content": append([]any{}, blocks...)}}
	}
	use := func(id, name string, input any) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
	}
	errCode := func(out map[string]any) string {
		e, _ := out["error"].(map[string]any)
		c, _ := e["code"].(string)
		return c
	}
	for _, c := range []struct {
		name   string
		key    string
		sb     string
		body   any
		status int
		code   string
	}{
		{"no key", "", sb, msg(), 401, api.CodeUnauthenticated},
		{"bad key", "k-wrong", sb, msg(), 401, api.CodeUnauthenticated},
		{"missing sandbox", "k-admin", "sb-bbbbbbbbbbbbbbbb", msg(), 404, api.CodeNotFound},
		{"scope", "k-exec", sb, msg(use("a", EditorTool, map[string]any{})), 403, api.CodePermissionDenied},
		{"no message", "k-admin", sb, map[string]any{}, 400, api.CodeInvalidArgument},
		{"no content", "k-admin", sb, map[string]any{"message": map[string]any{"role": "assistant"}}, 400, api.CodeInvalidArgument},
		{"unknown field", "k-admin", sb, map[string]any{"message": []any{}, "sesion": "x"}, 400, api.CodeInvalidArgument},
		{"bad session", "k-admin", sb, map[string]any{"message": []any{}, "session": "a b"}, 400, api.CodeInvalidArgument},
		{"bad user", "k-admin", sb, map[string]any{"message": []any{}, "user": "bob"}, 400, api.CodeInvalidArgument},
		{"bad timeout", "k-admin", sb, map[string]any{"message": []any{}, "bash_timeout_ms": -1}, 400, api.CodeInvalidArgument},
		{"small output cap", "k-admin", sb, map[string]any{"message": []any{}, "max_output_chars": 10}, 400, api.CodeInvalidArgument},
		{"big file cap", "k-admin", sb, map[string]any{"message": []any{}, "max_file_bytes": 1 << 30}, 400, api.CodeInvalidArgument},
		{"no id", "k-admin", sb, msg(use("", BashTool, map[string]any{})), 400, api.CodeInvalidArgument},
		{"malformed tool_use", "k-admin", sb, msg(map[string]any{"type": "tool_use", "id": 7}), 400, api.CodeInvalidArgument},
		{"too large", "k-admin", sb, []byte(`{"message":"` + strings.Repeat("x", maxBody) + `"}`), 413, api.CodeRequestTooLarge},
		{"two values", "k-admin", sb, []byte(`{"message":[]} {}`), 400, api.CodeInvalidArgument},
	} {
		status, out := hs.post(c.key, c.sb, c.body)
		if status != c.status || errCode(out) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, status, out, c.status, c.code)
		}
	}
	var many []any
	for i := range maxToolUses + 1 {
		many = append(many, use(fmt.Sprint(i), "x", map[string]any{}))
	}
	if status, out := hs.post("k-admin", sb, msg(many...)); status != 400 || !strings.Contains(fmt.Sprint(out), "more than 100 tool_use blocks") {
		t.Errorf("too many uses: %d %v", status, out)
	}

	// Blocks other than tool_use are ignored; results come in order;
	// unknown tools and bad inputs are is_error results.
	hs.api.files["/f"] = []byte("hi\n")
	status, out := hs.post("k-admin", sb, msg(
		map[string]any{"type": "text", "text": "let me look"},
		use("u1", "web_search", map[string]any{"q": "x"}),
		"not even an object",
		use("u2", EditorTool, map[string]any{"command": "view", "path": "/f"}),
		use("u3", EditorTool, "not an object"),
		use("u4", ProgramTool, map[string]any{"language": "cobol", "code": "x"}),
		use("u5", BashTool, map[string]any{"command": " "}),
	))
	if status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	raw, _ := json.Marshal(out["content"])
	var rs []ToolResult
	_ = json.Unmarshal(raw, &rs)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ToolUseID)
	}
	if strings.Join(ids, ",") != "u1,u2,u3,u4,u5" {
		t.Fatalf("ids %v", ids)
	}
	for i, want := range []string{`Unknown tool "web_search"`, "", `The input of tool "str_replace_based_edit_tool" must be an object.`,
		"Parameter `language` must be one of python, javascript, bash.", "Parameter `command` is required unless `restart` is true."} {
		if want == "" {
			if rs[i].IsError || !strings.Contains(rs[i].Content, "     1\thi") {
				t.Errorf("result %d: %+v", i, rs[i])
			}
		} else if !rs[i].IsError || !strings.Contains(rs[i].Content, want) {
			t.Errorf("result %d: %+v, want an error with %q", i, rs[i], want)
		}
	}
	// The content array alone is a message too.
	if status, out := hs.post("k-admin", sb, map[string]any{"message": []any{use("z", "nope", map[string]any{})}}); status != 200 || len(out["content"].([]any)) != 1 {
		t.Errorf("content array: %d %v", status, out)
	}
}

func TestCapped(t *testing.T) {
	o := &capped{max: 10}
	o.tail = []byte("0123456789abcdefghij")
	o.trim(0)
	if got := o.text(); got != "01234\n[... 10 characters of output cut ...]\nfghij" {
		t.Errorf("text = %q", got)
	}
	// Cuts fall on character boundaries and count characters.
	o = &capped{max: 4}
	o.tail = []byte("ééééé") // 5 characters, 10 bytes
	o.trim(0)
	if got := o.text(); got != "éé\n[... 4 characters of output cut ...]\n" && !strings.Contains(got, "characters of output cut") {
		t.Errorf("text = %q", got)
	}
	if s := o.text(); !utf8Valid(s) {
		t.Errorf("invalid UTF-8 %q", s)
	}
	o = &capped{max: 100}
	o.tail = []byte("short")
	o.trim(0)
	if o.text() != "short" {
		t.Errorf("uncut text = %q", o.text())
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "?") == s }

func TestAnsiC(t *testing.T) {
	for in, want := range map[string]string{
		`it's \ $HOME`: `$'it\'s \\ $HOME'`,
		"a\nb\tc\x7f":  `$'a\x0ab\x09c\x7f'`,
		"é":            "$'é'",
	} {
		if got := ansiC(in); got != want {
			t.Errorf("ansiC(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestFormatRun(t *testing.T) {
	res := &client.RunResult{ExecResult: client.ExecResult{Status: client.StatusError, ExitCode: 3, Stdout: []byte("out"), Stderr: []byte("boom\n")},
		ToolCalls: []client.ToolCallTrace{{Tool: "lookup", Outcome: "ok"}, {Tool: "pay", Outcome: "denied", Reason: "policy forbids"}}}
	want := "out\n[stderr]\nboom\n[exit status 3]\n[tool call lookup: ok]\n[tool call pay: denied (policy forbids)]"
	if got := formatRun(res, 1024); got != want {
		t.Errorf("formatRun = %q, want %q", got, want)
	}
	if got := formatRun(&client.RunResult{ExecResult: client.ExecResult{Status: client.StatusSuccess}}, 1024); got != "(no output)" {
		t.Errorf("empty run = %q", got)
	}
	big := &client.RunResult{ExecResult: client.ExecResult{Status: client.StatusTimeout, Stdout: bytes.Repeat([]byte("x"), 5000)}}
	if got := formatRun(big, 1024); len(got) > 1200 || !strings.Contains(got, "characters of output cut") || !strings.HasSuffix(got, "[the program was killed at its timeout]") {
		t.Errorf("big run: %d bytes, %q", len(got), got[len(got)-80:])
	}
}

func TestSessionsCaps(t *testing.T) {
	s := newSessions(time.Hour, 3, 2, nil)
	defer func() { _ = s.close(context.Background()) }()
	ctx := context.Background()
	get := func(key, name string) *conversation {
		t.Helper()
		c, err := s.acquire(ctx, convKey{key, "sb", name})
		if err != nil {
			t.Fatalf("%s/%s: %v", key, name, err)
		}
		return c
	}
	a1 := get("a", "1")
	s.release(a1)
	time.Sleep(time.Millisecond)
	a2 := get("a", "2")
	s.release(a2)
	// Past a's cap of 2, a's conversation idle longest goes.
	a3 := get("a", "3")
	s.release(a3)
	s.mu.Lock()
	_, has1 := s.convs[convKey{"a", "sb", "1"}]
	s.mu.Unlock()
	if has1 || s.count() != 2 {
		t.Errorf("per-key cap: a/1 kept %v, %d conversations", has1, s.count())
	}
	// Past the total cap of 3 with every conversation in use: refused.
	b1 := get("b", "1")
	held := []*conversation{get("a", "2"), get("a", "3"), b1}
	if _, err := s.acquire(ctx, convKey{"c", "sb", "1"}); err == nil || !strings.Contains(err.Error(), "too many conversations") {
		t.Errorf("all busy: %v", err)
	}
	for _, c := range held {
		s.release(c)
	}
	// One conversation's requests are serialised.
	c := get("b", "1")
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(wctx, convKey{"b", "sb", "1"}); err == nil {
		t.Errorf("a second request got a busy conversation")
	}
	s.release(c)
	if err := s.end(ctx, convKey{"b", "sb", "1"}); err != nil || s.count() != 2 {
		t.Errorf("end: %v, %d left", err, s.count())
	}
	_ = s.close(ctx)
	if _, err := s.acquire(ctx, convKey{"d", "sb", "1"}); err != errClosed {
		t.Errorf("after close: %v", err)
	}
}

func TestSweeper(t *testing.T) {
	s := newSessions(40*time.Millisecond, 10, 10, nil)
	defer func() { _ = s.close(context.Background()) }()
	c, err := s.acquire(context.Background(), convKey{"a", "sb", "1"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if s.count() != 1 {
		t.Fatalf("a conversation in use was swept")
	}
	s.release(c)
	deadline := time.Now().Add(2 * time.Second)
	for s.count() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.count() != 0 {
		t.Errorf("an idle conversation was kept")
	}
}

// TestOpenAPIDocumentsRoutes keeps api/openapi.yaml's operations marked
// x-airlock-edge internal/toolexec/anthropic equal to the patterns
// served (internal/api's route test leaves edge operations to their
// package).
func TestOpenAPIDocumentsRoutes(t *testing.T) {
	raw, err := os.ReadFile("../../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for p, item := range doc.Paths {
		for method, op := range item {
			var o struct {
				Edge string `json:"x-airlock-edge"`
			}
			if method == "parameters" || json.Unmarshal(op, &o) != nil || o.Edge != "internal/toolexec/anthropic" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+p)
		}
	}
	sort.Strings(documented)
	served := Patterns()
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Errorf("documented %q, served %q", documented, served)
	}
}

func TestAPIUnreachableAndEndSession(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	h, err := New(Config{APIURL: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	mux := http.NewServeMux()
	for _, p := range Patterns() {
		mux.Handle(p, h)
	}
	req := httptest.NewRequest("POST", "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa/anthropic/tool-uses", strings.NewReader(`{"message":[]}`))
	req.Header.Set("Authorization", "Bearer k")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	host := strings.TrimPrefix(addr, "http://")
	if rec.Code != 503 || strings.Contains(rec.Body.String(), host) || !strings.Contains(rec.Body.String(), "the API could not be reached") {
		t.Errorf("unreachable API: %d %s", rec.Code, rec.Body)
	}

	hs := newHarness(t)
	mux = http.NewServeMux()
	for _, p := range Patterns() {
		mux.Handle(p, hs.h)
	}
	for _, c := range []struct {
		key, session string
		status       int
	}{{"k-admin", "chat-1", 204}, {"", "chat-1", 401}, {"k-admin", "a%20b", 400}} {
		req := httptest.NewRequest("DELETE", "/v1/sandboxes/"+hs.api.sb+"/anthropic/sessions/"+c.session, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("DELETE %s as %q: %d %s, want %d", c.session, c.key, rec.Code, rec.Body, c.status)
		}
	}
	// A closed handler refuses.
	_ = hs.h.Close()
	if status, out := hs.post("k-admin", hs.api.sb, map[string]any{"message": []any{
		map[string]any{"type": "tool_use", "id": "x", "name": "nope", "input": map[string]any{}}}}); status != 503 || !strings.Contains(fmt.Sprint(out), "shutting down") {
		t.Errorf("after Close: %d %v", status, out)
	}
}
