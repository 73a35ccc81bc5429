// Package metrics holds the daemon's Prometheus collectors: what the
// REST API, the sandbox manager, the audit log, the tool gateway and the
// egress edge record, and the gauges read from them at each scrape, on a
// registry of its own (never the global default one), served in the
// Prometheus text format by Handler.
//
// A nil *Metrics records nothing: every method is safe to call on nil, so
// that a component built without metrics pays one nil check per event.
//
// Label values are bounded. Routes are the API mux's patterns, codes HTTP
// statuses, reasons the API's error codes or the manager's end reasons,
// statuses and outcomes small fixed sets; names that tenants choose
// (templates, tools) are kept as they are for the first MaxNames distinct
// values of each and reported as "other" beyond. No sandbox, key or
// tenant ID is ever a label value.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxNames caps the distinct values of a label that tenants choose
// (template and tool names); later values are reported as OtherName.
const MaxNames = 256

// OtherName stands for the names past MaxNames.
const OtherName = "other"

// Exec modes (the mode label of the exec metrics).
const (
	ExecBuffered = "buffered"
	ExecStream   = "stream"
)

// ExecFailed is the status of an exec that produced no result (the
// process could not be started, or the agent failed).
const ExecFailed = "failed"

// Create origins.
const (
	OriginPool = "pool"
	OriginCold = "cold"
)

// Pool claim results.
const (
	ClaimClaimed = "claimed" // a member was handed out
	ClaimEmpty   = "empty"   // the pool had none ready: a cold create follows
	ClaimFailed  = "failed"  // claiming failed (the create fails)
)

// Latency buckets, in seconds: from 1 ms (a warm claim, an exec of
// echo) to a minute (a cold create on a busy host, a long command).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// auditBuckets are finer: an append is one SQLite commit, often
// shared (group commit).
var auditBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

// Metrics is the set of collectors. Build it with New; it is safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec   // route, code
	httpDuration *prometheus.HistogramVec // route

	creates        *prometheus.CounterVec   // template, origin
	createFailures *prometheus.CounterVec   // reason
	createDuration *prometheus.HistogramVec // origin
	destroys       *prometheus.CounterVec   // reason
	destroyFails   *prometheus.CounterVec   // reason
	poolClaims     *prometheus.CounterVec   // template, result

	execs        *prometheus.CounterVec   // mode, status
	execDuration *prometheus.HistogramVec // mode

	auditAppends  *prometheus.CounterVec // result
	auditDuration prometheus.Histogram

	templateBuilds *prometheus.CounterVec // kind, result
	codeContexts   *prometheus.CounterVec // result
	codeCells      *prometheus.CounterVec // status

	toolCalls    *prometheus.CounterVec // tool, outcome, stage
	toolDuration *prometheus.HistogramVec

	egressBytes    *prometheus.CounterVec // direction
	egressConns    *prometheus.CounterVec // protocol
	egressRefusals *prometheus.CounterVec // reason

	templates, tools *names

	handlerOnce sync.Once
	handler     http.Handler
}

// New returns the collectors, registered on a new registry together with
// the Go runtime's and the process's.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_http_requests_total",
			Help: "REST API requests answered, by route (the API mux's pattern, \"unmatched\" for none) and HTTP status code.",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_http_request_duration_seconds",
			Help:    "Time from a REST API request's headers to the end of its handler (streams and PTY sessions included), by route.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_creates_total",
			Help: "Sandboxes created, by template and origin (pool: a warm pool member claimed; cold).",
		}, []string{"template", "origin"}),
		createFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_create_failures_total",
			Help: "Sandbox creates that failed, by reason (the API's error code).",
		}, []string{"reason"}),
		createDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_sandbox_create_duration_seconds",
			Help:    "Time the sandbox manager took to create a sandbox that it created, by origin.",
			Buckets: latencyBuckets,
		}, []string{"origin"}),
		destroys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_destroys_total",
			Help: "Sandboxes destroyed, by end reason (deleted, expired, idle, agent_died).",
		}, []string{"reason"}),
		destroyFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_destroy_failures_total",
			Help: "Sandbox destroys the runtime failed (the sandbox stays, failed), by end reason.",
		}, []string{"reason"}),
		poolClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_pool_claims_total",
			Help: "Creates that asked a template's warm pool for a member, by template and result (claimed, empty, failed).",
		}, []string{"template", "result"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_execs_total",
			Help: "Execs (POST /v1/sandboxes/{id}/exec) that ran, by mode (buffered, stream) and status (success, error, timeout, resource_exceeded, killed; failed: no result).",
		}, []string{"mode", "status"}),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_exec_duration_seconds",
			Help:    "Time from an exec's start to its result, by mode.",
			Buckets: latencyBuckets,
		}, []string{"mode"}),
		auditAppends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_audit_appends_total",
			Help: "Audit log appends, by result (ok, error).",
		}, []string{"result"}),
		auditDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_audit_append_duration_seconds",
			Help:    "Time an audit log append took until the record was durable (or failed).",
			Buckets: auditBuckets,
		}),
		templateBuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_template_builds_total",
			Help: "Template builds and imports that ran, by kind (build, import) and result (ok or the API's error code).",
		}, []string{"kind", "result"}),
		codeContexts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_code_context_creates_total",
			Help: "Code interpreter contexts created, by result (ok or the API's error code).",
		}, []string{"result"}),
		codeCells: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_code_cells_total",
			Help: "Code cells run, by status (ok, error, timeout, interrupted, died; failed: the cell did not run to an end).",
		}, []string{"status"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_tool_calls_total",
			Help: "Tool gateway calls, by tool, outcome (ok, denied, error) and the stage that refused or failed it (empty when ok).",
		}, []string{"tool", "outcome", "stage"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_tool_call_duration_seconds",
			Help:    "Time a tool gateway call took, by outcome.",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		egressBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_bytes_total",
			Help: "Bytes moved by sandboxes' egress connections that ended, by direction (up: to the destination, down: to the sandbox).",
		}, []string{"direction"}),
		egressConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_connections_total",
			Help: "Sandboxes' egress connections allowed that ended, by protocol.",
		}, []string{"protocol"}),
		egressRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_refusals_total",
			Help: "Sandboxes' egress connections refused, by reason.",
		}, []string{"reason"}),
		templates: newNames(MaxNames),
		tools:     newNames(MaxNames),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.httpRequests, m.httpDuration,
		m.creates, m.createFailures, m.createDuration, m.destroys, m.destroyFails, m.poolClaims,
		m.execs, m.execDuration,
		m.auditAppends, m.auditDuration,
		m.templateBuilds, m.codeContexts, m.codeCells,
		m.toolCalls, m.toolDuration,
		m.egressBytes, m.egressConns, m.egressRefusals,
	)
	return m
}

// Registry is the registry the collectors are on (tests gather it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats
// (text, or what the scraper negotiates): at most 4 scrapes at once
// (more get 503), each bounded by 10 s. It is built once.
func (m *Metrics) Handler() http.Handler {
	m.handlerOnce.Do(func() {
		m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
			ErrorHandling:       promhttp.HTTPErrorOnError,
			MaxRequestsInFlight: 4,
			Timeout:             10 * time.Second,
		})
	})
	return m.handler
}

// Request records one answered REST API request: route is the mux's
// pattern ("" for none), code its status, took its handling time.
func (m *Metrics) Request(route string, code int, took time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	m.httpRequests.WithLabelValues(route, statusText(code)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(took.Seconds())
}

// Created records a create: template (the sandbox's template, "" when
// the spec did not resolve), origin (OriginPool or OriginCold), took the
// manager's time, and reason, "" on success, else the API's error code.
func (m *Metrics) Created(template, origin string, took time.Duration, reason string) {
	if m == nil {
		return
	}
	if reason != "" {
		m.createFailures.WithLabelValues(reason).Inc()
		return
	}
	m.creates.WithLabelValues(m.templates.value(template), origin).Inc()
	m.createDuration.WithLabelValues(origin).Observe(took.Seconds())
}

// Claimed records what a create got from a warm pool (ClaimClaimed,
// ClaimEmpty, ClaimFailed).
func (m *Metrics) Claimed(template, result string) {
	if m == nil {
		return
	}
	m.poolClaims.WithLabelValues(m.templates.value(template), result).Inc()
}

// Destroyed records a destroy that ran, for the end reason, and whether
// the runtime failed it.
func (m *Metrics) Destroyed(reason string, failed bool) {
	if m == nil {
		return
	}
	if failed {
		m.destroyFails.WithLabelValues(reason).Inc()
		return
	}
	m.destroys.WithLabelValues(reason).Inc()
}

// Exec records an exec in mode (ExecBuffered, ExecStream) that ended
// with status (the agent's, or ExecFailed) after took.
func (m *Metrics) Exec(mode, status string, took time.Duration) {
	if m == nil {
		return
	}
	m.execs.WithLabelValues(mode, status).Inc()
	m.execDuration.WithLabelValues(mode).Observe(took.Seconds())
}

// AuditAppend records one audit log append that took took, failed or not.
func (m *Metrics) AuditAppend(took time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.auditAppends.WithLabelValues(result).Inc()
	m.auditDuration.Observe(took.Seconds())
}

// TemplateBuild records a template build or import (kind "build" or
// "import") that ended with result ("ok" or an error code).
func (m *Metrics) TemplateBuild(kind, result string) {
	if m == nil {
		return
	}
	m.templateBuilds.WithLabelValues(kind, result).Inc()
}

// CodeContext records a code context create that ended with result.
func (m *Metrics) CodeContext(result string) {
	if m == nil {
		return
	}
	m.codeContexts.WithLabelValues(result).Inc()
}

// CodeCell records a code cell that ended with status.
func (m *Metrics) CodeCell(status string) {
	if m == nil {
		return
	}
	m.codeCells.WithLabelValues(status).Inc()
}

// ToolCall records one tool gateway call.
func (m *Metrics) ToolCall(tool, outcome, stage string, took time.Duration) {
	if m == nil {
		return
	}
	m.toolCalls.WithLabelValues(m.tools.value(tool), outcome, stage).Inc()
	m.toolDuration.WithLabelValues(outcome).Observe(took.Seconds())
}

// EgressEnded records an egress connection that was allowed and ended:
// its protocol and the bytes it moved each way.
func (m *Metrics) EgressEnded(protocol string, up, down int64) {
	if m == nil {
		return
	}
	m.egressConns.WithLabelValues(protocol).Inc()
	if up > 0 {
		m.egressBytes.WithLabelValues("up").Add(float64(up))
	}
	if down > 0 {
		m.egressBytes.WithLabelValues("down").Add(float64(down))
	}
}

// EgressRefused records an egress connection refused for reason.
func (m *Metrics) EgressRefused(reason string) {
	if m == nil {
		return
	}
	m.egressRefusals.WithLabelValues(reason).Inc()
}

// statusText is code as a label value; the common ones without an
// allocation.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 201:
		return "201"
	case 204:
		return "204"
	}
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{byte('0' + code/100), byte('0' + code/10%10), byte('0' + code%10)})
}

// names bounds the values of a label that tenants choose: the first max
// distinct values are kept, the rest are OtherName.
type names struct {
	mu   sync.Mutex
	seen map[string]struct{}
	max  int
}

func newNames(max int) *names { return &names{seen: make(map[string]struct{}), max: max} }

func (n *names) value(v string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.seen[v]; ok {
		return v
	}
	if len(n.seen) >= n.max {
		return OtherName
	}
	n.seen[v] = struct{}{}
	return v
}
