package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
)

// TestEndedSandbox checks that an ended sandbox decodes with its end
// reason and time, and that an operation on it is ErrConflict.
func TestEndedSandbox(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/prefix/v1/sandboxes/sb-x":
			io.WriteString(w, `{"id":"sb-x","state":"failed","template":"host","limits":{},"metadata":{},`+
				`"created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-02T03:09:05Z","max_expires_at":"2026-01-03T03:04:05Z",`+
				`"last_activity_at":"2026-01-02T03:04:05Z","stopped_at":"2026-01-02T03:04:07Z","end_reason":"agent_died",`+
				`"error":"the sandbox's agent (its PID 1) exited"}`)
		default:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"failed_precondition","message":"sandbox sb-x has ended: its agent exited"}}`)
		}
	})
	ctx := context.Background()
	sb, err := c.GetSandbox(ctx, "sb-x")
	if err != nil || sb.State != StateFailed || sb.EndReason != EndAgentDied || sb.StoppedAt.IsZero() || sb.Error == "" {
		t.Fatalf("GetSandbox = %+v, %v", sb, err)
	}
	if _, err := c.Exec(ctx, "sb-x", ExecRequest{Command: "true"}); !errors.Is(err, ErrConflict) {
		t.Errorf("Exec on an ended sandbox = %v, want ErrConflict", err)
	}
}
