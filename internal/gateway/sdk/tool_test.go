package sdk

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestToolCommand runs bin/tool, as WriteDir places it, against the
// fake gateway.
func TestToolCommand(t *testing.T) {
	requireInterpreter(t, "python3")
	e := newSDKEnv(t, 0)
	tool := filepath.Join(e.lib, "bin", "tool")
	cases := []struct {
		name   string
		stdin  string
		argv   []string
		code   int
		result any    // the JSON printed, when code is 0
		stdout string // what stdout holds, when result is nil
		stderr string // what stderr holds
	}{
		{name: "json args", argv: []string{"call", "echo", `{"text":"hi","count":2}`},
			result: map[string]any{"tool": "echo", "args": map[string]any{"text": "hi", "count": 2.0}}},
		{name: "key=value args", argv: []string{"call", "echo", "text=hi", "count=3", "flag=true", `tags=["a"]`, "note=not json", "empty="},
			result: map[string]any{"tool": "echo", "args": map[string]any{"text": "hi", "count": 3.0, "flag": true, "tags": []any{"a"}, "note": "not json", "empty": ""}}},
		{name: "value with =", argv: []string{"call", "echo", "text=a=b"},
			result: map[string]any{"tool": "echo", "args": map[string]any{"text": "a=b"}}},
		{name: "no args", argv: []string{"call", "sleep"}, result: map[string]any{"slept": true}},
		{name: "stdin args", stdin: `{"text":"from stdin"}`, argv: []string{"call", "echo", "-"},
			result: map[string]any{"tool": "echo", "args": map[string]any{"text": "from stdin"}}},
		{name: "list", argv: []string{"list"}, stdout: "echo\tEcho the arguments back.\n"},
		{name: "stubs", argv: []string{"stubs"}, stdout: "def fail(*, code: str) -> Any:"},
		{name: "help", argv: []string{"--help"}, stdout: "tool call NAME key=value"},

		{name: "tool error", argv: []string{"call", "fail", "code=permission_denied"}, code: 1,
			stderr: "tool: permission_denied: refused: permission_denied\n"},
		{name: "not granted", argv: []string{"call", "nope"}, code: 1, stderr: "permission_denied"},

		{name: "no command", argv: nil, code: 2, stderr: "usage:"},
		{name: "unknown command", argv: []string{"frob"}, code: 2, stderr: "unknown command"},
		{name: "call without name", argv: []string{"call"}, code: 2, stderr: "unknown command"},
		{name: "not key=value", argv: []string{"call", "echo", "text"}, code: 2, stderr: "'text' is not key=value"},
		{name: "empty key", argv: []string{"call", "echo", "=x"}, code: 2, stderr: "is not key=value"},
		{name: "twice", argv: []string{"call", "echo", "a=1", "a=2"}, code: 2, stderr: "given twice"},
		{name: "bad json", argv: []string{"call", "echo", `{"text":`}, code: 2, stderr: "not valid JSON"},
		{name: "json not object", stdin: `[1]`, argv: []string{"call", "echo", "-"}, code: 2, stderr: "must be a JSON object"},
		{name: "list extra", argv: []string{"list", "x"}, code: 2, stderr: "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := e.run(t, c.stdin, append([]string{tool}, c.argv...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errOut)
			}
			if c.stderr != "" && !strings.Contains(errOut, c.stderr) {
				t.Errorf("stderr %q, want it to hold %q", errOut, c.stderr)
			}
			if c.code != 0 {
				if out != "" {
					t.Errorf("stdout %q on a failure, want none", out)
				}
				return
			}
			if c.result == nil {
				if !strings.Contains(out, c.stdout) {
					t.Errorf("stdout %q, want it to hold %q", out, c.stdout)
				}
				return
			}
			var got any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("stdout %q is not JSON: %v", out, err)
			}
			if !reflect.DeepEqual(got, c.result) {
				t.Errorf("result %v, want %v", got, c.result)
			}
		})
	}
}
