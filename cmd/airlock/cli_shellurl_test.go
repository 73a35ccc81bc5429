package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestCLIShellURL: shell --ws-url prints a WebSocket URL that opens the
// session once without the API key (as a browser would), and no second
// time.
func TestCLIShellURL(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	r := e.ok("", "shell", "--ws-url", id, "--", "sh", "-c", "echo url-$((6*7))")
	u := strings.TrimSpace(r.stdout)
	prefix := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/sandboxes/" + id + "/pty?"
	if !strings.HasPrefix(u, prefix) || !strings.Contains(u, "token=alt_") || !strings.Contains(u, "cmd=") {
		t.Fatalf("shell --ws-url printed %q, want %s...token=alt_...", r.stdout, prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: e.srv.Client()})
	if err != nil {
		t.Fatalf("open the printed URL: %v", err)
	}
	defer conn.CloseNow()
	var out strings.Builder
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (output %q)", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(b)
			continue
		}
		var f struct {
			Type     string `json:"type"`
			ExitCode int    `json:"exit_code"`
		}
		if json.Unmarshal(b, &f) == nil && f.Type == "exit" {
			if f.ExitCode != 0 || !strings.Contains(out.String(), "url-42") {
				t.Errorf("session: exit %d, output %q", f.ExitCode, out.String())
			}
			break
		}
	}
	if _, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: e.srv.Client()}); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the URL's second use: %v, want 401", err)
	}
	if r := e.run("", "shell", "--ws-url", "sb-aaaaaaaaaaaaaaaa"); r.code != exitCannotRun || r.err == nil || !strings.Contains(r.err.Error(), "not found") {
		t.Errorf("shell --ws-url for a missing sandbox: %+v", r)
	}
}
