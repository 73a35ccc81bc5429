package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// statsStreamCost is what a stats stream holds in the daemon while in
// flight: one encoded sample at a time and its goroutine.
var statsStreamCost = requestOverhead

// statsQuery is the query of GET /v1/sandboxes/{id}/stats.
type statsQuery struct {
	stream   bool
	interval time.Duration
}

// parseStatsQuery validates the query: stream (0, 1, false, true) and
// interval_ms (wire.StatsIntervalMinMS to wire.StatsIntervalMaxMS); any
// other parameter is refused.
func parseStatsQuery(r *http.Request) (statsQuery, error) {
	q := statsQuery{interval: wire.StatsIntervalDefaultMS * time.Millisecond}
	for k, vs := range r.URL.Query() {
		if len(vs) != 1 {
			return q, invalidf("query parameter %q is given %d times; give it once", auditTarget(k), len(vs))
		}
		v := vs[0]
		switch k {
		case "stream":
			switch v {
			case "1", "true":
				q.stream = true
			case "0", "false":
			default:
				return q, invalidf("stream %q: want 1, true, 0 or false", auditTarget(v))
			}
		case "interval_ms":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < wire.StatsIntervalMinMS || n > wire.StatsIntervalMaxMS {
				return q, invalidf("interval_ms %q: want a whole number of milliseconds from %d to %d", auditTarget(v), wire.StatsIntervalMinMS, wire.StatsIntervalMaxMS)
			}
			q.interval = time.Duration(n) * time.Millisecond
		default:
			return q, invalidf("unknown query parameter %q: this route takes stream and interval_ms", auditTarget(k))
		}
	}
	return q, nil
}

// statsReading is one reading of a sandbox's counters.
type statsReading struct {
	at time.Time
	st runtime.Stats
}

// readStats reads sb's counters.
func (h *Handler) readStats(ctx context.Context, sb sandbox.Sandbox) (statsReading, error) {
	st, err := h.mgr.Stats(ctx, sb.ID)
	if err != nil {
		return statsReading{}, err
	}
	return statsReading{at: time.Now(), st: st}, nil
}

// getStats serves GET /v1/sandboxes/{id}/stats: one sample (two readings
// an interval apart, for the CPU rate), or with stream=1 a sample every
// interval as NDJSON lines until the client goes or the sandbox ends.
// Both are admitted like the other long requests (see inflight): a
// single sample waits up to an interval (60 s at most), so it counts
// against the caps per sandbox and per key while it does, as a stream
// does. Reading stats is not activity.
func (h *Handler) getStats(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	q, err := parseStatsQuery(c.r)
	if err != nil {
		return err
	}
	release, err := c.admit(sb.ID, statsStreamCost)
	if err != nil {
		return err
	}
	defer release()
	ctx := c.r.Context()
	prev, err := h.readStats(ctx, sb)
	if err != nil {
		return err
	}
	if !q.stream {
		if err := sleepCtx(ctx, q.interval); err != nil {
			return err
		}
		cur, err := h.readStats(ctx, sb)
		if err != nil {
			return err
		}
		return c.json(http.StatusOK, h.statsSample(sb, prev, cur))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	if err := nw.start(); err != nil {
		return nil
	}
	tick := time.NewTicker(q.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			nw.abortIfFailed()
			return nil
		case <-tick.C:
		}
		if now, err := h.mgr.Get(sb.ID); err == nil {
			sb = now // its network may have changed
		}
		cur, err := h.readStats(ctx, sb)
		if err != nil {
			// The sandbox ended (or went): so does the stream. Any
			// other failure ends it too, logged: its lines are
			// samples only.
			if !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrNotFound) && ctx.Err() == nil {
				h.log.Warn("stats stream", "sandbox", sb.ID, "err", err)
			}
			nw.abortIfFailed()
			return nil
		}
		if nw.writeLine(h.statsSample(sb, prev, cur)) != nil {
			nw.abortIfFailed()
			return nil
		}
		prev = cur
	}
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// statsSample is the wire form of the sample between two readings of sb:
// the counters of cur, the CPU rate over the time between them, the caps
// and the network counters (the sandbox's own interface when it has
// one, else its egress proxy's, else none and why).
func (h *Handler) statsSample(sb sandbox.Sandbox, prev, cur statsReading) wire.SandboxStats {
	st := cur.st
	out := wire.SandboxStats{
		SandboxID:  sb.ID,
		Time:       cur.at.UTC(),
		IntervalMS: cur.at.Sub(prev.at).Milliseconds(),
		CPU: wire.StatsCPU{
			UsageS: st.CPUTime.Seconds(),
			Rate:   cpuRate(prev, cur),
			Limit:  sb.Limits.CPUs,
		},
		Memory: wire.StatsMemory{CurrentBytes: st.MemoryBytes, PeakBytes: st.PeakMemoryBytes, LimitBytes: st.MemoryLimitBytes, OOMKills: st.OOMKills},
		Pids:   wire.StatsPids{Current: st.Pids, Limit: st.PidsLimit},
		Disk:   wire.StatsDisk{UsedBytes: st.DiskUsedBytes, LimitBytes: st.DiskLimitBytes},
	}
	if out.Disk.LimitBytes == 0 && sb.Limits.DiskBytes > 0 {
		out.Disk.LimitBytes = uint64(sb.Limits.DiskBytes)
	}
	switch ns, ok, err := h.mgr.NetworkStats(sb.ID); {
	case st.Net != nil:
		out.Network = &wire.StatsNetwork{Source: wire.NetSourceInterface, RxBytes: st.Net.RxBytes, TxBytes: st.Net.TxBytes}
	case err == nil && ok && sb.Network.Mode == sandbox.NetworkAllowlist:
		out.Network = &wire.StatsNetwork{Source: wire.NetSourceProxy, RxBytes: uint64(max(ns.BytesDown, 0)), TxBytes: uint64(max(ns.BytesUp, 0))}
	case sb.Network.Mode == sandbox.NetworkNone || sb.Network.Mode == "":
		out.NetworkAbsent = "the sandbox has no network (mode none): loopback only"
	default:
		out.NetworkAbsent = "no network counters for this sandbox now (mode " + sb.Network.Mode + ")"
	}
	return out
}

// cpuRate is the CPUs used between two readings: CPU time over wall time.
func cpuRate(prev, cur statsReading) float64 {
	wall := cur.at.Sub(prev.at)
	if wall <= 0 || cur.st.CPUTime < prev.st.CPUTime {
		return 0
	}
	return (cur.st.CPUTime - prev.st.CPUTime).Seconds() / wall.Seconds()
}
