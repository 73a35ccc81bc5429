package api

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	sb := e.sandbox(ctx)
	id := sb.ID
	big := `{"template":"` + strings.Repeat("x", 2<<20) + `"}`
	tests := []struct {
		name, method, path, ctype, body string
		status                          int
		code, msg                       string
	}{
		{"malformed json", "POST", "/v1/sandboxes", "", `{"template":`, 400, CodeInvalidArgument, "malformed JSON"},
		{"not an object", "POST", "/v1/sandboxes", "", `[1,2]`, 400, CodeInvalidArgument, "JSON object"},
		{"unknown field", "POST", "/v1/sandboxes", "", `{"tmplate":"host"}`, 400, CodeInvalidArgument, "tmplate"},
		{"wrong type", "POST", "/v1/sandboxes", "", `{"timeout_s":"60"}`, 400, CodeInvalidArgument, "timeout_s"},
		{"fractional", "POST", "/v1/sandboxes", "", `{"timeout_s":1.5}`, 400, CodeInvalidArgument, "timeout_s"},
		{"trailing data", "POST", "/v1/sandboxes", "", `{} {}`, 400, CodeInvalidArgument, "after the JSON"},
		{"oversize body", "POST", "/v1/sandboxes", "", big, 413, CodeRequestTooLarge, "limit"},
		{"content type", "POST", "/v1/sandboxes", "text/plain", `{}`, 415, CodeUnsupportedMediaType, "application/json"},
		{"negative timeout", "POST", "/v1/sandboxes", "", `{"timeout_s":-1}`, 400, CodeInvalidArgument, "timeout_s"},
		{"huge timeout", "POST", "/v1/sandboxes", "", `{"timeout_s":99999999999999}`, 400, CodeInvalidArgument, "timeout_s"},
		{"timeout past max", "POST", "/v1/sandboxes", "", `{"timeout_s":172800}`, 400, CodeInvalidArgument, "maximum"},
		{"huge memory", "POST", "/v1/sandboxes", "", `{"limits":{"memory_mb":9223372036854775807}}`, 400, CodeInvalidArgument, "memory_mb"},
		{"memory over max", "POST", "/v1/sandboxes", "", `{"limits":{"memory_mb":1048576}}`, 400, CodeInvalidArgument, "memory"},
		{"bad template", "POST", "/v1/sandboxes", "", `{"template":"../etc"}`, 400, CodeInvalidArgument, "template"},
		{"unknown template", "POST", "/v1/sandboxes", "", `{"template":"nope"}`, 404, CodeNotFound, "nope"},
		{"bad env key", "POST", "/v1/sandboxes", "", `{"env":{"A-B":"x"}}`, 400, CodeInvalidArgument, "env"},
		{"network mode", "POST", "/v1/sandboxes", "", `{"network":{"mode":"open"}}`, 501, CodeNotSupported, "network"},
		{"network allow", "POST", "/v1/sandboxes", "", `{"network":{"allow":["example.com"]}}`, 400, CodeInvalidArgument, "allow"},
		{"network unknown mode", "POST", "/v1/sandboxes", "", `{"network":{"mode":"bridge"}}`, 400, CodeInvalidArgument, "unknown"},
		{"network bad entry", "POST", "/v1/sandboxes", "", `{"network":{"mode":"allowlist","allow":["a b"]}}`, 400, CodeInvalidArgument, "entry 1"},
		{"network bad port", "POST", "/v1/sandboxes", "", `{"network":{"mode":"allowlist","allow":["example.com:99999"]}}`, 400, CodeInvalidArgument, "entry 1"},
		{"bad id", "GET", "/v1/sandboxes/not-an-id", "", "", 400, CodeInvalidArgument, "malformed sandbox id"},
		{"bad id chars", "GET", "/v1/sandboxes/sb-AAAAAAAAAAAAAAAA", "", "", 400, CodeInvalidArgument, "malformed sandbox id"},
		{"escaped slash id", "GET", "/v1/sandboxes/sb-aaaa%2Faaaaaaaaaaa", "", "", 400, CodeInvalidArgument, "malformed sandbox id"},
		{"list bad state", "GET", "/v1/sandboxes?state=zombie", "", "", 400, CodeInvalidArgument, "zombie"},
		{"list unknown param", "GET", "/v1/sandboxes?owner=x", "", "", 400, CodeInvalidArgument, "owner"},
		{"list bad query", "GET", "/v1/sandboxes?state=%zz", "", "", 400, CodeInvalidArgument, "query"},
		{"list empty metadata key", "GET", "/v1/sandboxes?metadata.=x", "", "", 400, CodeInvalidArgument, "metadata"},
		{"timeout empty body", "POST", "/v1/sandboxes/" + id + "/timeout", "", "", 400, CodeInvalidArgument, "empty"},
		{"timeout zero", "POST", "/v1/sandboxes/" + id + "/timeout", "", `{"timeout_s":0}`, 400, CodeInvalidArgument, "timeout_s"},
		{"network no mode", "PATCH", "/v1/sandboxes/" + id + "/network", "", `{"allow":["example.com"]}`, 400, CodeInvalidArgument, "mode is required"},
		{"network patch bad entry", "PATCH", "/v1/sandboxes/" + id + "/network", "", `{"mode":"allowlist","allow":["*"]}`, 400, CodeInvalidArgument, "entry 1"},
		{"network patch open", "PATCH", "/v1/sandboxes/" + id + "/network", "", `{"mode":"open"}`, 501, CodeNotSupported, "open"},
		{"exec both", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"cmd":["a"],"command":"b"}`, 400, CodeInvalidArgument, "not both"},
		{"exec neither", "POST", "/v1/sandboxes/" + id + "/exec", "", `{}`, 400, CodeInvalidArgument, "required"},
		{"exec empty argv0", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"cmd":[""]}`, 400, CodeInvalidArgument, "cmd[0]"},
		{"exec nul", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"a\u0000b"}`, 400, CodeInvalidArgument, "NUL"},
		{"exec user", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"id","user":"admin"}`, 400, CodeInvalidArgument, "user"},
		{"exec two stdins", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"cat","stdin":"a","stdin_b64":"YQ=="}`, 400, CodeInvalidArgument, "stdin"},
		{"exec bad b64", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"cat","stdin_b64":"!!"}`, 400, CodeInvalidArgument, "malformed"},
		{"exec big stdin", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"cat","stdin":"` + strings.Repeat("a", 600<<10) + `"}`, 413, CodeRequestTooLarge, "stdin is 614400 bytes, more than the limit of 524288 bytes"},
		{"exec timeout", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"true","timeout_s":999999}`, 400, CodeInvalidArgument, "timeout_s"},
		{"exec env", "POST", "/v1/sandboxes/" + id + "/exec", "", `{"command":"true","env":{"1X":"a"}}`, 400, CodeInvalidArgument, "env"},
		{"file no path", "GET", "/v1/sandboxes/" + id + "/files", "", "", 400, CodeInvalidArgument, "path"},
		{"file nul path", "GET", "/v1/sandboxes/" + id + "/files?path=a%00b", "", "", 400, CodeInvalidArgument, "NUL"},
		{"file bad utf8", "GET", "/v1/sandboxes/" + id + "/files?path=%ff", "", "", 400, CodeInvalidArgument, "UTF-8"},
		{"file long path", "GET", "/v1/sandboxes/" + id + "/files?path=" + strings.Repeat("a", 5000), "", "", 400, CodeInvalidArgument, "longer"},
		{"file two paths", "GET", "/v1/sandboxes/" + id + "/files?path=a&path=b", "", "", 400, CodeInvalidArgument, "more than once"},
		{"file unknown param", "PUT", "/v1/sandboxes/" + id + "/files?path=a&mode=777", "", "x", 400, CodeInvalidArgument, "mode"},
		{"file recursive", "DELETE", "/v1/sandboxes/" + id + "/files?path=a&recursive=maybe", "", "", 400, CodeInvalidArgument, "recursive"},
		{"file missing", "DELETE", "/v1/sandboxes/" + id + "/files?path=nope", "", "", 404, CodeNotFound, "nope"},
		{"list depth", "GET", "/v1/sandboxes/" + id + "/files/list?depth=abc", "", "", 400, CodeInvalidArgument, "depth"},
		{"list depth range", "GET", "/v1/sandboxes/" + id + "/files/list?depth=33", "", "", 400, CodeInvalidArgument, "depth"},
		{"list depth negative", "GET", "/v1/sandboxes/" + id + "/files/list?depth=-1", "", "", 400, CodeInvalidArgument, "depth"},
		{"pty cols", "GET", "/v1/sandboxes/" + id + "/pty?cols=0", "", "", 400, CodeInvalidArgument, "cols"},
		{"pty rows", "GET", "/v1/sandboxes/" + id + "/pty?rows=99999", "", "", 400, CodeInvalidArgument, "rows"},
		{"pty param", "GET", "/v1/sandboxes/" + id + "/pty?shell=bash", "", "", 400, CodeInvalidArgument, "shell"},
		{"pty no upgrade", "GET", "/v1/sandboxes/" + id + "/pty", "", "", 426, CodeUpgradeRequired, "WebSocket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			resp, got := e.do(tt.method, tt.path, keyA, tt.ctype, body)
			if resp.StatusCode != tt.status || errCode(t, got) != tt.code {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, truncate(string(got), 300), tt.status, tt.code)
			}
			if tt.code == "" {
				return
			}
			var eb wire.Error
			_ = json.Unmarshal(got, &eb)
			t.Logf("%d %s: %s", resp.StatusCode, eb.Error.Code, eb.Error.Message)
			if !strings.Contains(eb.Error.Message, tt.msg) {
				t.Errorf("message %q does not mention %q", eb.Error.Message, tt.msg)
			}
			if strings.Contains(eb.Error.Message, "/tmp/") || strings.Contains(eb.Error.Message, t.TempDir()[:8]) {
				t.Errorf("message leaks a host path: %q", eb.Error.Message)
			}
		})
	}
	// The server is still fine, and none of this created anything.
	res, err := e.client(keyA).Exec(ctx, id, client.ExecRequest{Command: "echo alive"})
	if err != nil || string(res.Stdout) != "alive\n" {
		t.Fatalf("after bad input: %+v, %v", res, err)
	}
	if n := len(e.mgr.List(sandbox.Filter{})); n != 1 {
		t.Errorf("%d sandboxes after bad creates, want 1", n)
	}
}

// FuzzDecodeCreate feeds arbitrary bodies to the create decoder: it must
// never panic, and what it accepts must be within the caps.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"template":"host","timeout_s":60,"limits":{"cpus":1.5,"memory_mb":512,"pids":10,"disk_mb":100}}`,
		`{"network":{"mode":"none","allow":[]},"env":{"A":"b"},"metadata":{"k":"v"}}`,
		`{"timeout_s":-1}`, `{"limits":{"memory_mb":1e30}}`, `{"x":1}`, `{"env":null}`, ` `, `{"limits":null}`,
	} {
		f.Add([]byte(s))
	}
	cfg := sandbox.Config{MaxLifetime: 24 * time.Hour,
		MaxLimits: runtime.Limits{CPUs: 2, MemoryBytes: 16 << 30, DiskBytes: 64 << 30, Pids: 4096}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req createRequest
		if err := decodeJSONBytes(data, &req, true); err != nil {
			return
		}
		spec, err := req.spec(tenantA, cfg)
		if err != nil {
			return
		}
		l, max := spec.Limits, cfg.MaxLimits
		if spec.Owner != tenantA || spec.Timeout < 0 || spec.Timeout > cfg.MaxLifetime ||
			spec.IdleTimeout < 0 || spec.IdleTimeout > cfg.MaxLifetime ||
			l.MemoryBytes < 0 || l.MemoryBytes > max.MemoryBytes || l.DiskBytes < 0 || l.DiskBytes > max.DiskBytes ||
			l.CPUs < 0 || l.CPUs > max.CPUs || l.Pids < 0 || l.Pids > max.Pids {
			t.Fatalf("accepted an out-of-range spec: %+v", spec)
		}
	})
}

// FuzzDecodeExec feeds arbitrary bodies to the exec decoder.
func FuzzDecodeExec(f *testing.F) {
	for _, s := range []string{
		`{"cmd":["ls","-l"]}`, `{"command":"echo hi","cwd":"/tmp","env":{"A":"b"},"user":"root","stdin":"x","timeout_s":5}`,
		`{"command":"cat","stdin_b64":"AAEC"}`, `{"cmd":[]}`, `{"cmd":[""]}`, `{"command":"a","cmd":["b"]}`, `null`,
	} {
		f.Add([]byte(s))
	}
	lim := Limits{}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		var req execRequest
		if err := decodeJSONBytes(data, &req, false); err != nil {
			return
		}
		areq, err := req.agentRequest(lim)
		if err != nil {
			return
		}
		if (len(areq.Argv) == 0) == (areq.Shell == "") {
			t.Fatalf("accepted a request with both or neither of cmd and command: %+v", req)
		}
		if areq.Timeout <= 0 || areq.Timeout > lim.MaxExecTimeout {
			t.Fatalf("accepted timeout %v", areq.Timeout)
		}
		if strings.ContainsRune(areq.Shell, 0) || strings.ContainsRune(areq.Cwd, 0) {
			t.Fatal("accepted a NUL byte")
		}
		if len(req.commandText()) > maxAuditBytes+20 || !utf8.ValidString(req.commandText()) && utf8.ValidString(req.Command) {
			t.Fatal("audit command text not capped")
		}
	})
}

// FuzzPathParams checks the parsers of URL input: sandbox IDs, file paths
// and the list, files and PTY queries.
func FuzzPathParams(f *testing.F) {
	for _, s := range []string{
		"sb-abcdefghijklmnop", "path=a/b&depth=3", "state=running,stopped&metadata.k=v", "cols=80&rows=24&cmd=sh",
		"path=%00", "depth=99999999999999999999", "metadata.=", "state=", "cmd=%ff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sandbox.ValidID(s) && (len(s) != 19 || strings.ContainsAny(s, "/?#%")) {
			t.Fatalf("ValidID accepted %q", s)
		}
		if checkPath(s) == nil && (s == "" || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)) {
			t.Fatalf("checkPath accepted %q", s)
		}
		if f, err := parseListQuery(s); err == nil {
			for _, st := range f.States {
				if !st.Valid() {
					t.Fatalf("list accepted state %q", st)
				}
			}
			if f.Owner != "" {
				t.Fatal("a query set the owner")
			}
		}
		if q, err := parseQuery(s, "path", "depth"); err == nil {
			if d, err := parseDepth(q.Get("depth")); err == nil && (d < 1 || d > maxListDepth) {
				t.Fatalf("depth %d accepted", d)
			}
		}
		if p, err := parsePTYQuery(s); err == nil {
			if p.cols < 1 || p.cols > maxPTYDim || p.rows < 1 || p.rows > maxPTYDim || p.cmd == "" {
				t.Fatalf("pty params %+v accepted", p)
			}
		}
	})
}

// FuzzStreamWriter splits output into two writes anywhere: the NDJSON
// events must give back exactly the bytes written, text only in data
// (valid UTF-8) and the rest in data_b64.
func FuzzStreamWriter(f *testing.F) {
	for _, s := range []string{"héllo", "a\xc3", "\xff\x00ok", "😀😀", "\xe2\x82", "\xe2\x28\xa1", "plain"} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		var got []byte
		usedB64 := false
		w := &streamWriter{typ: "stdout", emit: func(ev wire.OutputLine) error {
			if ev.Data != "" && len(ev.DataB64) != 0 || ev.Data == "" && len(ev.DataB64) == 0 {
				t.Fatalf("event %+v must carry exactly one of data and data_b64", ev)
			}
			if !utf8.ValidString(ev.Data) {
				t.Fatalf("data %q is not UTF-8", ev.Data)
			}
			if ev.Data != "" {
				got = append(got, ev.Data...)
				return nil
			}
			usedB64 = true
			got = append(got, ev.DataB64...)
			return nil
		}}
		i := int(cut) % (len(data) + 1)
		for _, part := range [][]byte{data[:i], data[i:]} {
			if n, err := w.Write(part); err != nil || n != len(part) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		w.flushRest()
		if !bytes.Equal(got, data) {
			t.Fatalf("events give back %q, wrote %q", got, data)
		}
		if usedB64 && utf8.Valid(data) {
			t.Fatalf("valid UTF-8 %q split at %d was sent as base64", data, i)
		}
	})
}
