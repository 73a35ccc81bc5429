package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// Limits of the approval webhook.
const (
	webhookTimeout  = 5 * time.Second
	webhookInFlight = 16
)

// approvalWebhook tells an operator's endpoint of each new approval: a
// POST of {"id","tenant","sandbox","tool","expires_at"} (never the
// arguments, which may be sensitive; the approver reads them through
// the API), best effort, in the background, at most webhookInFlight at
// once (more are dropped and logged), each within webhookTimeout.
type approvalWebhook struct {
	url    string
	client *http.Client
	logger *slog.Logger
	slots  chan struct{}
	wg     sync.WaitGroup
}

func newApprovalWebhook(u string, logger *slog.Logger) *approvalWebhook {
	return &approvalWebhook{url: u, logger: logger, slots: make(chan struct{}, webhookInFlight),
		client: &http.Client{Timeout: webhookTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Notify implements gateway.ApprovalsConfig.Notify: it returns at once.
func (w *approvalWebhook) Notify(a gateway.Approval) {
	select {
	case w.slots <- struct{}{}:
	default:
		w.logger.Warn("approval webhook: too many in flight; not sent", "approval", a.ID)
		return
	}
	body, _ := json.Marshal(map[string]any{"id": a.ID, "tenant": a.Tenant, "sandbox": a.Sandbox, "tool": a.Tool, "expires_at": a.ExpiresAt.UTC()})
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.slots }()
		if err := w.post(body); err != nil {
			w.logger.Warn("approval webhook", "approval", a.ID, "err", err)
		}
	}()
}

func (w *approvalWebhook) post(body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// Close waits for the posts in flight (each bounded by webhookTimeout).
func (w *approvalWebhook) Close() { w.wg.Wait() }

// validWebhookURL reports whether s is an absolute http or https URL.
func validWebhookURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil
}
