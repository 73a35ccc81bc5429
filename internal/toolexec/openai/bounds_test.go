package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
)

// TestAnswerBudget: commands that print 1 MiB a stream of what JSON
// escapes to 6 bytes (a sandbox's program can) no longer make one answer
// hold 6 MiB per stream in the daemon, 64 calls × 32 commands of them
// per request: past maxAnswerBytes, encoded, outputs are cut with a note.
// Before the budget this request's answer was 96 MiB.
func TestAnswerBudget(t *testing.T) {
	_, post := harnessRaw(t)
	cmds := `"flood","flood","flood","flood"`
	body := fmt.Sprintf(`{"max_output_length":%d,"output":[
		{"type":"shell_call","call_id":"c1","action":{"commands":[%s]}},
		{"type":"local_shell_call","call_id":"c2","action":{"type":"exec","command":["flood"]}},
		{"type":"shell_call","call_id":"c3","action":{"commands":[%s]}}]}`, maxOutputLength, cmds, cmds)
	st, raw := post("good", "sb1", body)
	if st != 200 {
		t.Fatalf("status %d: %.300s", st, raw)
	}
	if len(raw) > maxAnswerBytes+64<<10 {
		t.Fatalf("the answer is %d bytes, want at most %d and a little", len(raw), maxAnswerBytes)
	}
	var out struct {
		Input []struct {
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Input) != 3 {
		t.Fatalf("answer: %v, %d items", err, len(out.Input))
	}
	var last []shellOutput
	if err := json.Unmarshal(out.Input[2].Output, &last); err != nil || len(last) != 4 {
		t.Fatalf("the last call's output: %v", err)
	}
	if !strings.HasSuffix(last[3].Stderr, dropNote[1:]) {
		t.Errorf("the last output does not end with the note: %.100q", last[3].Stderr)
	}
	var first []shellOutput
	_ = json.Unmarshal(out.Input[0].Output, &first)
	if len(first) == 0 || first[0].Stdout != strings.Repeat("<", 1<<20) {
		t.Errorf("the first output is not whole")
	}
}

func TestAnswerBudgetKeep(t *testing.T) {
	b := answerBudget{left: 100}
	if got := b.keep(`a"b`, false); got != `a"b` || b.left != 96 {
		t.Fatalf("keep = %q, left %d", got, b.left)
	}
	b = answerBudget{left: 1000}
	s := strings.Repeat("é\x01", 150) // 2+6 bytes a pair encoded
	got := b.keep(s, false)
	if !strings.HasSuffix(got, dropNote) || len(got) >= len(s)+len(dropNote) || !isValidUTF8(got) || b.left != 0 {
		t.Fatalf("keep = %q, left %d", got, b.left)
	}
	b = answerBudget{left: 1000}
	if got := b.keep(strings.Repeat("\x01", 150), true); !strings.HasSuffix(got, dropNote) {
		t.Fatalf("nested: 150 × 7 bytes kept whole in 1000")
	}
	if got := b.keep("x", false); got != dropNote[1:] {
		t.Fatalf("an empty budget keeps %q", got)
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "?") == s }

// blockingAPI answers whoami and sandbox lookups, and holds every exec
// and file read until release is closed, counting them.
type blockingAPI struct {
	release chan struct{}
	mu      sync.Mutex
	held    int
	arrived chan struct{}
}

func (b *blockingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.Pattern {
	case "GET /v1/whoami":
		// Each key is a tenant of its own: "k" and "k2" are two.
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		_ = json.NewEncoder(w).Encode(wire.WhoAmI{TenantID: "t-" + key, KeyID: key, Scopes: []string{"admin"}})
	case "GET /v1/sandboxes/{id}":
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "sb1", "state": "running"})
	default:
		b.mu.Lock()
		b.held++
		b.mu.Unlock()
		b.arrived <- struct{}{}
		<-b.release
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "a\n")
			return
		}
		out := "x"
		_ = json.NewEncoder(w).Encode(wire.ExecResult{Status: wire.StatusSuccess, Stdout: &out})
	}
}

func blockingHarness(t *testing.T) (*blockingAPI, func(key, body string) int) {
	b := &blockingAPI{release: make(chan struct{}), arrived: make(chan struct{}, 1000)}
	mux := http.NewServeMux()
	for _, p := range []string{"GET /v1/whoami", "GET /v1/sandboxes/{id}", "POST /v1/sandboxes/{id}/exec", "GET /v1/sandboxes/{id}/files", "PUT /v1/sandboxes/{id}/files"} {
		mux.Handle(p, b)
	}
	api := httptest.NewServer(mux)
	edge := httptest.NewServer(Handler(Config{APIURL: api.URL}))
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
		edge.Close()
		api.Close()
	})
	return b, func(key, body string) int {
		req, _ := http.NewRequest("POST", edge.URL+"/v1/sandboxes/sb1/openai/tool-calls", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
}

func waitArrivals(t *testing.T, b *blockingAPI, n int) {
	t.Helper()
	for range n {
		select {
		case <-b.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("only some of %d calls reached the API", n)
		}
	}
}

// TestInflightCap: requests past maxInflight, or past a tenant's
// maxInflightPerTenant, are refused at once (429), not queued in the
// daemon with their bodies and answers; one tenant's held requests leave
// the other tenants their slots.
func TestInflightCap(t *testing.T) {
	b, post := blockingHarness(t)
	body := `{"output":[{"type":"shell_call","call_id":"c1","action":{"commands":["x"]}}]}`
	refused := func(key string) {
		t.Helper()
		st := make(chan int, 1)
		go func() { st <- post(key, body) }()
		select {
		case s := <-st:
			if s != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a request of %s is held, not refused", key)
		}
	}
	var wg sync.WaitGroup
	tenants := maxInflight / maxInflightPerTenant
	for i := range tenants {
		key := fmt.Sprintf("k%d", i)
		for range maxInflightPerTenant {
			wg.Go(func() { post(key, body) })
		}
		waitArrivals(t, b, maxInflightPerTenant)
		if i == 0 {
			refused(key) // the tenant's cap, while the others have room
		}
	}
	refused("another") // every slot is held
	close(b.release)
	wg.Wait()
	if st := post("k0", body); st != 200 {
		t.Fatalf("after the others ended: status %d", st)
	}
}

// TestPatchSlots: patches apply maxPatchesAtOnce at a time across
// requests; the others wait for a slot.
func TestPatchSlots(t *testing.T) {
	b, post := blockingHarness(t)
	body := `{"output":[{"type":"apply_patch_call","call_id":"p","operation":{"type":"update_file","path":"/f","diff":"@@\n-a\n+b\n"}}]}`
	var wg sync.WaitGroup
	for range maxPatchesAtOnce + 2 {
		wg.Go(func() { post("k", body) })
	}
	waitArrivals(t, b, maxPatchesAtOnce)
	select {
	case <-b.arrived:
		t.Fatalf("more than %d patches at once", maxPatchesAtOnce)
	case <-time.After(300 * time.Millisecond):
	}
	close(b.release)
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held != 2*(maxPatchesAtOnce+2) {
		t.Fatalf("%d file calls, want a read and a write per patch", b.held)
	}
}

// TestStalledBody: the route is served outside the API's slow-body
// guard, so a request whose body never arrives holds nothing past
// bodyTimeout: without a valid key it is answered 401 before the body
// is read (its slot given back at once; the server's drain of the body
// ends at the deadline), with one 408. Before, a body that never came
// held its request, and its slot, forever: with the in-flight cap, 64
// of them from anyone would refuse every tenant.
func TestStalledBody(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 300 * time.Millisecond
	defer func() { bodyTimeout = old }()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"code":"unauthenticated","message":"invalid API key"}}`)
			return
		}
		_ = json.NewEncoder(w).Encode(wire.WhoAmI{TenantID: "t", KeyID: "good", Scopes: []string{"admin"}})
	}))
	defer api.Close()
	edge := httptest.NewServer(Handler(Config{APIURL: api.URL}))
	defer func() {
		edge.CloseClientConnections() // a handler still reading ends
		edge.Close()
	}()
	stalled := func(key string) (int, time.Duration) {
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("POST", edge.URL+"/v1/sandboxes/sb1/openai/tool-calls", pr)
		req.Header.Set("Authorization", "Bearer "+key)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
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
		if st, took := stalled("good"); st != http.StatusRequestTimeout || took > 5*time.Second {
			t.Errorf("a stalled body: %d after %v, want 408 after %v", st, took, bodyTimeout)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a request with a stalled body is still held")
	}
}
