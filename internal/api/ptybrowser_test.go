package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// browserPage opens the PTY WebSocket at the URL it is given, types a
// line, and reports the terminal's output and exit code to /result; then
// tries the same URL again, which must not open.
const browserPage = `<!doctype html><meta charset="utf-8"><title>pty</title><script>
const url = %q;
function report(o) { fetch("/result", {method: "POST", body: JSON.stringify(o)}); }
const ws = new WebSocket(url);
ws.binaryType = "arraybuffer";
let out = "", exit = null;
ws.onopen = () => ws.send(new TextEncoder().encode("browser\r"));
ws.onmessage = (ev) => {
  if (typeof ev.data === "string") { const f = JSON.parse(ev.data); if (f.type === "exit") exit = f.exit_code; return; }
  out += new TextDecoder().decode(ev.data);
};
ws.onclose = (ev) => {
  const again = new WebSocket(url);
  let opened = false;
  again.onopen = () => { opened = true; again.close(); };
  again.onclose = () => report({out, exit, code: ev.code, reason: ev.reason, again: opened});
};
</script>`

// browserResult is what the page reports.
type browserResult struct {
	Out    string `json:"out"`
	Exit   *int   `json:"exit"`
	Code   int    `json:"code"`
	Reason string `json:"reason"`
	Again  bool   `json:"again"`
}

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium binary (chromium, chromium-browser or google-chrome on PATH; on Debian: apt-get install chromium): skipping the browser test of PTY tokens")
	return ""
}

// TestPTYTokenInBrowser: headless Chromium, on a page of another origin,
// opens a sandbox's terminal with `new WebSocket(url)` (no way to send a
// header) using a PTY token, types into it, sees its output and exit, and
// cannot open the same URL a second time.
func TestPTYTokenInBrowser(t *testing.T) {
	bin := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	tok, err := a.PTYToken(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	wsURL := "ws" + strings.TrimPrefix(e.srv.URL, "http") + tok.URL + "&cmd=" + "read+line%3B+echo+got-%24line%3B+exit+5"

	results := make(chan browserResult, 1)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, browserPage, wsURL)
		case "/result":
			var res browserResult
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err := json.Unmarshal(b, &res); err != nil {
				t.Errorf("page result %q: %v", b, err)
			}
			select {
			case results <- res:
			default:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer page.Close()

	profile := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--user-data-dir="+profile, page.URL+"/")
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	defer func() {
		// The browser first, which ends and reaps its own processes;
		// then whatever of its group is left.
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
	}()

	select {
	case res := <-results:
		t.Logf("the browser's session took %v from the browser's start", time.Since(t0).Round(time.Millisecond))
		if !strings.Contains(res.Out, "got-browser") || res.Exit == nil || *res.Exit != 5 || res.Code != 1000 || res.Reason != "exit_code=5" {
			t.Errorf("the browser's session: %+v", res)
		}
		if res.Again {
			t.Error("the browser opened the PTY a second time with the same token")
		}
	case <-ctx.Done():
		t.Fatalf("no result from the browser within the test's time; its stderr:\n%s", stderr.String())
	}
}
