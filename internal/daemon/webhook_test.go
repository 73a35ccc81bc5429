package daemon

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// TestApprovalWebhook checks that a new approval is POSTed to the
// webhook with its id, tenant, sandbox, tool and expiry and never its
// arguments, that Notify does not wait for the endpoint, and that a
// failing endpoint is only logged.
func TestApprovalWebhook(t *testing.T) {
	got := make(chan map[string]any, 2)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "4111") {
			t.Errorf("the webhook got the arguments: %s", b)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		got <- m
		<-release
		if m["tool"] == "fails" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	var logs strings.Builder
	hook := newApprovalWebhook(srv.URL, slog.New(slog.NewTextHandler(&logs, nil)))
	exp := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	t0 := time.Now()
	hook.Notify(gateway.Approval{ID: "ap-x", Tenant: "t1", Sandbox: "sb-1", Tool: "refund", Args: json.RawMessage(`{"card":"4111"}`), ExpiresAt: exp})
	hook.Notify(gateway.Approval{ID: "ap-y", Tool: "fails"})
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Notify waited %v for the endpoint", d)
	}
	seen := map[string]map[string]any{}
	for range 2 {
		m := <-got
		seen[m["id"].(string)] = m
	}
	close(release)
	hook.Close()
	if m := seen["ap-x"]; m["tenant"] != "t1" || m["sandbox"] != "sb-1" || m["tool"] != "refund" || m["expires_at"] != "2026-11-26T12:00:00Z" || m["args"] != nil {
		t.Errorf("webhook body %v", m)
	}
	if !strings.Contains(logs.String(), "500") {
		t.Errorf("a failing endpoint was not logged: %q", logs.String())
	}
	for u, ok := range map[string]bool{"https://hooks.example/x": true, "http://127.0.0.1:9/": true, "ftp://x/": false, "/rel": false, "https://u:p@h/": false} {
		if validWebhookURL(u) != ok {
			t.Errorf("validWebhookURL(%q) = %v", u, !ok)
		}
	}
}
