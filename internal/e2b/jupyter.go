package e2b

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// keepaliveEvery is how often a running cell's stream gets a keepalive
// line, as E2B's server sends.
const keepaliveEvery = 5 * time.Second

// serveJupyter serves the code interpreter's surface (port 49999):
// /execute and /contexts, onto Airlock's code contexts.
func (h *Handler) serveJupyter(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	p := r.URL.Path
	switch {
	case p == "/health" && r.Method == http.MethodGet:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("OK"))
	case p == "/execute" && r.Method == http.MethodPost:
		h.execute(w, r, c, id)
	case p == "/contexts" && r.Method == http.MethodPost:
		h.createContext(w, r, c, id)
	case p == "/contexts" && r.Method == http.MethodGet:
		h.listContexts(w, r, c, id)
	case strings.HasPrefix(p, "/contexts/"):
		rest := strings.TrimPrefix(p, "/contexts/")
		cid, action, _ := strings.Cut(rest, "/")
		switch {
		case action == "" && r.Method == http.MethodDelete:
			if err := c.DeleteCodeContext(r.Context(), id, cid); err != nil {
				envdFail(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case action == "restart" && r.Method == http.MethodPost:
			if _, err := c.RestartCodeContext(r.Context(), id, cid); err != nil {
				envdFail(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			envdError(w, http.StatusNotFound, "not found")
		}
	default:
		envdError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not served", r.Method, clip(p)))
	}
}

// language maps E2B's language names onto Airlock's.
func language(l string) (string, error) {
	switch strings.ToLower(l) {
	case "", "python", "python3":
		return client.LangPython, nil
	case "js", "javascript", "node":
		return client.LangJavaScript, nil
	case "bash", "sh":
		return client.LangBash, nil
	}
	return "", invalid(fmt.Sprintf("language %q is not supported here: python, javascript or bash", clip(l)))
}

// contextJSON is E2B's Context.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decode(r, &req); err != nil {
		envdFail(w, err)
		return
	}
	lang, err := language(req.Language)
	if err != nil {
		envdFail(w, err)
		return
	}
	cc, err := c.CreateCodeContext(r.Context(), id, client.CreateCodeContextRequest{Language: lang, Cwd: req.Cwd})
	if err != nil {
		envdFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contextJSON{ID: cc.ID, Language: cc.Language, Cwd: cc.Cwd})
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	ccs, err := c.ListCodeContexts(r.Context(), id)
	if err != nil {
		envdFail(w, err)
		return
	}
	out := make([]contextJSON, 0, len(ccs))
	for _, cc := range ccs {
		out = append(out, contextJSON{ID: cc.ID, Language: cc.Language, Cwd: cc.Cwd})
	}
	writeJSON(w, http.StatusOK, out)
}

// executeRequest is the body of POST /execute.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// execute serves POST /execute: a cell, its events streamed as E2B's
// NDJSON lines (stdout, stderr, result, error, number_of_executions,
// keepalive, end_of_execution).
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var req executeRequest
	if err := decode(r, &req); err != nil {
		envdFail(w, err)
		return
	}
	if req.ContextID != "" && req.Language != "" {
		envdError(w, http.StatusBadRequest, "give either context_id or language, not both")
		return
	}
	creq := client.RunCodeRequest{Code: req.Code, ContextID: req.ContextID, Env: req.EnvVars}
	if req.ContextID == "" {
		lang, err := language(req.Language)
		if err != nil {
			envdFail(w, err)
			return
		}
		creq.Language = lang
	}
	var mu sync.Mutex
	started := false
	rc := http.NewResponseController(w)
	line := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return rc.Flush()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(keepaliveEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				mu.Lock()
				s := started
				mu.Unlock()
				if s {
					_ = line(map[string]string{"type": "keepalive"})
				}
			}
		}
	})
	x, err := c.RunCodeStream(r.Context(), id, creq, func(ev client.CodeEvent) error {
		switch ev.Type {
		case "stdout", "stderr":
			return line(map[string]any{"type": ev.Type, "text": ev.Data, "timestamp": time.Now().UnixMicro()})
		case "result":
			if ev.Result != nil {
				return line(resultLine(ev.Result))
			}
		case "error":
			if ev.Error != nil {
				return line(errorLine(ev.Error))
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	mu.Lock()
	s := started
	mu.Unlock()
	if err != nil {
		if !s {
			envdFail(w, err)
			return
		}
		status, msg := statusOf(err)
		_ = line(map[string]any{"type": "error", "name": "SandboxError", "value": fmt.Sprintf("%d: %s", status, msg), "traceback": ""})
		return
	}
	_ = line(map[string]any{"type": "number_of_executions", "execution_count": x.ExecutionCount})
	_ = line(map[string]string{"type": "end_of_execution"})
}

// resultLine is E2B's result line of r: its representations by E2B's
// field names, images in base64.
func resultLine(r *client.CodeResult) map[string]any {
	m := map[string]any{"type": "result", "is_main_result": r.IsMainResult}
	for k, v := range map[string]string{"text": r.Text, "html": r.HTML, "markdown": r.Markdown, "svg": r.SVG, "latex": r.LaTeX, "javascript": r.JavaScript} {
		if v != "" {
			m[k] = v
		}
	}
	if len(r.PNG) > 0 {
		m["png"] = base64.StdEncoding.EncodeToString(r.PNG)
	}
	if len(r.JPEG) > 0 {
		m["jpeg"] = base64.StdEncoding.EncodeToString(r.JPEG)
	}
	if len(r.JSON) > 0 {
		m["json"] = r.JSON
	}
	return m
}

// errorLine is E2B's error line of e.
func errorLine(e *client.CodeError) map[string]any {
	return map[string]any{"type": "error", "name": e.Name, "value": e.Value, "traceback": e.Traceback}
}
