package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Caps and defaults of the call pipeline.
const (
	// MaxArgsBytes caps a call's arguments, as JSON.
	MaxArgsBytes = 256 << 10
	// DefaultMaxOutputBytes is the default cap on a tool's answer.
	DefaultMaxOutputBytes = 1 << 20
	// DefaultMaxConcurrent is the default cap on one sandbox's calls of
	// one tool in flight (Governance.MaxConcurrent 0). It is high enough
	// that 100 concurrent calls from one program run together.
	DefaultMaxConcurrent = 128
	// DefaultMaxSandboxes is the default cap on the sandboxes whose
	// budget counters the gateway keeps at once.
	DefaultMaxSandboxes = 10000
	// DefaultBreakerFailures is how many failures in a row of a tool's
	// upstream open its circuit; DefaultBreakerOpen how long it stays
	// open before one call tests it again.
	DefaultBreakerFailures = 5
	DefaultBreakerOpen     = 30 * time.Second
)

// The stages of the pipeline, as Record.Stage names them.
const (
	StageGrant    = "grant"
	StageSchema   = "schema"
	StagePolicy   = "policy"
	StageBudget   = "budget"
	StageApproval = "approval"
	StageCircuit  = "circuit"
	StageUpstream = "upstream"
	StageOutput   = "output"
)

// SecretReader reveals a tenant's secret values, for the upstream
// request only; *secrets.Reader is one. The gateway wipes every value it
// is given once the call ends.
type SecretReader interface {
	Reveal(ctx context.Context, tenant, name string) (secrets.Value, error)
}

// ApproveFunc asks a person to decide one call of a tool that requires
// approval (Governance.Approval), and blocks until they decide, the
// approval times out or ctx ends. args are the call's arguments as
// records show them (Governance.Redact applied). It returns whether the
// call is approved and the approver's reason; an error (a timeout
// included) denies the call.
type ApproveFunc func(ctx context.Context, c Caller, t Tool, args json.RawMessage) (approved bool, reason string, err error)

// Config configures New.
type Config struct {
	// Registry resolves a tenant's tools. Required.
	Registry Registry
	// Secrets reveals the secrets that upstream header templates name
	// ({secret.NAME}). nil: a call of a tool that names one fails.
	Secrets SecretReader
	// Policies returns the tenant's Cedar policy text; "" means the
	// tenant has none, and every call is permitted. nil: no tenant has
	// any. Parsed policy sets are cached by text.
	Policies func(ctx context.Context, tenant string) (string, error)
	// Approve decides calls of tools that require approval. nil: such
	// calls are denied (fail closed).
	Approve ApproveFunc
	// Record receives the record of every call once it ends; nil
	// discards them. It is called on the caller's goroutine and must
	// not block for long.
	Record func(Record)
	// AllowUpstream admits an upstream address that the SSRF guard
	// would refuse (loopback, private, link-local, metadata,
	// unspecified, multicast, reserved: egress.ClassOf not public).
	// nil admits none of them.
	AllowUpstream func(netip.Addr) bool
	// MaxOutputBytes caps a tool's answer (default
	// DefaultMaxOutputBytes); a larger one fails the call.
	MaxOutputBytes int
	// DefaultMaxConcurrent applies to tools whose MaxConcurrent is 0
	// (default DefaultMaxConcurrent).
	DefaultMaxConcurrent int
	// MaxSandboxes caps the sandboxes whose budget counters are kept
	// (default DefaultMaxSandboxes); past it, the counters of the
	// sandbox idle longest are dropped. Forget drops a sandbox's.
	MaxSandboxes int
	// BreakerFailures and BreakerOpen set each tool's circuit breaker
	// (defaults DefaultBreakerFailures, DefaultBreakerOpen).
	BreakerFailures int
	BreakerOpen     time.Duration
	// Relay hands the calls of caller-executed tools (UpstreamCaller)
	// to the program's caller. nil: such calls fail.
	Relay *Relay
	// MaxMCPSessions caps the sessions with upstream MCP servers open at
	// once (default DefaultMaxMCPSessions); MCPIdle is how long one no
	// call uses stays open (default DefaultMCPIdle).
	MaxMCPSessions int
	MCPIdle        time.Duration
	// Tracer, if set, traces each call as a span (tool.call) with the
	// tool's name, the outcome and the stage that decided it: a child
	// of the span in the call's context (an API request's), or a root
	// span for a call from a sandbox. nil: only calls whose context
	// carries a span are traced.
	Tracer trace.TracerProvider
}

// Gateway runs the call pipeline. It is safe for concurrent use.
type Gateway struct {
	cfg      Config
	client   *upstreamClient
	mcp      *mcpPool
	budgets  *budgets
	breakers *breakers
	policies *policyCache
	schemas  *schemaCache

	obsMu     sync.Mutex
	observers map[string]map[*observer]struct{} // by sandbox
}

// observer is one Observe subscription.
type observer struct{ fn func(Record) }

var _ Calls = (*Gateway)(nil)

// New returns a gateway configured by cfg.
func New(cfg Config) (*Gateway, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("gateway: a registry is required: %w", errdefs.ErrInvalidArgument)
	}
	for _, v := range []struct {
		name string
		n    *int
		def  int
	}{
		{"MaxOutputBytes", &cfg.MaxOutputBytes, DefaultMaxOutputBytes},
		{"DefaultMaxConcurrent", &cfg.DefaultMaxConcurrent, DefaultMaxConcurrent},
		{"MaxSandboxes", &cfg.MaxSandboxes, DefaultMaxSandboxes},
		{"BreakerFailures", &cfg.BreakerFailures, DefaultBreakerFailures},
		{"MaxMCPSessions", &cfg.MaxMCPSessions, DefaultMaxMCPSessions},
	} {
		if *v.n < 0 {
			return nil, fmt.Errorf("gateway: %s is negative: %w", v.name, errdefs.ErrInvalidArgument)
		}
		if *v.n == 0 {
			*v.n = v.def
		}
	}
	if cfg.BreakerOpen < 0 {
		return nil, fmt.Errorf("gateway: BreakerOpen is negative: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.BreakerOpen == 0 {
		cfg.BreakerOpen = DefaultBreakerOpen
	}
	if cfg.MCPIdle < 0 {
		return nil, fmt.Errorf("gateway: MCPIdle is negative: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.MCPIdle == 0 {
		cfg.MCPIdle = DefaultMCPIdle
	}
	client := newUpstreamClient(cfg.AllowUpstream)
	return &Gateway{
		cfg:      cfg,
		client:   client,
		mcp:      newMCPPool(client.tr, cfg.MaxMCPSessions, cfg.MCPIdle, mcpMaxMessage(cfg.MaxOutputBytes)),
		budgets:  newBudgets(cfg.MaxSandboxes),
		breakers: newBreakers(cfg.BreakerFailures, cfg.BreakerOpen),
		policies: newPolicyCache(),
		schemas:  newSchemaCache(),
	}, nil
}

// Close ends the gateway's sessions with upstream MCP servers (their
// processes with them) and releases its idle upstream connections.
// Calls of MCP upstreams after it fail.
func (g *Gateway) Close() {
	g.mcp.close()
	g.client.close()
}

// Observe calls fn with the record of every call sandbox makes from now
// until stop is called, after Config.Record, on the calling goroutine:
// fn must not block. Records of calls that end after stop returns are
// not given to fn.
func (g *Gateway) Observe(sandbox string, fn func(Record)) (stop func()) {
	o := &observer{fn: fn}
	g.obsMu.Lock()
	if g.observers == nil {
		g.observers = map[string]map[*observer]struct{}{}
	}
	if g.observers[sandbox] == nil {
		g.observers[sandbox] = map[*observer]struct{}{}
	}
	g.observers[sandbox][o] = struct{}{}
	g.obsMu.Unlock()
	return func() {
		g.obsMu.Lock()
		defer g.obsMu.Unlock()
		delete(g.observers[sandbox], o)
		if len(g.observers[sandbox]) == 0 {
			delete(g.observers, sandbox)
		}
	}
}

// observe hands r to the observers of its sandbox. It holds obsMu
// while they run, so that none is called after its stop returned.
func (g *Gateway) observe(r Record) {
	g.obsMu.Lock()
	defer g.obsMu.Unlock()
	for o := range g.observers[r.Caller.Sandbox] {
		o.fn(r)
	}
}

// Forget drops the budget counters of a sandbox; the daemon calls it
// when the sandbox ends. Calls in flight finish normally.
func (g *Gateway) Forget(sandbox string) { g.budgets.forget(sandbox) }

// Granted returns the tools granted to c that are registered, ordered
// by name. A granted name whose tool was deleted is left out.
func (g *Gateway) Granted(ctx context.Context, c Caller) ([]Tool, error) {
	names := slices.Clone(c.Tools)
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]Tool, 0, len(names))
	for _, n := range names {
		t, err := g.cfg.Registry.Tool(ctx, c.Tenant, n)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Call runs one call of the tool name by c with args (a JSON object)
// through the pipeline: grant, schema, policy, budget, approval,
// circuit, upstream, output. A refusal or failure is an error wrapping
// an errdefs class whose message is fit for the calling program. Each
// call, whatever its outcome, hands one Record to Config.Record.
func (g *Gateway) Call(ctx context.Context, c Caller, name string, args json.RawMessage) (Result, error) {
	cl := &call{g: g, c: c, name: name, start: time.Now()}
	defer cl.end()
	ctx, span := tracing.StartRoot(ctx, g.cfg.Tracer, "tool.call", tracing.KeyToolName.String(shorten(name, maxSpanName)),
		tracing.KeySandbox.String(c.Sandbox), tracing.KeyTenant.String(c.Tenant))
	out, err := cl.run(ctx, args)
	d := time.Since(cl.start)
	r := cl.record(out, err, d)
	if span.IsRecording() {
		span.SetAttributes(tracing.KeyToolOutcome.String(r.Outcome), tracing.KeyToolStage.String(r.Stage))
		if r.DryRun {
			span.SetAttributes(tracing.KeyToolDryRun.Bool(true))
		}
	}
	tracing.End(span, err)
	if err != nil {
		return Result{Duration: d}, err
	}
	return Result{Output: out, Duration: d}, nil
}

// stageError is a stage's refusal or failure.
type stageError struct {
	stage   string
	outcome string // OutcomeDenied or OutcomeError
	err     error  // wraps an errdefs class; its text is fit for the caller
	// fault marks an upstream failure that counts against its circuit
	// breaker (no answer, a timeout, a 5xx); ignore one that counts
	// neither way (the SSRF guard's refusal, the caller going away).
	fault, ignore bool
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// refuse returns a refusal of stage, of class, with a message fit for
// the caller.
func refuse(stage string, class error, format string, a ...any) *stageError {
	return &stageError{stage: stage, outcome: OutcomeDenied, err: errdefs.Publicf(class, format, a...)}
}

// failure returns a failure of stage (the tool or its upstream failed).
func failure(stage string, class error, format string, a ...any) *stageError {
	return &stageError{stage: stage, outcome: OutcomeError, err: errdefs.Publicf(class, format, a...)}
}

// call is one Call in progress.
type call struct {
	g     *Gateway
	c     Caller
	name  string
	start time.Time
	tool  Tool
	// recArgs are the arguments as records show them, once parsed.
	recArgs json.RawMessage
	// dry lists the refusals that were only recorded: those the tool's
	// dry-run mode let through, and dry-run policies'.
	dry     []string
	dryStat string
	release func()
	// revealed are the secret values this call put on the wire: they
	// are scrubbed from everything it returns and records, and wiped
	// when it ends.
	revealed []secrets.Value
	status   int
}

func (cl *call) run(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	t, err := cl.grant(ctx)
	if err != nil {
		return nil, err
	}
	cl.tool = t
	args, err := cl.schema(raw)
	if err != nil {
		return nil, err
	}
	if err := cl.policy(ctx, args); err != nil {
		return nil, err
	}
	if err := cl.budget(); err != nil {
		return nil, err
	}
	if err := cl.approval(ctx); err != nil {
		return nil, err
	}
	uctx, span := tracing.Start(ctx, "tool.upstream")
	out, err := cl.upstream(uctx, args)
	tracing.End(span, err)
	if err != nil {
		return nil, err
	}
	return cl.output(out)
}

// grant checks that the tool is granted to the sandbox and looks it up.
// An ungranted name reads the same whether or not it is registered.
func (cl *call) grant(ctx context.Context) (Tool, error) {
	if !slices.Contains(cl.c.Tools, cl.name) {
		return Tool{}, refuse(StageGrant, errdefs.ErrPermissionDenied, "tool %s is not granted to this sandbox", clip(cl.name))
	}
	t, err := cl.g.cfg.Registry.Tool(ctx, cl.c.Tenant, cl.name)
	if errors.Is(err, errdefs.ErrNotFound) || (err == nil && t.Owner != cl.c.Tenant) {
		return Tool{}, refuse(StageGrant, errdefs.ErrNotFound, "tool %s is granted to this sandbox but no longer registered", cl.name)
	}
	if err != nil {
		return Tool{}, &stageError{stage: StageGrant, outcome: OutcomeError, err: fmt.Errorf("tool %s: %w", cl.name, err)}
	}
	return t, nil
}

// schema parses the arguments, a JSON object of at most MaxArgsBytes,
// and validates them against the tool's input schema.
func (cl *call) schema(raw json.RawMessage) (map[string]any, error) {
	if len(raw) > MaxArgsBytes {
		return nil, refuse(StageSchema, errdefs.ErrInvalidArgument, "the arguments of tool %s are %d bytes, over the limit of %d", cl.name, len(raw), MaxArgsBytes)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	v, err := DecodeJSON(raw)
	if err != nil {
		return nil, refuse(StageSchema, errdefs.ErrInvalidArgument, "the arguments of tool %s are not valid JSON", cl.name)
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, refuse(StageSchema, errdefs.ErrInvalidArgument, "the arguments of tool %s must be a JSON object", cl.name)
	}
	cl.recArgs = redactArgs(args, cl.tool.Governance.Redact)
	if err := cl.g.schemas.validate(cl.tool.InputSchema, args); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, refuse(StageSchema, errdefs.ErrInvalidArgument, "the arguments of tool %s do not match its input schema: %s", cl.name, describeValidation(ve))
		}
		return nil, failure(StageSchema, errdefs.ErrFailedPrecondition, "the input schema of tool %s does not compile", cl.name)
	}
	return args, nil
}

// policy asks the tenant's Cedar policies.
func (cl *call) policy(ctx context.Context, args map[string]any) error {
	if cl.g.cfg.Policies == nil {
		return nil
	}
	text, err := cl.g.cfg.Policies(ctx, cl.c.Tenant)
	if err != nil {
		return failure(StagePolicy, errdefs.ErrUnavailable, "the policies for tool %s could not be read", cl.name)
	}
	if strings.TrimSpace(text) == "" {
		return nil
	}
	calls := cl.g.budgets.calls(cl.c.Sandbox, cl.name)
	reason, ok, dry := cl.g.policies.authorize(cl.c, cl.tool, args, calls, text)
	if !ok {
		return cl.dryOr(refuse(StagePolicy, errdefs.ErrPermissionDenied, "the call of tool %s is denied by policy: %s", cl.name, reason))
	}
	if dry != "" {
		// A dry-run policy would have denied it: recorded, not enforced.
		cl.noteDry(refuse(StagePolicy, errdefs.ErrPermissionDenied, "the call of tool %s is denied by dry-run policy: %s", cl.name, dry))
	}
	return nil
}

// budget takes the call's place in the tool's budgets for the sandbox.
func (cl *call) budget() error {
	release, err := cl.g.budgets.acquire(cl.c.Sandbox, cl.name, cl.tool.Governance, cl.g.cfg.DefaultMaxConcurrent, cl.tool.Governance.DryRun)
	cl.release = release
	if err != nil {
		return cl.dryOr(err)
	}
	return nil
}

// dryOr returns err, or nil after noting it when the tool runs in dry-run
// mode.
func (cl *call) dryOr(err *stageError) error {
	if !cl.tool.Governance.DryRun {
		return err
	}
	cl.noteDry(err)
	return nil
}

// noteDry notes a refusal that is only recorded (a dry-run tool's, or a
// dry-run policy's).
func (cl *call) noteDry(err *stageError) {
	if len(cl.dry) == 0 {
		cl.dryStat = err.stage
	}
	cl.dry = append(cl.dry, err.stage+": "+msgOf(err.err))
}

// approval waits for a person's decision where the tool requires one.
func (cl *call) approval(ctx context.Context) error {
	if !cl.tool.Governance.Approval {
		return nil
	}
	if cl.g.cfg.Approve == nil {
		return refuse(StageApproval, errdefs.ErrPermissionDenied, "tool %s requires approval but no approver is configured", cl.name)
	}
	ok, reason, err := cl.g.cfg.Approve(ctx, cl.c, cl.tool, cl.recArgs)
	switch {
	case err != nil && errdefs.Class(err) == errdefs.ErrTimeout || errors.Is(err, context.DeadlineExceeded):
		return refuse(StageApproval, errdefs.ErrTimeout, "the call of tool %s was not approved in time", cl.name)
	case err != nil:
		msg, public := errdefs.PublicMessage(err)
		if !public {
			msg = "the approval failed"
		}
		return refuse(StageApproval, errdefs.ErrPermissionDenied, "the call of tool %s was not approved: %s", cl.name, msg)
	case !ok:
		if reason == "" {
			reason = "no reason given"
		}
		return refuse(StageApproval, errdefs.ErrPermissionDenied, "the call of tool %s was denied by its approver: %s", cl.name, shorten(reason, 200))
	}
	return nil
}

// upstream calls the tool's upstream through its circuit breaker.
func (cl *call) upstream(ctx context.Context, args map[string]any) ([]byte, error) {
	switch cl.tool.Upstream.Kind {
	case UpstreamHTTP, UpstreamMCP:
	case UpstreamCaller:
		return cl.relay(ctx, args)
	default:
		return nil, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s has no upstream of a known kind", cl.name)
	}
	timeout := time.Duration(min(cl.tool.Governance.Timeout(), MaxTimeoutS)) * time.Second
	b := cl.g.breakers.get(cl.c.Tenant, cl.name)
	ans, err := b.execute(cl.name, func() (answer, error) {
		if cl.tool.Upstream.Kind == UpstreamMCP {
			return cl.mcpCall(ctx, args, timeout)
		}
		return cl.g.client.do(ctx, cl, args, timeout)
	})
	cl.status = ans.status
	if err != nil {
		return nil, err
	}
	return ans.body, nil
}

// relay hands the call of a caller-executed tool to the program's
// caller and waits for its answer, up to the tool's timeout. No circuit
// breaker stands in front of it: the caller is not a shared upstream.
func (cl *call) relay(ctx context.Context, args map[string]any) ([]byte, error) {
	if cl.g.cfg.Relay == nil {
		return nil, failure(StageUpstream, errdefs.ErrNotSupported, "tool %s is caller-executed, and this server relays no calls to callers", cl.name)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, failure(StageUpstream, errdefs.ErrInternal, "the arguments of tool %s could not be encoded", cl.name)
	}
	timeout := time.Duration(min(cl.tool.Governance.Timeout(), MaxTimeoutS)) * time.Second
	return cl.g.cfg.Relay.Execute(ctx, cl.c, cl.name, raw, timeout)
}

// output turns the upstream's answer into the call's output: secrets
// scrubbed, JSON (a body that is not JSON becomes a JSON string) and
// valid against the tool's output schema.
func (cl *call) output(body []byte) (json.RawMessage, error) {
	body = bytes.TrimSpace(cl.scrub(body))
	var out json.RawMessage
	switch {
	case len(body) == 0:
		out = json.RawMessage("null")
	case json.Valid(body):
		out = body
	default:
		out, _ = json.Marshal(string(body))
	}
	if len(cl.tool.OutputSchema) == 0 {
		return out, nil
	}
	v, err := DecodeJSON(out)
	if err != nil {
		return nil, failure(StageOutput, errdefs.ErrInternal, "the answer of tool %s could not be parsed", cl.name)
	}
	if err := cl.g.schemas.validate(cl.tool.OutputSchema, v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, failure(StageOutput, errdefs.ErrFailedPrecondition, "the answer of tool %s does not match its output schema: %s", cl.name, describeValidation(ve))
		}
		return nil, failure(StageOutput, errdefs.ErrFailedPrecondition, "the output schema of tool %s does not compile", cl.name)
	}
	return out, nil
}

// reveal returns the value of the tenant's secret name, keeping it to
// scrub and wipe.
func (cl *call) reveal(ctx context.Context, name string) (secrets.Value, error) {
	if cl.g.cfg.Secrets == nil {
		return secrets.Value{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s needs secret %s, but this daemon has no secret store", cl.name, name)
	}
	v, err := cl.g.cfg.Secrets.Reveal(ctx, cl.c.Tenant, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return secrets.Value{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s needs secret %s, which is not set", cl.name, name)
	}
	if err != nil {
		return secrets.Value{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s needs secret %s, which could not be read", cl.name, name)
	}
	cl.revealed = append(cl.revealed, v)
	return v, nil
}

// scrub replaces every revealed secret value in b, as is and as it
// reads inside a JSON string, by secrets.Redacted.
func (cl *call) scrub(b []byte) []byte {
	for _, v := range cl.revealed {
		s := v.Bytes()
		if len(s) == 0 {
			continue
		}
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(secrets.Redacted))
		}
		if q := jsonEscaped(s); !bytes.Equal(q, s) && bytes.Contains(b, q) {
			b = bytes.ReplaceAll(b, q, []byte(secrets.Redacted))
		}
	}
	return b
}

// jsonEscaped returns s as it reads inside a JSON string, without the
// quotes.
func jsonEscaped(s []byte) []byte {
	q, _ := json.Marshal(string(s))
	return q[1 : len(q)-1]
}

// record hands the call's record to Config.Record, with its arguments
// redacted and every revealed secret scrubbed.
func (cl *call) record(out json.RawMessage, err error, d time.Duration) Record {
	r := Record{Caller: cl.c, Tool: cl.name, Outcome: OutcomeOK, Start: cl.start, Duration: d, Status: cl.status, OutputBytes: len(out)}
	if cl.recArgs != nil {
		r.Args = cl.scrub(bytes.Clone(cl.recArgs))
		if !json.Valid(r.Args) { // a secret stood for a whole number
			r.Args, _ = json.Marshal(string(r.Args))
		}
	}
	var se *stageError
	switch {
	case errors.As(err, &se):
		r.Outcome, r.Stage, r.Reason = se.outcome, se.stage, msgOf(se.err)
	case err != nil:
		r.Outcome, r.Reason = OutcomeError, "internal error"
	}
	if len(cl.dry) > 0 {
		r.DryRun = true
		if r.Stage == "" {
			r.Stage = cl.dryStat
		}
		r.Reason = strings.TrimPrefix(r.Reason+"; dry run, would be refused at "+strings.Join(cl.dry, "; "), "; ")
	}
	r.Reason = string(cl.scrub([]byte(r.Reason)))
	if cl.g.cfg.Record != nil {
		cl.g.cfg.Record(r)
	}
	cl.g.observe(r)
	return r
}

// maxSpanName caps the tool name a span carries.
const maxSpanName = 256

// end releases the call's budget place and wipes the secrets it
// revealed.
func (cl *call) end() {
	if cl.release != nil {
		cl.release()
	}
	for _, v := range cl.revealed {
		v.Wipe()
	}
}

// msgOf returns an error's message for the caller: its Public message
// where it has one.
func msgOf(err error) string {
	if m, ok := errdefs.PublicMessage(err); ok {
		return m
	}
	return err.Error()
}

// shorten cuts a text that came from outside (an approver's reason, a
// validation message) to n bytes for a message.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// redactArgs encodes args with the values of the fields named in
// redact replaced by secrets.Redacted.
func redactArgs(args map[string]any, redact []string) json.RawMessage {
	m := args
	if len(redact) > 0 {
		m = make(map[string]any, len(args))
		for k, v := range args {
			if slices.Contains(redact, k) {
				v = secrets.Redacted
			}
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

// describeValidation sums up a validation error: its first three leaf
// errors, each "at '/path': what".
func describeValidation(ve *jsonschema.ValidationError) string {
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(leaves) > 3 {
			return
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, shorten(e.Error(), 200))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) > 3 {
		leaves = append(leaves[:3], "…")
	}
	return strings.Join(leaves, "; ")
}

// schemaCache keeps compiled schemas by their text's hash.
type schemaCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*jsonschema.Schema
}

// maxCachedSchemas caps schemaCache; past it the cache starts over.
const maxCachedSchemas = 4096

func newSchemaCache() *schemaCache {
	return &schemaCache{m: make(map[[sha256.Size]byte]*jsonschema.Schema)}
}

// validate validates v against the schema raw (none: anything passes).
// A *jsonschema.ValidationError says v does not match; any other error,
// that the schema does not compile.
func (sc *schemaCache) validate(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	k := sha256.Sum256(raw)
	sc.mu.Lock()
	s := sc.m[k]
	sc.mu.Unlock()
	if s == nil {
		var err error
		if s, err = CompileSchema(raw); err != nil {
			return err
		}
		sc.mu.Lock()
		if len(sc.m) >= maxCachedSchemas {
			clear(sc.m)
		}
		sc.m[k] = s
		sc.mu.Unlock()
	}
	return s.Validate(v)
}
