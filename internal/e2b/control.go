package e2b

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"

	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// newSandbox is E2B's NewSandbox: the body of POST /sandboxes. Fields
// this layer cannot honour are refused by name rather than ignored.
type newSandbox struct {
	TemplateID          string                  `json:"templateID"`
	Timeout             *int64                  `json:"timeout"`
	AutoPause           bool                    `json:"autoPause"`
	AutoPauseMemory     *bool                   `json:"autoPauseMemory"`
	AutoResume          *struct{ Enabled bool } `json:"autoResume"`
	Secure              *bool                   `json:"secure"`
	AllowInternetAccess *bool                   `json:"allow_internet_access"`
	Network             *sandboxNetwork         `json:"network"`
	Metadata            map[string]string       `json:"metadata"`
	EnvVars             map[string]string       `json:"envVars"`
	MCP                 json.RawMessage         `json:"mcp"`
	IAM                 json.RawMessage         `json:"iam"`
	VolumeMounts        json.RawMessage         `json:"volumeMounts"`
}

// sandboxNetwork is E2B's network configuration of a create.
type sandboxNetwork struct {
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	MaskRequestHost    string          `json:"maskRequestHost,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
}

// sandboxJSON is E2B's Sandbox: the answer of create and connect.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is E2B's ListedSandbox; detailJSON adds SandboxDetail's
// fields.
type listedSandbox struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

type detailJSON struct {
	listedSandbox
	EnvdAccessToken     string  `json:"envdAccessToken,omitempty"`
	AllowInternetAccess bool    `json:"allowInternetAccess"`
	Domain              *string `json:"domain"`
	Lifecycle           struct {
		AutoResume bool   `json:"autoResume"`
		OnTimeout  string `json:"onTimeout"`
	} `json:"lifecycle"`
}

// e2bTemplates are E2B's default template names, which map to the
// daemon's default template.
var e2bTemplates = map[string]bool{"": true, "base": true, "code-interpreter-v1": true, "code-interpreter": true, "desktop": true}

// control wraps a control-plane handler: the caller's client, a bound
// on the call, and errors in E2B's shape.
func (h *Handler) control(fn func(w http.ResponseWriter, r *http.Request, c *client.Client) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := h.client(r)
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
			defer cancel()
			err = fn(w, r.WithContext(ctx), c)
		}
		if err != nil {
			status, msg := statusOf(err)
			writeError(w, status, msg)
		}
	}
}

// invalid is a 400 with msg.
type invalid string

func (e invalid) Error() string { return string(e) }
func (e invalid) Unwrap() error { return client.ErrInvalid }

// decode reads a JSON body of at most maxJSONBody into v; an empty body
// leaves v as it is.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
	if err != nil {
		return invalid("the request body could not be read")
	}
	if len(b) > maxJSONBody {
		return invalid(fmt.Sprintf("the request body is over %d bytes", maxJSONBody))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return invalid("the request body is not valid JSON for this call: " + clip(err.Error()))
	}
	return nil
}

// createSandbox serves POST /sandboxes.
func (h *Handler) createSandbox(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var req newSandbox
	if err := decode(r, &req); err != nil {
		return err
	}
	creq, err := h.createRequest(&req)
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(r.Context(), creq)
	if err != nil {
		return err
	}
	key, _ := airlockKey(r)
	return writeJSONOK(w, http.StatusCreated, h.sandboxJSON(sb, req.TemplateID, key))
}

// createRequest translates an E2B create onto Airlock's.
func (h *Handler) createRequest(req *newSandbox) (client.CreateSandboxRequest, error) {
	var out client.CreateSandboxRequest
	switch {
	case req.AutoPause:
		return out, invalid("autoPause is not supported: this server does not pause sandboxes yet, and a sandbox is killed at its timeout")
	case req.AutoResume != nil && req.AutoResume.Enabled:
		return out, invalid("autoResume is not supported: this server does not pause sandboxes yet")
	case len(req.VolumeMounts) > 0 && string(req.VolumeMounts) != "null" && string(req.VolumeMounts) != "[]":
		return out, invalid("volumeMounts are not supported by this server")
	case len(req.MCP) > 0 && string(req.MCP) != "null" && string(req.MCP) != "{}":
		return out, invalid("mcp is not supported by this server; use Airlock's tool gateway")
	case len(req.IAM) > 0 && string(req.IAM) != "null" && string(req.IAM) != "{}":
		return out, invalid("iam is not supported by this server; use Airlock's network credentials and tool gateway for credentials")
	}
	if !e2bTemplates[req.TemplateID] {
		out.Template = req.TemplateID
	} else {
		out.Template = h.cfg.DefaultTemplate
	}
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			return out, invalid("Timeout must be greater than 0")
		}
		out.Timeout = time.Duration(*req.Timeout) * time.Second
	}
	out.Env, out.Metadata = req.EnvVars, req.Metadata
	n, err := h.network(req)
	if err != nil {
		return out, err
	}
	out.Network = n
	return out, nil
}

// network maps E2B's network options onto Airlock's network policy:
// allowOut is an allowlist; otherwise allow_internet_access (the SDKs'
// default) is mode open where the daemon has it, else none.
func (h *Handler) network(req *newSandbox) (*client.Network, error) {
	n := req.Network
	if n != nil {
		switch {
		case len(n.DenyOut) > 0:
			return nil, invalid("network.denyOut is not supported: this server's allowlist denies everything not in allowOut")
		case len(n.EgressProxy) > 0 && string(n.EgressProxy) != "null":
			return nil, invalid("network.egressProxy is not supported by this server")
		case len(n.Rules) > 0 && string(n.Rules) != "null" && string(n.Rules) != "{}":
			return nil, invalid("network.rules are not supported: use Airlock's network credentials to add headers at the edge")
		case n.MaskRequestHost != "":
			return nil, invalid("network.maskRequestHost is not supported by this server")
		}
		if len(n.AllowOut) > 0 {
			return &client.Network{Mode: "allowlist", Allow: n.AllowOut}, nil
		}
	}
	if req.AllowInternetAccess == nil || *req.AllowInternetAccess {
		if h.cfg.OpenNetwork {
			return &client.Network{Mode: "open"}, nil
		}
		// Without an open network the sandbox gets the template's
		// default (none unless it says otherwise), and its detail says
		// allowInternetAccess false.
		return nil, nil
	}
	return &client.Network{Mode: "none"}, nil
}

func writeJSONOK(w http.ResponseWriter, status int, v any) error {
	writeJSON(w, status, v)
	return nil
}

// sandboxJSON is the E2B Sandbox of sb; the envd access token is the
// caller's key in E2B's form, which sandbox traffic then carries.
func (h *Handler) sandboxJSON(sb *client.Sandbox, templateID, key string) sandboxJSON {
	if templateID == "" {
		templateID = sb.Template
	}
	tok := Key(key)
	out := sandboxJSON{TemplateID: templateID, SandboxID: ToE2BID(sb.ID), ClientID: "airlock", EnvdVersion: EnvdVersion, EnvdAccessToken: tok, TrafficAccessToken: &tok}
	if h.cfg.Domain != "" {
		d := h.cfg.Domain
		out.Domain = &d
	}
	return out
}

// listed is the E2B ListedSandbox of sb.
func listed(sb *client.Sandbox) listedSandbox {
	cpus := int(sb.Limits.CPUs + 0.999)
	return listedSandbox{
		TemplateID: sb.Template, SandboxID: ToE2BID(sb.ID), ClientID: "airlock",
		StartedAt: sb.CreatedAt.UTC(), EndAt: sb.ExpiresAt.UTC(), CPUCount: max(cpus, 1),
		MemoryMB: max(sb.Limits.MemoryMB, 128), DiskSizeMB: sb.Limits.DiskMB, State: "running",
		EnvdVersion: EnvdVersion, Metadata: sb.Metadata,
	}
}

// live returns sandbox id if it is live; an ended one is not found, as
// E2B has it.
func live(ctx context.Context, c *client.Client, id string) (*client.Sandbox, error) {
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if !sb.StoppedAt.IsZero() || sb.State == client.StateStopping || sb.State == client.StateStopped || sb.State == client.StateFailed {
		return nil, fmt.Errorf("sandbox %s is not running: %w", ToE2BID(id), client.ErrNotFound)
	}
	return sb, nil
}

// gone maps the API's answer for a sandbox that has ended (409: it is
// kept visible for a while) to E2B's: it does not exist.
func gone(err error) error {
	if errors.Is(err, client.ErrConflict) {
		return fmt.Errorf("%s: %w", err.Error(), client.ErrNotFound)
	}
	return err
}

// pathID is the Airlock ID of the request's {id}; a malformed one is
// not found, as an unknown one is.
func pathID(r *http.Request) (string, error) {
	id, err := FromE2BID(r.PathValue("id"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", err.Error(), client.ErrNotFound)
	}
	return id, nil
}

// getSandbox serves GET /sandboxes/{id}.
func (h *Handler) getSandbox(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	sb, err := live(r.Context(), c, id)
	if err != nil {
		return err
	}
	key, _ := airlockKey(r)
	d := detailJSON{listedSandbox: listed(sb), EnvdAccessToken: Key(key)}
	full, err := c.Network(r.Context(), id)
	if err == nil {
		d.AllowInternetAccess = full.Mode == "open"
	}
	if h.cfg.Domain != "" {
		dom := h.cfg.Domain
		d.Domain = &dom
	}
	d.Lifecycle.OnTimeout = "kill"
	return writeJSONOK(w, http.StatusOK, d)
}

// maxListLimit is E2B's cap on a page of sandboxes.
const maxListLimit = 100

// listSandboxes serves GET /v2/sandboxes?metadata=&state=&limit=&nextToken=:
// the caller's live sandboxes, the oldest first, a page at a time; the
// X-Next-Token header carries the cursor of the next page.
func (h *Handler) listSandboxes(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	q := r.URL.Query()
	opts := client.ListOptions{States: []client.State{client.StateRunning}}
	if md := q.Get("metadata"); md != "" {
		m, err := metadataFilter(md)
		if err != nil {
			return err
		}
		opts.Metadata = m
	}
	wantRunning := true
	if s := q.Get("state"); s != "" {
		wantRunning = false
		for _, st := range strings.Split(s, ",") {
			switch st {
			case "running":
				wantRunning = true
			case "paused":
			default:
				return invalid(fmt.Sprintf("state %q is not running or paused", clip(st)))
			}
		}
	}
	var after time.Time
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return invalid("startedAfter must be an RFC 3339 time")
		}
		after = t
	}
	desc := false
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return invalid("order must be asc or desc")
	}
	template := q.Get("template")
	limit := maxListLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			return invalid(fmt.Sprintf("limit must be between 1 and %d", maxListLimit))
		}
		limit = n
	}
	from := ""
	if tok := q.Get("nextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return invalid("nextToken is not a token this server gave")
		}
		from = string(b)
	}
	out := []listedSandbox{}
	if wantRunning {
		sbs, err := c.ListSandboxes(r.Context(), opts)
		if err != nil {
			return err
		}
		sbs = slices.DeleteFunc(sbs, func(sb client.Sandbox) bool {
			return !after.IsZero() && !sb.CreatedAt.After(after) || template != "" && sb.Template != template && !(e2bTemplates[template] && sb.Template == h.cfg.DefaultTemplate)
		})
		slices.SortFunc(sbs, func(a, b client.Sandbox) int {
			c := cmp.Compare(cursor(&a), cursor(&b))
			if desc {
				c = -c
			}
			return c
		})
		start := 0
		if from != "" {
			start = len(sbs)
			for i, sb := range sbs {
				if c := cursor(&sb); !desc && c > from || desc && c < from {
					start = i
					break
				}
			}
		}
		for i := start; i < len(sbs) && len(out) < limit; i++ {
			out = append(out, listed(&sbs[i]))
			if len(out) == limit && i+1 < len(sbs) {
				w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(cursor(&sbs[i]))))
			}
		}
		w.Header().Set("X-Total-Running", strconv.Itoa(len(sbs)))
	}
	return writeJSONOK(w, http.StatusOK, out)
}

// metadataFilter parses E2B's metadata filter as E2B's API does: the
// parameter's value (already decoded once) is unescaped again, split
// into key=value pairs on & and =, and each key and value unescaped
// once more (the SDKs encode each pair, then the whole).
func metadataFilter(v string) (map[string]string, error) {
	bad := invalid("metadata must be key=value pairs joined by &, URL-encoded")
	whole, err := url.QueryUnescape(v)
	if err != nil {
		return nil, bad
	}
	out := map[string]string{}
	for _, pair := range strings.Split(whole, "&") {
		if pair == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, bad
		}
		if k, err = url.QueryUnescape(k); err != nil {
			return nil, bad
		}
		if val, err = url.QueryUnescape(val); err != nil {
			return nil, bad
		}
		out[k] = val
	}
	return out, nil
}

// cursor orders sandboxes as a list does: by creation, then ID.
func cursor(sb *client.Sandbox) string {
	return sb.CreatedAt.UTC().Format("20060102150405.000000000") + "/" + sb.ID
}

// listSandboxesV1 serves the deprecated GET /sandboxes: every live
// sandbox, unpaged.
func (h *Handler) listSandboxesV1(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	sbs, err := c.ListSandboxes(r.Context(), client.ListOptions{States: []client.State{client.StateRunning}})
	if err != nil {
		return err
	}
	out := make([]listedSandbox, 0, len(sbs))
	for i := range sbs {
		out = append(out, listed(&sbs[i]))
	}
	return writeJSONOK(w, http.StatusOK, out)
}

// killSandbox serves DELETE /sandboxes/{id}: 204, or 404 when there is
// no such live sandbox (the SDKs' kill() then returns false).
func (h *Handler) killSandbox(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if _, err := live(r.Context(), c, id); err != nil {
		return err
	}
	if err := c.DeleteSandbox(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// timeoutRequest is the body of /timeout and /connect.
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

func (t *timeoutRequest) duration() (time.Duration, error) {
	if t.Timeout == nil {
		return 0, invalid("timeout is required")
	}
	if *t.Timeout <= 0 {
		return 0, invalid("Timeout must be greater than 0")
	}
	return time.Duration(*t.Timeout) * time.Second, nil
}

// setTimeout serves POST /sandboxes/{id}/timeout: the sandbox ends
// timeout seconds from now (sooner or later than before).
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req timeoutRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	d, err := req.duration()
	if err != nil {
		return err
	}
	if _, err := c.SetTimeout(r.Context(), id, d); err != nil {
		return gone(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connectSandbox serves POST /sandboxes/{id}/connect (and the
// deprecated /resume): 200 with the sandbox when it runs, its timeout
// extended to at least timeout seconds from now, never shortened.
func (h *Handler) connectSandbox(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req timeoutRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	sb, err := live(r.Context(), c, id)
	if err != nil {
		return err
	}
	if req.Timeout != nil {
		d, err := req.duration()
		if err != nil {
			return err
		}
		if time.Until(sb.ExpiresAt) < d {
			if sb, err = c.SetTimeout(r.Context(), id, d); err != nil {
				return gone(err)
			}
		}
	}
	key, _ := airlockKey(r)
	return writeJSONOK(w, http.StatusOK, h.sandboxJSON(sb, "", key))
}

// notServed answers the control-plane routes of E2B's API this server
// does not serve (metrics, network updates, snapshots, fork, templates,
// volumes, ...): 501 in E2B's shape, never a bare 404, which the Python
// SDK would read as "sandbox not found".
func (h *Handler) notServed(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	return fmt.Errorf("%s %s is not supported by this server: %w", r.Method, clip(r.URL.Path), client.ErrNotSupported)
}

// pauseSandbox serves POST /sandboxes/{id}/pause, which this server
// cannot do yet: 501, and the sandbox keeps running as it was.
func (h *Handler) pauseSandbox(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if _, err := live(r.Context(), c, id); err != nil {
		return err
	}
	return fmt.Errorf("pause is not supported by this server yet: the sandbox keeps running, with its processes, files and timeout as they were: %w", client.ErrNotSupported)
}
