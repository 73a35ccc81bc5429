package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// ActionToolCall is the audit action of one call of a tool through the
// gateway: outcome "ok", "denied" (a stage refused it) or "error" (the
// upstream failed).
const ActionToolCall = "tool.call"

// toolAppendWait bounds writing one call's record.
const toolAppendWait = 10 * time.Second

// toolAudit writes the record of every tool call to the audit log, on
// the calling goroutine: a call's answer goes back to the sandbox only
// once its record is written (or failed to be, which is logged), so no
// call goes unrecorded by a full queue.
type toolAudit struct {
	log    *audit.Log
	logger *slog.Logger
}

// Record implements gateway.Config.Record.
func (a toolAudit) Record(r gateway.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), toolAppendWait)
	defer cancel()
	if err := a.log.Append(ctx, toolEvent(r)); err != nil {
		a.logger.Error("recording a tool call", "sandbox", r.Caller.Sandbox, "tool", r.Tool, "err", err)
	}
}

// toolEvent is the audit event of a call's record.
func toolEvent(r gateway.Record) audit.Event {
	d := map[string]any{
		"tool":        r.Tool,
		"start":       r.Start.UTC(),
		"duration_ms": r.Duration.Milliseconds(),
	}
	if len(r.Args) > 0 {
		d["args"] = json.RawMessage(r.Args)
	}
	put := func(k, v string) {
		if v != "" {
			d[k] = v
		}
	}
	put("stage", r.Stage)
	put("reason", r.Reason)
	if r.DryRun {
		d["dry_run"] = true
	}
	if r.Status != 0 {
		d["status"] = r.Status
	}
	if r.OutputBytes != 0 {
		d["output_bytes"] = r.OutputBytes
	}
	return audit.Event{
		Time:     r.Start.Add(r.Duration).UTC(),
		TenantID: r.Caller.Tenant,
		KeyID:    r.Caller.KeyID,
		Action:   ActionToolCall,
		Target:   r.Caller.Sandbox,
		Outcome:  r.Outcome,
		Details:  d,
	}
}

// runToolCalls is the gateway as the run and tool-call routes see it:
// its observers and its relay of caller-executed tools.
type runToolCalls struct {
	*gateway.Gateway
	*gateway.Relay
}

var _ api.ToolCalls = runToolCalls{}
