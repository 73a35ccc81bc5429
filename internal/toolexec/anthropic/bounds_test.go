package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// plantedLines is what the sandbox's code can leave for the model to
// view: 4 MiB of empty lines, which cat -n makes nine times as long.
func plantedLines(hs *harness) string {
	hs.api.mu.Lock()
	defer hs.api.mu.Unlock()
	hs.api.files["/home/user/lines"] = []byte(strings.Repeat("\n", 4<<20))
	return "/home/user/lines"
}

// TestAnswerBudget: eight views of a planted file of empty lines make
// an answer of at most maxAnswerBytes (and a little), the last results
// cut with a note; before the budget the answer was over 270 MiB, and
// 100 views of a 16 MiB file (one request) over 14 GiB.
func TestAnswerBudget(t *testing.T) {
	hs := newHarness(t)
	p := plantedLines(hs)
	var uses []any
	for i := range 8 {
		uses = append(uses, map[string]any{"type": "tool_use", "id": fmt.Sprintf("v%d", i), "name": EditorTool,
			"input": map[string]any{"command": "view", "path": p}})
	}
	code, out := hs.post("k-admin", hs.api.sb, map[string]any{"message": map[string]any{"content": uses}})
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	raw, _ := json.Marshal(out)
	if len(raw) > maxAnswerBytes+64<<10 {
		t.Fatalf("the answer is %d bytes, want at most %d and a little", len(raw), maxAnswerBytes)
	}
	var rs []ToolResult
	b, _ := json.Marshal(out["content"])
	if err := json.Unmarshal(b, &rs); err != nil || len(rs) != 8 {
		t.Fatalf("results: %v", err)
	}
	if !strings.HasSuffix(rs[7].Content, dropNote[1:]) || !strings.HasPrefix(rs[0].Content, "Here's the result of running `cat -n` on "+p+":\n     1\t\n     2\t\n") {
		t.Errorf("first %.80q, last ends %q", rs[0].Content, rs[7].Content[max(0, len(rs[7].Content)-100):])
	}
}

// TestViewBuildsWhatItShows: a view cut to max_characters builds the
// lines it shows, not the whole file's (every line a string, then the
// numbered text): the daemon allocates a few times the file, not 40.
// (Each line ends in a newline, the last one too.)
func TestViewBuildsWhatItShows(t *testing.T) {
	hs := newHarness(t)
	p := plantedLines(hs)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := hs.edit(map[string]any{"command": "view", "path": p, "max_characters": 1000})
	runtime.ReadMemStats(&after)
	if r.IsError || !strings.Contains(r.Content, "[output truncated to 1000 of ") {
		t.Fatalf("result %.200q", r.Content)
	}
	// The whole output: header, 4Mi lines of "%6d\t" (7 digits past
	// 999,999) and their newlines.
	want := len("Here's the result of running `cat -n` on "+p+":\n") + 999_999*8 + (4<<20-999_999)*9
	if !strings.Contains(r.Content, fmt.Sprintf("of %d characters]", want)) {
		t.Errorf("the total is not %d: %q", want, r.Content[len(r.Content)-60:])
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("one view of a 4 MiB file allocated %d MiB", got>>20)
	}
}

func TestAnswerBudgetKeep(t *testing.T) {
	b := answerBudget{left: 100}
	if got := b.keep("a<b"); got != "a<b" || b.left != 92 {
		t.Fatalf("keep = %q, left %d", got, b.left)
	}
	b = answerBudget{left: 1000}
	s := strings.Repeat("é\x01", 150) // 2+6 bytes a pair encoded
	got := b.keep(s)
	if !strings.HasSuffix(got, dropNote) || len(got) >= len(s) || !utf8Valid(got) || b.left != 0 {
		t.Fatalf("keep = %q, left %d", got, b.left)
	}
	if got := b.keep("x"); got != dropNote[1:] {
		t.Fatalf("an empty budget keeps %q", got)
	}
}

// heldFS is a fileAPI whose stat waits for release, counting the calls
// that reached it.
type heldFS struct {
	arrived chan struct{}
	release chan struct{}
}

func (f *heldFS) StatFile(ctx context.Context, id, p string, _ ...client.FileOption) (*client.FileInfo, error) {
	f.arrived <- struct{}{}
	<-f.release
	return &client.FileInfo{Path: p, Type: "file"}, nil
}

func (f *heldFS) ReadFile(ctx context.Context, id, p string, _ ...client.FileOption) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("a\n")), nil
}

func (f *heldFS) WriteFile(ctx context.Context, id, p string, r io.Reader, _ ...client.FileOption) (*client.FileInfo, error) {
	return &client.FileInfo{Path: p, Type: "file"}, nil
}

func (f *heldFS) ListDir(ctx context.Context, id, p string, depth int, _ ...client.FileOption) ([]client.FileInfo, bool, error) {
	return nil, false, nil
}

// TestEditorFileSlots: the commands that read a file take one of the
// handler's slots (maxFilesAtOnce), so that 64 requests do not hold 64
// files of 16 MiB several times over; create, which reads none, takes
// none.
func TestEditorFileSlots(t *testing.T) {
	fs := &heldFS{arrived: make(chan struct{}, 10), release: make(chan struct{})}
	slots := make(chan struct{}, 1)
	e := &editor{fs: fs, sandbox: "sb", maxFile: 1 << 20, limit: maxAnswerBytes, slots: slots}
	var wg sync.WaitGroup
	for _, cmd := range []string{"view", "str_replace"} {
		wg.Go(func() {
			_, _ = e.run(context.Background(), map[string]any{"command": cmd, "path": "/f", "old_str": "a", "new_str": "b"})
		})
	}
	<-fs.arrived
	select {
	case <-fs.arrived:
		t.Fatal("two commands read files at once with one slot")
	case <-time.After(200 * time.Millisecond):
	}
	// create takes no slot: it stats while the others wait.
	wg.Go(func() {
		_, _ = e.run(context.Background(), map[string]any{"command": "create", "path": "/g", "file_text": "x"})
	})
	select {
	case <-fs.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("create waited for a file slot")
	}
	close(fs.release)
	wg.Wait()
	// A waiting command gives up with its context.
	slots <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.run(ctx, map[string]any{"command": "view", "path": "/f"}); err == nil {
		t.Fatal("a view ran without a slot")
	}
}

// TestInflightPerTenant: one tenant's requests in flight (programs that
// run for an hour, say) hold at most maxInflightPerTenant of the
// handler's maxInflight slots; past it that tenant is refused (429) and
// the others still get through.
func TestInflightPerTenant(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan string, 1000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		_ = json.NewEncoder(w).Encode(api.WhoAmI{TenantID: "t-" + key, KeyID: key, Scopes: []string{"admin"}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Sandbox{ID: r.PathValue("id"), State: "running"})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/run", func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Get("Authorization")
		<-release
		out := "ok"
		_ = json.NewEncoder(w).Encode(api.RunResult{ExecResult: api.ExecResult{Status: api.StatusSuccess, Stdout: &out}})
	})
	srv := httptest.NewServer(mux)
	h, err := New(Config{APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		_ = h.Close()
		srv.Close()
	})
	post := func(key string, session int) int {
		body, _ := json.Marshal(map[string]any{"session": fmt.Sprint("s", session), "message": []any{map[string]any{"type": "tool_use", "id": "p",
			"name": ProgramTool, "input": map[string]any{"language": "bash", "code": "sleep 3600"}}}})
		req := httptest.NewRequest("POST", "/v1/sandboxes/sb/anthropic/tool-uses", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		m := http.NewServeMux()
		m.Handle(ToolUsesPattern, h)
		m.ServeHTTP(rec, req)
		return rec.Code
	}
	wait := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("only some of %d programs reached the API", n)
			}
		}
	}
	var wg sync.WaitGroup
	for i := range maxInflightPerTenant {
		wg.Go(func() { post("a", i) })
	}
	wait(maxInflightPerTenant)
	st := make(chan int, 1)
	go func() { st <- post("a", 999) }()
	select {
	case s := <-st:
		if s != http.StatusTooManyRequests {
			t.Fatalf("tenant a's request %d: status %d, want 429", maxInflightPerTenant+1, s)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("tenant a's request %d is held, not refused", maxInflightPerTenant+1)
	}
	wg.Go(func() { post("b", 0) })
	wait(1) // another tenant still runs
	close(release)
	wg.Wait()
}

// TestSessionsTenantCap: a tenant's keys together keep at most a
// quarter of the conversations (at least the per-key cap); past it the
// tenant's own idle conversations go, never another tenant's, however
// long that one has been idle. Before the cap one tenant with enough
// keys filled the table and every new conversation of its evicted the
// other tenants' shells.
func TestSessionsTenantCap(t *testing.T) {
	s := newSessions(time.Hour, 16, 2, nil)
	defer func() { _ = s.close(context.Background()) }()
	use := func(key, name string) {
		t.Helper()
		c, err := s.acquire(context.Background(), convKey{key, "sb", name})
		if err != nil {
			t.Fatalf("%s/%s: %v", key, name, err)
		}
		s.release(c)
		time.Sleep(time.Millisecond)
	}
	use("u/x", "1") // another tenant's, idle longest
	for _, k := range []string{"t/a", "t/b", "t/c", "t/d"} {
		use(k, "1")
		use(k, "2")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ours := 0
	for k := range s.convs {
		if tenantOf(k.key) == "t" {
			ours++
		}
	}
	_, kept := s.convs[convKey{"u/x", "sb", "1"}]
	if ours != 4 || !kept {
		t.Fatalf("tenant t keeps %d conversations (want 4), u's kept: %v", ours, kept)
	}
	if _, ok := s.convs[convKey{"t/d", "sb", "2"}]; !ok {
		t.Fatal("the newest conversation is not kept")
	}
}

// TestStalledBody: the routes are served outside the API's slow-body
// guard, so a request whose body never arrives holds nothing past
// bodyTimeout: a bad key's 401 goes out by then (the server drains the
// body first), a good key's request ends 408. Before, a body that never
// came held the request, and its slot of maxInflight, forever.
func TestStalledBody(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 300 * time.Millisecond
	defer func() { bodyTimeout = old }()
	f := newFakeAPI()
	apiSrv := httptest.NewServer(f)
	defer apiSrv.Close()
	h, err := New(Config{APIURL: apiSrv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	mux := http.NewServeMux()
	for _, p := range Patterns() {
		mux.Handle(p, h)
	}
	edge := httptest.NewServer(mux)
	defer func() {
		edge.CloseClientConnections()
		edge.Close()
	}()
	stalled := func(key string) (int, time.Duration) {
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("POST", edge.URL+"/v1/sandboxes/"+f.sb+"/anthropic/tool-uses", pr)
		req.Header.Set("Authorization", "Bearer "+key)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return 0, 0
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if st, took := stalled("bad"); st != 401 || took > 5*time.Second {
			t.Errorf("a bad key with a stalled body: %d after %v, want 401 by %v", st, took, bodyTimeout)
		}
		if st, took := stalled("k-admin"); st != http.StatusRequestTimeout || took > 5*time.Second {
			t.Errorf("a stalled body: %d after %v, want 408 after %v", st, took, bodyTimeout)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a request with a stalled body is still held")
	}
}
