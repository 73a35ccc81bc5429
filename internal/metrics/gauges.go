package metrics

import "github.com/prometheus/client_golang/prometheus"

// SandboxCount is how many sandboxes are in one state with one template.
type SandboxCount struct {
	State, Template string
	N               int
}

// PoolState is one warm pool as a scrape sees it.
type PoolState struct {
	Template string
	Target   int // configured size
	Ready    int // members ready to be claimed
	Filling  int // members being created
	Failures int // consecutive failed fills
}

// Sources are read at each scrape, so that the gauges are what the
// components hold at that moment rather than counts kept in step by
// hand. A nil function is not reported.
type Sources struct {
	// Sandboxes counts the sandboxes the manager holds (ended ones kept
	// for GET included, in their end state), by state and template.
	Sandboxes func() []SandboxCount
	// Pools reports the warm pools.
	Pools func() []PoolState
	// AuditQueue is how many audit appends wait for the log's writer.
	AuditQueue func() int
	// ApprovalsPending is how many tool calls wait for a decision.
	ApprovalsPending func() int
}

// Watch registers a collector that reads s at each scrape. Call it once.
func (m *Metrics) Watch(s Sources) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&sourceCollector{s: s, templates: m.templates})
}

var (
	sandboxesDesc = prometheus.NewDesc("airlock_sandboxes",
		"Sandboxes the manager holds, by state and template (ended ones, kept for GET, in stopped or failed).",
		[]string{"state", "template"}, nil)
	poolTargetDesc = prometheus.NewDesc("airlock_pool_target_size",
		"Configured size of a template's warm pool.", []string{"template"}, nil)
	poolReadyDesc = prometheus.NewDesc("airlock_pool_ready",
		"Warm pool members ready to be claimed.", []string{"template"}, nil)
	poolFillingDesc = prometheus.NewDesc("airlock_pool_filling",
		"Warm pool members being created.", []string{"template"}, nil)
	poolFailuresDesc = prometheus.NewDesc("airlock_pool_fill_failures",
		"Consecutive failed creations of a warm pool's members (0 when healthy).", []string{"template"}, nil)
	auditQueueDesc = prometheus.NewDesc("airlock_audit_queue_depth",
		"Audit log appends waiting for the writer.", nil, nil)
	approvalsDesc = prometheus.NewDesc("airlock_approvals_pending",
		"Tool calls waiting for a person's decision.", nil, nil)
)

// sourceCollector reports Sources as gauges.
type sourceCollector struct {
	s         Sources
	templates *names
}

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, poolTargetDesc, poolReadyDesc, poolFillingDesc,
		poolFailuresDesc, auditQueueDesc, approvalsDesc} {
		ch <- d
	}
}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	if c.s.Sandboxes != nil {
		// Templates past MaxNames fold into "other": sum them, since a
		// label set may be reported once only.
		type key struct{ state, template string }
		sums := make(map[key]int)
		var order []key
		for _, sc := range c.s.Sandboxes() {
			k := key{sc.State, c.templates.value(sc.Template)}
			if _, ok := sums[k]; !ok {
				order = append(order, k)
			}
			sums[k] += sc.N
		}
		for _, k := range order {
			gauge(sandboxesDesc, sums[k], k.state, k.template)
		}
	}
	if c.s.Pools != nil {
		for _, p := range c.s.Pools() {
			gauge(poolTargetDesc, p.Target, p.Template)
			gauge(poolReadyDesc, p.Ready, p.Template)
			gauge(poolFillingDesc, p.Filling, p.Template)
			gauge(poolFailuresDesc, p.Failures, p.Template)
		}
	}
	if c.s.AuditQueue != nil {
		gauge(auditQueueDesc, c.s.AuditQueue())
	}
	if c.s.ApprovalsPending != nil {
		gauge(approvalsDesc, c.s.ApprovalsPending())
	}
}
