package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Caps on request fields against overflow and absurd values. A create
// checks its fields against the real caps first (see checkCreateLimits and
// createRequest.spec), so that its errors quote those.
const (
	// maxTimeoutS caps timeout_s fields (10 years) so that they convert
	// to a time.Duration without overflow.
	maxTimeoutS = 10 * 365 * 24 * 3600
	// maxMB caps memory_mb and disk_mb (1 PiB) against overflow.
	maxMB = 1 << 30
	// maxCPUs caps cpus against absurd values.
	maxCPUs = 1 << 16
	// maxPids caps pids as the runtime does.
	maxPids = 1 << 22
	// maxListStates caps the state filters of a list.
	maxListStates = 16
)

// limitsFrom validates rl, limits in their wire form (nil means none
// set), against the bounds a template build accepts and converts them;
// prefix names its fields in errors ("limits." in a JSON body, "" in a
// query). A create checks its limits against the real caps first
// (checkCreateLimits).
func limitsFrom(rl *wire.Limits, prefix string) (runtime.Limits, error) {
	if rl == nil {
		return runtime.Limits{}, nil
	}
	switch {
	case rl.CPUs < 0 || rl.CPUs > maxCPUs || math.IsNaN(rl.CPUs):
		return runtime.Limits{}, invalidf("%scpus must be between 0 and %d", prefix, maxCPUs)
	case rl.MemoryMB < 0 || rl.MemoryMB > maxMB:
		return runtime.Limits{}, invalidf("%smemory_mb must be between 0 and %d", prefix, maxMB)
	case rl.DiskMB < 0 || rl.DiskMB > maxMB:
		return runtime.Limits{}, invalidf("%sdisk_mb must be between 0 and %d", prefix, maxMB)
	case rl.Pids < 0 || rl.Pids > maxPids:
		return runtime.Limits{}, invalidf("%spids must be between 0 and %d", prefix, maxPids)
	}
	return runtime.Limits{CPUs: rl.CPUs, MemoryBytes: rl.MemoryMB << 20, Pids: rl.Pids, DiskBytes: rl.DiskMB << 20}, nil
}

// checkCreateLimits checks rl, the limits of a create request (nil means
// none set), against the bounds a sandbox really has, max (the manager's
// MaxLimits) and the sandbox package's minima, and says them in the
// request's own units and field names. Fields left 0 take defaults.
func checkCreateLimits(rl *wire.Limits, max runtime.Limits) error {
	if rl == nil {
		return nil
	}
	if f := negativeLimit(rl); f != "" {
		return invalidf("limits.%s must not be negative", f)
	}
	switch {
	case math.IsNaN(rl.CPUs):
		return invalidf("limits.cpus must be a number")
	case rl.CPUs != 0 && rl.CPUs < sandbox.MinCPUs:
		return invalidf("limits.cpus %g is below the minimum %g", rl.CPUs, sandbox.MinCPUs)
	case rl.CPUs > max.CPUs:
		return invalidf("limits.cpus %g is above the maximum %g", rl.CPUs, max.CPUs)
	}
	for _, b := range []struct {
		field     string
		v, lo, hi int64
		unit      string
	}{
		{"memory_mb", rl.MemoryMB, sandbox.MinMemoryBytes >> 20, max.MemoryBytes >> 20, " MiB"},
		{"disk_mb", rl.DiskMB, sandbox.MinDiskBytes >> 20, max.DiskBytes >> 20, " MiB"},
		{"pids", rl.Pids, sandbox.MinPids, max.Pids, ""},
	} {
		switch {
		case b.v == 0:
		case b.v < b.lo:
			return invalidf("limits.%s %d is below the minimum %d%s", b.field, b.v, b.lo, b.unit)
		case b.v > b.hi:
			return invalidf("limits.%s %d is above the maximum %d%s", b.field, b.v, b.hi, b.unit)
		}
	}
	return nil
}

// negativeLimit names the first negative field of rl, or is "".
func negativeLimit(rl *wire.Limits) string {
	switch {
	case rl.CPUs < 0:
		return "cpus"
	case rl.MemoryMB < 0:
		return "memory_mb"
	case rl.DiskMB < 0:
		return "disk_mb"
	case rl.Pids < 0:
		return "pids"
	}
	return ""
}

// limitsToJSON is the wire form of l.
func limitsToJSON(l runtime.Limits) wire.Limits {
	return wire.Limits{CPUs: l.CPUs, MemoryMB: l.MemoryBytes >> 20, Pids: l.Pids, DiskMB: l.DiskBytes >> 20}
}

// createRequest is the body of POST /v1/sandboxes (api.CreateSandboxRequest),
// with its validation.
type createRequest wire.CreateSandboxRequest

// toSandboxJSON is the wire form of sb. Env is not returned: it may hold
// secrets the creator passed in.
func toSandboxJSON(sb sandbox.Sandbox) wire.Sandbox {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	out := wire.Sandbox{
		ID:             sb.ID,
		State:          wire.State(sb.State),
		Template:       templateDisplayName(sb.Template),
		Limits:         limitsToJSON(sb.Limits),
		Metadata:       md,
		CreatedAt:      sb.CreatedAt.UTC(),
		Tools:          slices.Clone(sb.Tools),
		ExpiresAt:      sb.ExpiresAt.UTC(),
		MaxExpiresAt:   sb.MaxExpiresAt.UTC(),
		IdleTimeoutS:   int64(sb.IdleTimeout / time.Second),
		LastActivityAt: sb.LastActivity.UTC(),
		EndReason:      sb.EndReason,
		Error:          sb.Error,
	}
	out.CommandPolicy = commandPolicyJSON(sb.CmdPolicy)
	if h := sb.Health; h.Status != "" {
		out.Health = &wire.Health{Status: h.Status, Missed: h.Missed, CheckedAt: h.CheckedAt.UTC(), Since: h.Since.UTC(), Error: h.Error}
	}
	if !sb.StoppedAt.IsZero() {
		t := sb.StoppedAt.UTC()
		out.StoppedAt = &t
	}
	return out
}

// spec validates req and turns it into a sandbox.Spec for owner. The
// timeouts and limits are checked against cfg, the manager's effective
// configuration, so that errors quote the real caps in the request's
// units; the manager validates the rest (template, its limits with the
// request's, env and metadata syntax and size).
func (req *createRequest) spec(owner string, cfg sandbox.Config) (sandbox.Spec, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"timeout_s", req.TimeoutS}, {"idle_timeout_s", req.IdleTimeoutS}} {
		if err := checkLifetime(f.name, f.v, cfg.MaxLifetime); err != nil {
			return sandbox.Spec{}, err
		}
	}
	if err := checkCreateLimits(req.Limits, cfg.MaxLimits); err != nil {
		return sandbox.Spec{}, err
	}
	l, err := limitsFrom(req.Limits, "limits.")
	if err != nil {
		return sandbox.Spec{}, err
	}
	network, err := networkFrom(req.Network, "network.", cfg.Egress.EgressLimits(sandbox.NetworkLimits{}))
	if err != nil {
		return sandbox.Spec{}, err
	}
	if err := sandbox.ValidateNetwork(network); err != nil {
		return sandbox.Spec{}, err
	}
	return sandbox.Spec{
		Owner:       owner,
		Template:    req.Template,
		Limits:      l,
		Env:         req.Env,
		Metadata:    req.Metadata,
		Timeout:     time.Duration(req.TimeoutS) * time.Second,
		IdleTimeout: time.Duration(req.IdleTimeoutS) * time.Second,
		Network:     network,
	}, nil
}

// checkLifetime checks the seconds v of the field name: not negative
// and at most max, the longest lifetime a sandbox may have.
func checkLifetime(name string, v int64, max time.Duration) error {
	switch {
	case v < 0:
		return invalidf("%s must not be negative", name)
	case v > int64(max/time.Second):
		return invalidf("%s %d is above the maximum lifetime of %d s (%v)", name, v, int64(max/time.Second), max)
	}
	return nil
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ownedSandbox returns the sandbox named by the {id} path value if it
// belongs to the caller's tenant. A malformed ID is invalid_argument; a
// missing sandbox and one of another tenant get the very same not_found
// error (the manager's own wording, so that a sandbox vanishing between
// this check and the operation reads the same).
func (c *call) ownedSandbox() (sandbox.Sandbox, error) {
	id := c.r.PathValue("id")
	if !sandbox.ValidID(id) {
		return sandbox.Sandbox{}, invalidf("malformed sandbox id; want %s followed by 16 characters [a-z2-7]", sandbox.IDPrefix)
	}
	sb, err := c.h.mgr.Get(id)
	if err != nil || sb.Owner != c.p.TenantID {
		return sandbox.Sandbox{}, sandboxNotFound(id)
	}
	return sb, nil
}

// agentSandbox is ownedSandbox for a request that the sandbox's agent
// serves (exec, PTY, code, files, processes): a failure of such a request
// is explained by what became of the sandbox meanwhile (see explain).
func (c *call) agentSandbox() (sandbox.Sandbox, error) {
	sb, err := c.ownedSandbox()
	if err == nil && sb.State == sandbox.StateAdopting {
		// Just after a restart: wait for the adoption rather than
		// fail a request that would run a moment later.
		c.h.mgr.WaitAdopted(c.r.Context(), sb.ID)
		sb, err = c.ownedSandbox()
	}
	if err == nil {
		c.sandboxID = sb.ID
	}
	return sb, err
}

// sandboxNotFound is worded exactly as the manager's error.
func sandboxNotFound(id string) error {
	return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

// createSandbox serves POST /v1/sandboxes.
func (h *Handler) createSandbox(c *call) error {
	var req createRequest
	if err := c.decodeJSON(&req, true); err != nil {
		return err
	}
	spec, err := req.spec(c.p.TenantID, h.mgr.Config())
	if err != nil {
		return err
	}
	c.ev.Details = map[string]any{"template": spec.Template}
	if spec.Network.Mode == sandbox.NetworkAllowlist {
		c.ev.Details["network"] = networkDetails(spec.Network)
	}
	var fromTemplate []string
	if spec.Tools, fromTemplate, err = h.createGrants(c.r.Context(), c.p.TenantID, spec.Template, req.Tools, req.Toolsets); err != nil {
		return err
	}
	if len(spec.Tools) > 0 {
		c.ev.Details["tools"] = spec.Tools
	}
	if len(fromTemplate) > 0 {
		c.ev.Details["toolsets"] = map[string]any{"names": fromTemplate, "from_template": true}
	}
	spec.KeyID = c.p.KeyID
	if spec.CommandPolicy = commandPolicyFrom(req.CommandPolicy); spec.CommandPolicy != nil {
		c.ev.Details["command_policy"] = req.CommandPolicy
	}
	sb, undo, err := h.provision(c, spec)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return undo(err)
	}
	if err := h.mgr.Confirm(c.r.Context(), sb.ID); err != nil {
		// Rare (the data disk failing): the audit log says created, the
		// daemon's log says why it went.
		h.log.Error("confirming a created sandbox failed; destroying it", "sandbox", sb.ID, "err", err)
		return undo(&apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			msg: "the sandbox could not be kept; create it again"})
	}
	c.w.Header().Set("Location", "/v1/sandboxes/"+sb.ID)
	return c.json(http.StatusCreated, toSandboxJSON(sb))
}

// provision creates the sandbox spec describes for c's tenant, within
// its quota: it writes c's audit intent first, creates the sandbox
// provisional (Spec.Pending: a daemon killed before Confirm removes it
// at restart and records why, naming the intent), and puts it on the
// store's record, which the quota counts. It returns the sandbox and
// undo, which destroys it, marks its record stopped and returns why.
func (h *Handler) provision(c *call, spec sandbox.Spec) (sandbox.Sandbox, func(why error) error, error) {
	quota, err := h.tenantQuota(c.r.Context(), c.p.TenantID)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	if quota > 0 && len(h.mgr.List(sandbox.Filter{Owner: c.p.TenantID, Live: true})) >= quota {
		return sandbox.Sandbox{}, nil, quotaErr(quota)
	}
	if err := c.begin(); err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	// Provisional until its outcome is on the record (the caller
	// confirms it then; a run never does): a
	// daemon killed before then removes it at restart and records why,
	// naming this intent, rather than keeping a sandbox whose create was
	// never answered.
	spec.Pending = true
	if c.intentSeq != 0 {
		spec.Origin = strconv.FormatUint(c.intentSeq, 10)
	}
	sb, err := h.mgr.Create(c.r.Context(), spec)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	c.ev.Target = sb.ID
	c.ev.Details["template"] = sb.Template
	if spec.Network.Mode == "" && sb.Network.Mode == sandbox.NetworkAllowlist {
		// The template's default network.
		d := networkDetails(sb.Network)
		d["from_template"] = true
		c.ev.Details["network"] = d
	}
	if spec.CommandPolicy == nil && sb.CmdPolicy != nil {
		// The template's default command policy.
		c.ev.Details["command_policy"] = map[string]any{"policy": commandPolicyJSON(sb.CmdPolicy), "from_template": true}
	}
	recorded := false
	undo := func(why error) error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), time.Minute)
		defer cancel()
		if derr := h.mgr.Destroy(dctx, sb.ID); derr != nil {
			h.log.Error("destroying a sandbox that could not be kept", "sandbox", sb.ID, "err", derr)
		}
		if recorded {
			if rerr := h.recordStopped(dctx, sb); rerr != nil {
				h.log.Error("recording a sandbox that could not be kept as stopped", "sandbox", sb.ID, "err", rerr)
			}
		}
		return why
	}
	switch {
	case h.mgr.KeepsRecords():
		// The store's quota check is atomic across concurrent creates.
		if err := h.recordCreated(c.r.Context(), sb); err != nil {
			return sandbox.Sandbox{}, nil, undo(err)
		}
		recorded = true
	case quota > 0:
		// Concurrent creates may all pass the check above: the oldest
		// ones within the quota stay, the newer ones go.
		live := h.mgr.List(sandbox.Filter{Owner: c.p.TenantID, Live: true})
		if i := slices.IndexFunc(live, func(s sandbox.Sandbox) bool { return s.ID == sb.ID }); i >= quota {
			return sandbox.Sandbox{}, nil, undo(quotaErr(quota))
		}
	}
	return sb, undo, nil
}

func quotaErr(n int) error {
	return fmt.Errorf("this tenant's quota of %d sandboxes is reached; delete one first: %w", n, errdefs.ErrResourceExhausted)
}

// tenantQuota asks the Quota, if any.
func (h *Handler) tenantQuota(ctx context.Context, tenant string) (int, error) {
	if h.quota == nil {
		return 0, nil
	}
	n, err := h.quota.SandboxQuota(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("sandbox quota: %w", err)
	}
	return n, nil
}

// listSandboxes serves GET /v1/sandboxes?state=...&metadata.KEY=VALUE.
func (h *Handler) listSandboxes(c *call) error {
	f, err := parseListQuery(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	f.Owner = c.p.TenantID
	sbs := h.mgr.List(f)
	out := wire.SandboxList{Sandboxes: make([]wire.Sandbox, 0, len(sbs))}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, toSandboxJSON(sb))
	}
	return c.json(http.StatusOK, out)
}

// parseListQuery parses the filters of a list: state (repeatable or
// comma-separated) and metadata.KEY=VALUE (each key once). Anything else
// is an error.
func parseListQuery(raw string) (sandbox.Filter, error) {
	var f sandbox.Filter
	q, err := url.ParseQuery(raw)
	if err != nil {
		return f, invalidf("malformed query string")
	}
	for key, vals := range q {
		switch {
		case key == "state":
			for _, v := range vals {
				for _, s := range strings.Split(v, ",") {
					st := sandbox.State(strings.TrimSpace(s))
					if !st.Valid() {
						return f, invalidf("unknown state %q; want one of creating, adopting, running, paused, stopping, stopped, failed", clean(truncate(s, 32)))
					}
					if !slices.Contains(f.States, st) {
						f.States = append(f.States, st)
					}
				}
			}
			if len(f.States) > maxListStates {
				return f, invalidf("too many state filters")
			}
		case strings.HasPrefix(key, "metadata."):
			k := strings.TrimPrefix(key, "metadata.")
			switch {
			case k == "" || len(k) > sandbox.MaxKeyBytes:
				return f, invalidf("metadata filter keys must be 1 to %d bytes", sandbox.MaxKeyBytes)
			case len(vals) != 1:
				return f, invalidf("metadata filter %q is given more than once", clean(k))
			case len(vals[0]) > sandbox.MaxValueBytes:
				return f, invalidf("metadata filter values must be at most %d bytes", sandbox.MaxValueBytes)
			}
			if f.Metadata == nil {
				f.Metadata = make(map[string]string)
			}
			if len(f.Metadata) >= sandbox.MaxMapKeys {
				return f, invalidf("at most %d metadata filters", sandbox.MaxMapKeys)
			}
			f.Metadata[k] = vals[0]
		default:
			return f, invalidf("unknown query parameter %q; want state or metadata.KEY", clean(truncate(key, 64)))
		}
	}
	return f, nil
}

// getSandbox serves GET /v1/sandboxes/{id}.
func (h *Handler) getSandbox(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toSandboxJSON(sb))
}

// deleteSandbox serves DELETE /v1/sandboxes/{id}: the sandbox is destroyed
// even if the client goes away meanwhile. Deleting a stopped sandbox
// succeeds.
func (h *Handler) deleteSandbox(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	// The sandbox's record file goes only once the outcome is committed:
	// a daemon killed in between records the end at its next start.
	if err := h.mgr.DestroyRecorded(context.WithoutCancel(c.r.Context()), sb.ID, c.commit); err != nil {
		return err
	}
	if err := h.recordStopped(c.r.Context(), sb); err != nil {
		return h.recordUnavailable(sb.ID, err, "the sandbox was deleted but its record was not updated; retry the delete")
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// setTimeout serves POST /v1/sandboxes/{id}/timeout.
func (h *Handler) setTimeout(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	var req wire.TimeoutRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	if req.TimeoutS == 0 {
		return invalidf("timeout_s is required: the seconds from now the sandbox should live")
	}
	if err := checkLifetime("timeout_s", req.TimeoutS, h.mgr.Config().MaxLifetime); err != nil {
		return err
	}
	c.ev.Details = map[string]any{"timeout_s": req.TimeoutS}
	if err := c.begin(); err != nil {
		return err
	}
	sb, err = h.mgr.SetTimeout(c.r.Context(), sb.ID, time.Duration(req.TimeoutS)*time.Second)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, toSandboxJSON(sb))
}

// ToolResolver resolves the tools a create grants a sandbox: the names
// in tools and the tools of the toolsets in toolsets, all of tenant's,
// as one sorted list without duplicates. A name that tenant has not
// registered is errdefs.ErrNotFound, naming it. The tool gateway's
// registry implements it.
type ToolResolver interface {
	Resolve(ctx context.Context, tenant string, tools, toolsets []string) ([]string, error)
}

// maxGrantNames caps the names in a create's tools and toolsets, each.
const maxGrantNames = sandbox.MaxTools

// grantedTools resolves a create's tools and toolsets for tenant: none
// when it names none, an error when it names some and the server has no
// tool gateway.
func (h *Handler) grantedTools(ctx context.Context, tenant string, tools, toolsets []string) ([]string, error) {
	if len(tools) == 0 && len(toolsets) == 0 {
		return nil, nil
	}
	for _, f := range []struct {
		name  string
		names []string
	}{{"tools", tools}, {"toolsets", toolsets}} {
		if len(f.names) > maxGrantNames {
			return nil, invalidf("%s names %d entries, at most %d are allowed", f.name, len(f.names), maxGrantNames)
		}
		for i, n := range f.names {
			if n == "" {
				return nil, invalidf("%s[%d] is empty", f.name, i)
			}
		}
	}
	if h.resolver == nil {
		return nil, fmt.Errorf("this server has no tool gateway: tools and toolsets cannot be granted: %w", errdefs.ErrNotSupported)
	}
	names, err := h.resolver.Resolve(ctx, tenant, tools, toolsets)
	if err != nil {
		return nil, err
	}
	if len(names) > sandbox.MaxTools {
		return nil, invalidf("tools and toolsets grant %d tools, at most %d are allowed", len(names), sandbox.MaxTools)
	}
	return names, nil
}
