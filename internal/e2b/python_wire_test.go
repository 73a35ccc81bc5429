package e2b

// Requests exactly as the Python SDKs send them (e2b 2.45.1 with its
// connectrpc/pyqwest transport, e2b-code-interpreter 2.9.1), against the
// handler and a stub of Airlock's API. The facts and their sources
// (file:line in packages/python-sdk and python/) are in docs/E2B.md's
// Python section. PyPI is not reachable where Airlock is built, so the
// SDKs themselves cannot run here; these tests replay their wire.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

const (
	pyAirlockKey = "py-wire-test-key"
	pyE2BID      = "sbabcdefghijklmnop"
	pyAirlockID  = "sb-abcdefghijklmnop"
)

// pyStub is a stub of Airlock's API: the routes the tests need, with the
// requests it got.
type pyStub struct {
	t  *testing.T
	mu sync.Mutex
	// requests are "METHOD path?query" of every request.
	requests []string
	bodies   map[string][]byte // by "METHOD path"
}

func (s *pyStub) seen(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.requests {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func pySandbox() api.Sandbox {
	now := time.Now().UTC()
	return api.Sandbox{
		ID: pyAirlockID, State: api.StateRunning, Template: "default",
		Limits: api.Limits{CPUs: 1, MemoryMB: 512, DiskMB: 1024}, Metadata: map[string]string{"owner": "py"},
		CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute), MaxExpiresAt: now.Add(time.Hour),
	}
}

func (s *pyStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	s.bodies[r.Method+" "+r.URL.Path] = body
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+pyAirlockKey {
		s.t.Errorf("stub API: %s %s without the caller's key", r.Method, r.URL.Path)
		http.Error(w, `{"error":{"code":"unauthorized","message":"no key"}}`, http.StatusUnauthorized)
		return
	}
	sb := pySandbox()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	base := "/v1/sandboxes/" + pyAirlockID
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes":
		reply(http.StatusCreated, sb)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/sandboxes":
		reply(http.StatusOK, api.SandboxList{Sandboxes: []api.Sandbox{sb}})
	case r.Method == http.MethodGet && r.URL.Path == base:
		reply(http.StatusOK, sb)
	case r.Method == http.MethodGet && r.URL.Path == base+"/files/stat":
		p := r.URL.Query().Get("path")
		reply(http.StatusOK, api.FileEntry{Name: p[strings.LastIndexByte(p, '/')+1:], Path: p, Type: "dir", Mode: 0o755, UID: 1000, GID: 1000, ModTime: time.Now()})
	case r.Method == http.MethodGet && r.URL.Path == base+"/files/watch":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		dir := r.URL.Query().Get("path")
		_, _ = io.WriteString(w, `{"type":"start"}`+"\n")
		_, _ = io.WriteString(w, `{"type":"event","path":"`+dir+`/a.txt","op":"create"}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	case r.Method == http.MethodPost && r.URL.Path == base+"/exec":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		for _, l := range []string{
			`{"type":"start","pid":42}`,
			`{"type":"stdout","data":"hi\n"}`,
			`{"type":"exit","status":"error","exit_code":3}`,
		} {
			_, _ = io.WriteString(w, l+"\n")
		}
	case r.Method == http.MethodPut && r.URL.Path == base+"/files":
		p := r.URL.Query().Get("path")
		reply(http.StatusOK, api.FileWriteResult{FileEntry: api.FileEntry{Name: p[strings.LastIndexByte(p, '/')+1:], Path: p, Type: "file", Size: int64(len(body))}})
	case r.Method == http.MethodPost && r.URL.Path == base+"/code":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		for _, l := range []string{
			`{"type":"stdout","data":"hi\n"}`,
			`{"type":"result","is_main_result":true,"text":"2","html":"<b>2</b>"}`,
			`{"type":"end","context_id":"c1","language":"python","execution_count":1,"status":"ok"}`,
		} {
			_, _ = io.WriteString(w, l+"\n")
		}
	case r.Method == http.MethodPost && r.URL.Path == base+"/contexts":
		reply(http.StatusCreated, api.CodeContext{ID: "c1", Language: "python", Cwd: "/home/user", State: "idle", CreatedAt: time.Now()})
	default:
		s.t.Errorf("stub API: unexpected %s %s", r.Method, r.URL.Path)
		reply(http.StatusNotFound, map[string]any{"error": map[string]string{"code": "not_found", "message": "no route"}})
	}
}

// newPyEdge serves the handler (over HTTP/1.1, as pyqwest uses for a
// plain http:// E2B_API_URL / E2B_SANDBOX_URL) in front of a stub API.
func newPyEdge(t *testing.T) (*httptest.Server, *pyStub) {
	t.Helper()
	stub := &pyStub{t: t, bodies: map[string][]byte{}}
	apiSrv := httptest.NewServer(stub)
	t.Cleanup(apiSrv.Close)
	h, err := New(Config{APIURL: apiSrv.URL})
	if err != nil {
		t.Fatal(err)
	}
	edge := httptest.NewServer(h)
	t.Cleanup(edge.Close)
	return edge, stub
}

// pyControlHeaders are the headers of the Python SDK's control-plane
// requests (e2b/api/__init__.py:243-251, e2b/api/metadata.py).
func pyControlHeaders(h http.Header) {
	h.Set("X-API-KEY", Key(pyAirlockKey))
	h.Set("User-Agent", "e2b-python-sdk/2.45.1")
	h.Set("lang", "python")
	h.Set("lang_version", "3.12.3")
	h.Set("package_version", "2.45.1")
	h.Set("publisher", "e2b")
	h.Set("sdk_runtime", "python")
	h.Set("system", "Linux")
}

// pyEnvdHeaders are the headers of the Python SDK's envd requests
// (connection_config.py:388-396, sandbox_sync/main.py:1162-1168).
func pyEnvdHeaders(h http.Header, port string) {
	h.Set("User-Agent", "e2b-python-sdk/2.45.1")
	h.Set("X-Access-Token", Key(pyAirlockKey))
	h.Set("E2b-Sandbox-Id", pyE2BID)
	h.Set("E2b-Sandbox-Port", port)
}

func pyDo(t *testing.T, method, u string, body []byte, hdr func(http.Header)) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hdr(req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// pyUnary sends a unary envd RPC as connectrpc 0.11 sends it with the
// SDK's JSON codec and compression off (envd/client_shared.py:29-143;
// connectrpc _protocol_connect.py create_request_context): the
// connectrpc user agent wins over the SDK's (the SDK's interceptor only
// adds absent headers, envd/interceptors.py:59-62).
func pyUnary(t *testing.T, edge, method string, msg string, extra map[string]string) (*http.Response, []byte) {
	t.Helper()
	return pyDo(t, http.MethodPost, edge+method, []byte(msg), func(h http.Header) {
		pyEnvdHeaders(h, "49983")
		h.Set("User-Agent", "connectrpc/0.11.1")
		h.Set("Connect-Protocol-Version", "1")
		h.Set("Accept-Encoding", "")
		h.Set("Content-Type", "application/json")
		h.Set("Connect-Timeout-Ms", "60000")
		for k, v := range extra {
			h.Set(k, v)
		}
	})
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

// Sandbox.create: POST /sandboxes (not /v2), timeout always sent (300),
// secure and allow_internet_access always sent, empty metadata and
// envVars; only 201 is parsed (sandbox_sync/sandbox_api.py:232-261,
// api/client/api/sandboxes/post_sandboxes.py:20-37), and the Sandbox
// model needs templateID, sandboxID, clientID, envdVersion
// (api/client/models/sandbox.py:85-91).
func TestPythonCreate(t *testing.T) {
	edge, stub := newPyEdge(t)
	body := `{"templateID": "base", "timeout": 300, "secure": true, "allow_internet_access": true, "metadata": {}, "envVars": {}}`
	resp, b := pyDo(t, http.MethodPost, edge.URL+"/sandboxes", []byte(body), func(h http.Header) {
		pyControlHeaders(h)
		h.Set("Content-Type", "application/json")
	})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d (the SDK parses only 201): %s", resp.StatusCode, b)
	}
	var out map[string]any
	decodeJSON(t, b, &out)
	for _, k := range []string{"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken", "trafficAccessToken"} {
		if _, ok := out[k].(string); !ok {
			t.Errorf("create answer lacks string %s: %s", k, b)
		}
	}
	var sent api.CreateSandboxRequest
	decodeJSON(t, stub.bodies["POST /v1/sandboxes"], &sent)
	if sent.TimeoutS != 300 {
		t.Errorf("timeout 300 reached the API as %d s", sent.TimeoutS)
	}
}

// Sandbox.connect: POST /sandboxes/{id}/connect (not /v2) with the
// timeout always set, 300 by default (sandbox_sync/sandbox_api.py:338-355,
// api/client/api/sandboxes/post_sandboxes_sandbox_id_connect.py:23); 200
// and 201 are parsed.
func TestPythonConnect(t *testing.T) {
	edge, stub := newPyEdge(t)
	resp, b := pyDo(t, http.MethodPost, edge.URL+"/sandboxes/"+pyE2BID+"/connect", []byte(`{"timeout": 300}`), func(h http.Header) {
		pyControlHeaders(h)
		h.Set("Content-Type", "application/json")
	})
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out map[string]any
	decodeJSON(t, b, &out)
	if out["sandboxID"] != pyE2BID || out["envdVersion"] != EnvdVersion {
		t.Errorf("connect answer: %s", b)
	}
	// The sandbox has 10 minutes left: a 300 s connect must not shorten it.
	if got := stub.seen("POST /v1/sandboxes/" + pyAirlockID + "/timeout"); len(got) != 0 {
		t.Errorf("connect shortened the timeout: %v", got)
	}
}

// Sandbox.list: ListedSandbox.from_dict needs diskSizeMB and clientID
// besides the fields the JS SDK reads (api/client/models/listed_sandbox.py:115-133).
func TestPythonListedFields(t *testing.T) {
	edge, _ := newPyEdge(t)
	resp, b := pyDo(t, http.MethodGet, edge.URL+"/v2/sandboxes", nil, pyControlHeaders)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out []map[string]any
	decodeJSON(t, b, &out)
	if len(out) != 1 {
		t.Fatalf("want one sandbox: %s", b)
	}
	for _, k := range []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"} {
		if _, ok := out[0][k]; !ok {
			t.Errorf("listed sandbox lacks %s (from_dict raises KeyError): %s", k, b)
		}
	}
}

// Sandbox.list(query=SandboxQuery(metadata=...)): the pairs are quoted,
// then urlencoded, then sent as one query parameter
// (sandbox_sync/paginator.py:53-59), and E2B's API unescapes the
// decoded parameter once more before splitting it and unescaping each
// key and value (e2b-dev/infra packages/api/internal/utils/sandboxes_list.go
// parseFilters). The JS SDK encodes the same way (encodeURIComponent,
// then URLSearchParams). For {"user id": "a/b c"} Python sends
// metadata=user%252520id%3Da%252Fb%252520c.
func TestPythonListMetadataEncoding(t *testing.T) {
	edge, stub := newPyEdge(t)
	q := url.Values{"metadata": {"user%2520id=a%2Fb%2520c"}}.Encode()
	if q != "metadata=user%252520id%3Da%252Fb%252520c" {
		t.Fatalf("test encodes %q, not what httpx sends", q)
	}
	resp, b := pyDo(t, http.MethodGet, edge.URL+"/v2/sandboxes?"+q, nil, pyControlHeaders)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	got := stub.seen("GET /v1/sandboxes?")
	want := url.Values{"metadata.user id": {"a/b c"}, "state": {"running"}}.Encode()
	if len(got) != 1 || got[0] != "GET /v1/sandboxes?"+want {
		t.Errorf("the API was asked %v, want %q", got, want)
	}
}

// The control plane's not-found is the HTTP status for the Python SDK
// (404 -> SandboxNotFoundException, sandbox_sync/sandbox_api.py:118,178,200,311,
// 357, 415, 492, 547), not the body's code as for the JS SDK. A route
// the edge does not serve is ServeMux's plain-text 404, so get_metrics(),
// update_network(), fork() and create_snapshot() on a live sandbox raise
// "sandbox not found". They should be told "not supported" (501, E2B's
// error body), as pause is.
func TestPythonUnservedControlRoutes(t *testing.T) {
	edge, _ := newPyEdge(t)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/sandboxes/" + pyE2BID + "/metrics", ""},
		{http.MethodPut, "/sandboxes/" + pyE2BID + "/network", `{"allowOut":["example.com"]}`},
		{http.MethodPost, "/sandboxes/" + pyE2BID + "/fork", `{"timeout":300,"count":1}`},
		{http.MethodPost, "/sandboxes/" + pyE2BID + "/snapshots", `{}`},
	} {
		resp, b := pyDo(t, c.method, edge.URL+c.path, []byte(c.body), func(h http.Header) {
			pyControlHeaders(h)
			h.Set("Content-Type", "application/json")
		})
		var e e2bError
		if resp.StatusCode == http.StatusNotFound || json.Unmarshal(b, &e) != nil || e.Code != resp.StatusCode {
			t.Errorf("%s %s: %d %s; want a status other than 404 with E2B's error body", c.method, c.path, resp.StatusCode, b)
		}
	}
}

// A unary envd RPC as connectrpc sends it (User-Agent connectrpc/...,
// Accept-Encoding empty, Connect-Timeout-Ms from request_timeout on every
// unary call, sandbox_sync/filesystem/filesystem.py:500-508), and the
// Basic header of user= (envd/utils.py:44-57).
func TestPythonUnaryRPC(t *testing.T) {
	edge, stub := newPyEdge(t)
	resp, b := pyUnary(t, edge.URL, "/filesystem.Filesystem/Stat", `{"path":"/home/user"}`,
		map[string]string{"Authorization": "Basic cm9vdDo="}) // root:
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out struct {
		Entry struct {
			Name, Type string
		}
	}
	decodeJSON(t, b, &out)
	if out.Entry.Name != "user" || out.Entry.Type != "FILE_TYPE_DIRECTORY" {
		t.Errorf("stat answer: %s", b)
	}
	if got := stub.seen("GET /v1/sandboxes/" + pyAirlockID + "/files/stat"); len(got) != 1 || !strings.Contains(got[0], "user=root") {
		t.Errorf("the API was asked %v, want the stat as root", got)
	}
}

// files.write_files with several entries: one multipart body, a "file"
// part per entry whose filename is the entry's full path, no ?path=
// (sandbox_sync/filesystem/filesystem.py:403-430; _to_httpx_file,
// sandbox/filesystem/filesystem.py:265-278). httpx writes the filename
// raw (UTF-8 included), escaping only '"' (%22), '\\' and control
// characters, and guesses each part's Content-Type from the name.
// The answer must be a non-empty list of {name, path, type}.
func TestPythonMultipartWrite(t *testing.T) {
	edge, stub := newPyEdge(t)
	var body bytes.Buffer
	for _, f := range []struct{ path, ctype, data string }{
		{"/tmp/a b.txt", "text/plain", "one"},
		{"/tmp/d/\u00fc.bin", "application/octet-stream", "two"},
	} {
		body.WriteString("--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + f.path + "\"\r\nContent-Type: " + f.ctype + "\r\n\r\n" + f.data + "\r\n")
	}
	body.WriteString("--b0undary--\r\n")
	resp, b := pyDo(t, http.MethodPost, edge.URL+"/files", body.Bytes(), func(h http.Header) {
		pyEnvdHeaders(h, "49983")
		h.Set("Content-Type", "multipart/form-data; boundary=b0undary")
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out []map[string]any
	decodeJSON(t, b, &out)
	if len(out) != 2 || out[0]["path"] != "/tmp/a b.txt" || out[1]["path"] != "/tmp/d/\u00fc.bin" || out[1]["name"] != "\u00fc.bin" || out[0]["type"] != "file" {
		t.Errorf("upload answer %s", b)
	}
	if got := stub.seen("PUT /v1/sandboxes/" + pyAirlockID + "/files?"); len(got) != 2 {
		t.Errorf("the API got %v, want two writes", got)
	}
}

// e2b (Python) up to 1.7.0 sent User-Agent: connect-python on envd RPCs,
// and up to 1.5.2 failed on response fields it did not know. envd strips
// its responses to the fields of its legacy protos for that user agent:
// EntryInfo keeps name, type and path (e2b-dev/infra
// packages/envd/internal/services/legacy/interceptor.go, conversion.go).
// The current SDK sends connectrpc/<version> and ignores unknown fields
// (envd/client_shared.py:29-57).
func TestPythonLegacyUserAgent(t *testing.T) {
	edge, _ := newPyEdge(t)
	resp, b := pyUnary(t, edge.URL, "/filesystem.Filesystem/Stat", `{"path":"/home/user"}`, map[string]string{"User-Agent": "connect-python"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct{ Entry map[string]any }
	decodeJSON(t, b, &out)
	for k := range out.Entry {
		if k != "name" && k != "type" && k != "path" {
			t.Errorf("legacy client got EntryInfo field %q: %s", k, b)
		}
	}
	if resp.Header.Get("X-E2b-Legacy-Sdk") != "true" {
		t.Errorf("no x-e2b-legacy-sdk: true header")
	}
}

// The sync SDK's files.watch_dir is the polled watcher: CreateWatcher,
// then GetWatcherEvents (each answer drains what happened since the
// last), then RemoveWatcher (sandbox_sync/filesystem/filesystem.py:633-698,
// sandbox_sync/filesystem/watch_handle.py:43-103); envd keeps the watcher
// until it is removed (e2b-dev/infra
// packages/envd/internal/services/filesystem/watch_sync.go). An unknown
// watcher is not_found. The async SDK uses WatchDir.
func TestPythonPolledWatcher(t *testing.T) {
	edge, _ := newPyEdge(t)
	hdr := map[string]string{"Keepalive-Ping-Interval": "50"}
	resp, b := pyUnary(t, edge.URL, "/filesystem.Filesystem/CreateWatcher", `{"path":"/tmp/w"}`, hdr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CreateWatcher: %d %s", resp.StatusCode, b)
	}
	var created struct {
		WatcherID string `json:"watcherId"`
	}
	decodeJSON(t, b, &created)
	if created.WatcherID == "" {
		t.Fatalf("CreateWatcher gave no watcherId: %s", b)
	}
	ask := `{"watcherId":"` + created.WatcherID + `"}`
	var events []map[string]any
	for deadline := time.Now().Add(10 * time.Second); len(events) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, b = pyUnary(t, edge.URL, "/filesystem.Filesystem/GetWatcherEvents", ask, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GetWatcherEvents: %d %s", resp.StatusCode, b)
		}
		var got struct{ Events []map[string]any }
		decodeJSON(t, b, &got)
		events = got.Events
	}
	if len(events) != 1 || events[0]["name"] != "a.txt" || events[0]["type"] != "EVENT_TYPE_CREATE" {
		t.Fatalf("events %v, want a.txt created", events)
	}
	resp, b = pyUnary(t, edge.URL, "/filesystem.Filesystem/GetWatcherEvents", ask, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "a.txt") {
		t.Errorf("a second poll repeats the events: %d %s", resp.StatusCode, b)
	}
	if resp, b = pyUnary(t, edge.URL, "/filesystem.Filesystem/RemoveWatcher", ask, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("RemoveWatcher: %d %s", resp.StatusCode, b)
	}
	resp, b = pyUnary(t, edge.URL, "/filesystem.Filesystem/GetWatcherEvents", ask, nil)
	var ce struct{ Code string }
	decodeJSON(t, b, &ce)
	if resp.StatusCode != http.StatusNotFound || ce.Code != "not_found" {
		t.Errorf("a removed watcher: %d %s, want not_found", resp.StatusCode, b)
	}
}

// commands.run as connectrpc streams it: application/connect+json, an
// enveloped Start whose optional fields protobuf-py leaves out, and the
// SDK's keepalive and timeout headers (sandbox_sync/commands/command.py:286-315).
// The first message must be the start event (envd/utils.py:27-41); the
// end event's exit_code decides CommandExitException
// (sandbox_sync/commands/command_handle.py:121-134, 198-204).
func TestPythonStartStream(t *testing.T) {
	edge, stub := newPyEdge(t)
	msg := []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi; exit 3"]},"stdin":false}`)
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	env = append(env, msg...)
	req, err := http.NewRequest(http.MethodPost, edge.URL+"/process.Process/Start", bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	pyEnvdHeaders(req.Header, "49983")
	req.Header.Set("User-Agent", "connectrpc/0.11.1")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Accept-Encoding", "")
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var frames []string
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&2 != 0 {
			if string(b) != "{}" {
				t.Errorf("end of stream %s, want {}", b)
			}
			break
		}
		frames = append(frames, string(b))
	}
	if len(frames) != 3 || !strings.Contains(frames[0], `"start":{"pid":42}`) ||
		!strings.Contains(frames[1], `"stdout":"aGkK"`) || !strings.Contains(frames[2], `"exitCode":3`) {
		t.Errorf("frames %q, want start (pid 42), stdout hi, end with exit code 3", frames)
	}
	var sent api.ExecRequest
	decodeJSON(t, stub.bodies["POST /v1/sandboxes/"+pyAirlockID+"/exec"], &sent)
	if strings.Join(sent.Cmd, " ") != "/bin/bash -l -c echo hi; exit 3" || sent.TimeoutS < 55 || sent.TimeoutS > 60 {
		t.Errorf("the API ran %q for %d s, want the command for the call's 60 s", sent.Cmd, sent.TimeoutS)
	}
}

// run_code: /execute with the keys Python sends as null, and each line
// parsed as parse_output does: json.loads, pop type, stdout needs text
// and timestamp, result is Result(**data), number_of_executions needs
// execution_count (python/e2b_code_interpreter/code_interpreter_sync.py:196-249,
// models.py:452-483). /contexts carries only the traffic token
// (code_interpreter_sync.py:283-296).
func TestPythonCodeInterpreter(t *testing.T) {
	edge, _ := newPyEdge(t)
	body := `{"code": "print('hi'); 1+1", "context_id": null, "language": null, "env_vars": null}`
	resp, b := pyDo(t, http.MethodPost, edge.URL+"/execute", []byte(body), func(h http.Header) {
		pyEnvdHeaders(h, "49999")
		h.Set("User-Agent", "python-httpx/0.28.1")
		h.Set("Content-Type", "application/json")
		h.Set("E2B-Traffic-Access-Token", Key(pyAirlockKey))
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	resultKeys := map[string]bool{"text": true, "html": true, "markdown": true, "svg": true, "png": true, "jpeg": true, "pdf": true,
		"latex": true, "json": true, "javascript": true, "data": true, "chart": true, "is_main_result": true, "extra": true}
	var stdout, text string
	count := -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var line map[string]any
		decodeJSON(t, sc.Bytes(), &line)
		typ := line["type"]
		delete(line, "type")
		switch typ {
		case "stdout":
			if _, ok := line["timestamp"]; !ok {
				t.Errorf("stdout line without timestamp: %s", sc.Text())
			}
			stdout += line["text"].(string)
		case "result":
			for k := range line {
				if !resultKeys[k] {
					t.Errorf("result key %q is not a Result field: %s", k, sc.Text())
				}
			}
			if line["is_main_result"] == true {
				text, _ = line["text"].(string)
			}
		case "number_of_executions":
			count = int(line["execution_count"].(float64))
		}
	}
	if stdout != "hi\n" || text != "2" || count != 1 {
		t.Errorf("stdout %q, text %q, count %d from %s", stdout, text, count, b)
	}
	resp, b = pyDo(t, http.MethodPost, edge.URL+"/contexts", []byte(`{"language": "python"}`), func(h http.Header) {
		h.Set("Content-Type", "application/json")
		h.Set("E2b-Sandbox-Id", pyE2BID)
		h.Set("E2b-Sandbox-Port", "49999")
		h.Set("E2B-Traffic-Access-Token", Key(pyAirlockKey))
	})
	var cc map[string]any
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/contexts: %d %s", resp.StatusCode, b)
	}
	decodeJSON(t, b, &cc)
	if cc["id"] != "c1" || cc["language"] != "python" {
		t.Errorf("/contexts answer %s", b)
	}
}
