package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// Limits are a sandbox's resource caps. Zero fields take the template's
// limits, then the server's defaults.
type Limits = api.Limits

// Network is a sandbox's network policy. Mode "none" (the default) gives
// the sandbox loopback only.
type Network = api.Network

// CreateSandboxRequest describes a sandbox to create. Zero values mean
// the server's defaults.
type CreateSandboxRequest struct {
	// Template names the root filesystem ("host" by default).
	Template string
	// Timeout is how long the sandbox lives; rounded up to whole
	// seconds.
	Timeout time.Duration
	// IdleTimeout destroys the sandbox after this long without activity;
	// rounded up to whole seconds.
	IdleTimeout time.Duration
	Limits      *Limits
	Network     *Network
	// Env is added to every command's environment.
	Env map[string]string
	// Metadata are labels returned with the sandbox and usable as list
	// filters.
	Metadata map[string]string
	// Tools and Toolsets name the caller's tools, and toolsets of them,
	// granted to the sandbox: its code calls them through the tool
	// gateway at $AIRLOCK_TOOLS_URL. An unknown name is ErrNotFound.
	Tools    []string
	Toolsets []string
	// CommandPolicy, if set, judges every command Exec runs in the
	// sandbox: a denied one is ErrForbidden, one it asks about
	// waits for an approval (see api.CommandPolicy).
	CommandPolicy *CommandPolicy
}

// CommandPolicy is a sandbox's allow/ask/deny policy over the commands
// exec runs; CommandRule one of its rules. It is a guard-rail for
// agents, not a boundary: the sandbox is.
type (
	CommandPolicy = api.CommandPolicy
	CommandRule   = api.CommandRule
)

// State is where a sandbox is in its lifecycle.
type State = api.State

// The sandbox states.
const (
	StateCreating = api.StateCreating
	// StateAdopting: a restarted daemon is adopting the sandbox; its
	// operations wait for the adoption (up to 10 s), then run or fail
	// with 503 (retry).
	StateAdopting = api.StateAdopting
	StateRunning  = api.StateRunning
	StatePaused   = api.StatePaused
	StateStopping = api.StateStopping
	// StateStopped and StateFailed with a non-zero StoppedAt: the
	// sandbox has ended (EndReason says why). The server keeps ended
	// sandboxes visible for a while (its ended_retention), then answers
	// ErrNotFound.
	StateStopped = api.StateStopped
	StateFailed  = api.StateFailed
)

// The reasons a sandbox ended (Sandbox.EndReason).
const (
	EndDeleted            = api.EndDeleted            // DeleteSandbox
	EndExpired            = api.EndExpired            // its timeout passed
	EndIdle               = api.EndIdle               // its idle timeout passed
	EndAgentDied          = api.EndAgentDied          // its agent (PID 1) exited, and every process with it
	EndAgentUnhealthy     = api.EndAgentUnhealthy     // its agent stopped answering health probes; the server ended it
	EndAgentGone          = api.EndAgentGone          // its agent was gone when the server restarted
	EndCreateInterrupted  = api.EndCreateInterrupted  // the server restarted before its create was answered
	EndDestroyInterrupted = api.EndDestroyInterrupted // the server restarted during its delete, then finished it
)

// Sandbox describes a sandbox.
type Sandbox struct {
	ID       string
	State    State
	Template string
	Limits   Limits
	Metadata map[string]string
	// Tools are the names of the tools granted to the sandbox, sorted.
	Tools []string
	// CommandPolicy is its command policy; nil when it has none.
	CommandPolicy *CommandPolicy
	// CreatedAt, ExpiresAt and MaxExpiresAt (the latest expiry SetTimeout
	// can reach) are server times.
	CreatedAt      time.Time
	ExpiresAt      time.Time
	MaxExpiresAt   time.Time
	IdleTimeout    time.Duration
	LastActivityAt time.Time
	// StoppedAt is when the sandbox ended (stopped, or failed with its
	// agent dead: its resources are released); zero while it lives.
	StoppedAt time.Time
	// EndReason says why the sandbox ended or is ending (one of the End*
	// constants); empty while it lives. Operations that need a live
	// sandbox fail on an ended one with ErrConflict: do not retry them.
	EndReason string
	// Error says why a failed sandbox failed.
	Error string
	// Health is what the server's probes of its agent found; nil before
	// the first probe.
	Health *Health
}

// Health is what the server's health probes found of a sandbox's agent:
// unhealthy from its first missed probe, healthy again at the next
// answered one; after the server's limit of probes missed in a row the
// sandbox is ended (EndAgentUnhealthy).
type Health = api.Health

// The health statuses (Health.Status).
const (
	HealthHealthy   = api.HealthHealthy
	HealthUnhealthy = api.HealthUnhealthy
)

// ListOptions filter ListSandboxes. Empty fields match everything.
type ListOptions struct {
	// States keeps sandboxes in any of these states.
	States []State
	// Metadata keeps sandboxes whose metadata holds every pair.
	Metadata map[string]string
}

// sandboxFrom is the Sandbox that the wire form b describes.
func sandboxFrom(b *api.Sandbox) *Sandbox {
	sb := &Sandbox{
		ID:             b.ID,
		State:          b.State,
		Template:       b.Template,
		Limits:         b.Limits,
		Metadata:       b.Metadata,
		Tools:          b.Tools,
		CreatedAt:      b.CreatedAt,
		ExpiresAt:      b.ExpiresAt,
		MaxExpiresAt:   b.MaxExpiresAt,
		IdleTimeout:    time.Duration(b.IdleTimeoutS) * time.Second,
		LastActivityAt: b.LastActivityAt,
		EndReason:      b.EndReason,
		Error:          b.Error,
		Health:         b.Health,
	}
	sb.CommandPolicy = b.CommandPolicy
	if b.StoppedAt != nil {
		sb.StoppedAt = *b.StoppedAt
	}
	return sb
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// checkID rejects IDs that cannot name a sandbox before a request is sent.
func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return fmt.Errorf("airlock: sandbox id %q is not valid: %w", id, ErrInvalid)
	}
	return nil
}

// CreateSandbox creates a sandbox and returns it once it runs.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*Sandbox, error) {
	in := api.CreateSandboxRequest{
		Template:     req.Template,
		TimeoutS:     seconds(req.Timeout),
		IdleTimeoutS: seconds(req.IdleTimeout),
		Limits:       req.Limits,
		Network:      req.Network,
		Env:          req.Env,
		Metadata:     req.Metadata,
		Tools:        req.Tools,
		Toolsets:     req.Toolsets,
	}
	in.CommandPolicy = req.CommandPolicy
	var out api.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, in, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return sandboxFrom(&out), nil
}

// ListSandboxes returns the caller's sandboxes that opts selects, oldest
// first. Stopped sandboxes stay listed for a short while.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]Sandbox, error) {
	q := url.Values{}
	for _, s := range opts.States {
		q.Add("state", string(s))
	}
	for k, v := range opts.Metadata {
		q.Set("metadata."+k, v)
	}
	var out api.SandboxList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	sbs := make([]Sandbox, 0, len(out.Sandboxes))
	for i := range out.Sandboxes {
		sbs = append(sbs, *sandboxFrom(&out.Sandboxes[i]))
	}
	return sbs, nil
}

// GetSandbox returns sandbox id.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.Sandbox
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, ""), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return sandboxFrom(&out), nil
}

// DeleteSandbox destroys sandbox id. Deleting a stopped sandbox succeeds.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodDelete, sandboxPath(id, ""), nil, nil, nil, http.StatusNoContent)
}

// SetTimeout makes sandbox id expire d (rounded up to whole seconds) from
// now, and returns the updated sandbox.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	in := api.TimeoutRequest{TimeoutS: seconds(d)}
	var out api.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/timeout"), nil, in, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return sandboxFrom(&out), nil
}
