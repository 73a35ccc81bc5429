package daemon

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ActionEgressConnect is the audit action of one egress decision of a
// sandbox's proxy (allowlist mode): one record per tunnel or forwarded
// HTTP request, outcome "ok" when allowed and "permission_denied" when
// refused.
const ActionEgressConnect = "egress.connect"

// Egress audit queue limits.
const (
	egressQueueLen     = 4096
	egressAuditWorkers = 4
	egressAppendWait   = 10 * time.Second
)

// egressAudit writes the egress proxies' events to the audit log without
// ever blocking a proxy: Record queues an event, or drops it when the
// queue is full; the number dropped is logged and carried, as
// "dropped_before", in the details of the next record written.
type egressAudit struct {
	log     *audit.Log
	logger  *slog.Logger
	queue   chan sandbox.EgressEvent
	dropped atomic.Int64
	wg      sync.WaitGroup
	once    sync.Once
}

// newEgressAudit starts the writers.
func newEgressAudit(log *audit.Log, logger *slog.Logger) *egressAudit {
	a := &egressAudit{log: log, logger: logger, queue: make(chan sandbox.EgressEvent, egressQueueLen)}
	for range egressAuditWorkers {
		a.wg.Add(1)
		go a.work()
	}
	return a
}

// Record implements sandbox.EgressConfig.Events.
func (a *egressAudit) Record(ev sandbox.EgressEvent) {
	select {
	case a.queue <- ev:
	default:
		if a.dropped.Add(1) == 1 {
			a.logger.Warn("egress audit queue full: dropping events", "sandbox", ev.Sandbox)
		}
	}
}

// Close writes what is queued and stops the writers. Call after the
// proxies have stopped (the sandbox manager's Close).
func (a *egressAudit) Close() {
	a.once.Do(func() { close(a.queue) })
	a.wg.Wait()
	if n := a.dropped.Load(); n > 0 {
		a.logger.Warn("egress audit events dropped", "count", n)
	}
}

func (a *egressAudit) work() {
	defer a.wg.Done()
	for ev := range a.queue {
		rec := egressRecord(ev)
		if n := a.dropped.Swap(0); n > 0 {
			rec.Details["dropped_before"] = n
			a.logger.Warn("egress audit events dropped", "count", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), egressAppendWait)
		if err := a.log.Append(ctx, rec); err != nil {
			a.logger.Error("audit append failed", "action", ActionEgressConnect, "target", ev.Sandbox, "err", err)
		}
		cancel()
	}
}

// egressRecord is the audit record of one egress decision: who (the
// sandbox's tenant), the sandbox, and the event's fields.
func egressRecord(ev sandbox.EgressEvent) audit.Event {
	outcome := audit.OutcomeOK
	if !ev.Allowed {
		outcome = "permission_denied"
	}
	d := map[string]any{
		"allowed":     ev.Allowed,
		"reason":      string(ev.Reason),
		"start":       ev.Start.UTC(),
		"duration_ms": ev.Duration.Milliseconds(),
		"bytes_up":    ev.BytesUp,
		"bytes_down":  ev.BytesDown,
	}
	put := func(k, v string) {
		if v != "" {
			d[k] = v
		}
	}
	put("protocol", string(ev.Protocol))
	put("method", ev.Method)
	put("host", ev.Host)
	if ev.Port != 0 {
		d["port"] = ev.Port
	}
	if ev.Addr.IsValid() {
		d["addr"] = ev.Addr.String()
	}
	put("class", string(ev.Class))
	put("rule", ev.Rule)
	put("credential", ev.Credential) // secret names, never values
	put("detail", ev.Detail)
	put("end", string(ev.End))
	return audit.Event{
		Time:     ev.Start.Add(ev.Duration).UTC(),
		TenantID: ev.Owner,
		Action:   ActionEgressConnect,
		Target:   ev.Sandbox,
		Outcome:  outcome,
		Details:  d,
	}
}
