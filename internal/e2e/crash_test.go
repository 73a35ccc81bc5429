package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// okOp is a mutation the daemon answered with a 2xx: what the audit log
// must hold (action, target and the detail that tells it apart).
type okOp struct {
	action, target, detail string
}

// auditKey is how an audit record (an intent or an outcome) is matched
// to an okOp.
func auditKey(r store.AuditRecord) okOp {
	var det map[string]any
	_ = json.Unmarshal(r.Details, &det)
	k := okOp{action: r.Action, target: r.Target}
	switch r.Action {
	case "sandbox.exec":
		k.detail, _ = det["command"].(string)
	case "file.write", "file.delete":
		k.detail, _ = det["path"].(string)
	}
	return k
}

// checkIntents checks how the intents and outcomes of recs fit together:
// every outcome that names an intent names an earlier intent record of
// the same action, tenant and key (and target, once the intent had one),
// and no intent is named twice; every successful outcome names an
// intent (nothing succeeds unannounced). It returns the intents that no
// outcome names: actions started and never answered.
func checkIntents(t *testing.T, recs []store.AuditRecord) []store.AuditRecord {
	t.Helper()
	intents := map[uint64]store.AuditRecord{}
	named := map[uint64]bool{}
	for _, r := range recs {
		phase, intent := audit.PhaseOf(r.Outcome, r.Details)
		switch {
		case phase == audit.PhaseIntent:
			intents[r.Seq] = r
		case intent == 0 && r.Outcome == audit.OutcomeOK && r.Action != "audit.verify":
			t.Errorf("record %d: %s %s succeeded without an intent record", r.Seq, r.Action, r.Target)
		case intent > 0:
			in, ok := intents[intent]
			switch {
			case !ok:
				t.Errorf("record %d (%s %s) names intent %d, which is not an earlier intent", r.Seq, r.Action, r.Outcome, intent)
			case named[intent]:
				t.Errorf("intent %d has two outcomes (the second is record %d)", intent, r.Seq)
			case in.Action != r.Action || in.TenantID != r.TenantID || in.KeyID != r.KeyID ||
				(in.Target != "" && in.Target != r.Target):
				t.Errorf("outcome %d (%s %s by %s) does not match its intent %d (%s %s by %s)",
					r.Seq, r.Action, r.Target, r.KeyID, in.Seq, in.Action, in.Target, in.KeyID)
			}
			named[intent] = true
		}
	}
	var open []store.AuditRecord
	for _, r := range recs {
		if _, ok := intents[r.Seq]; ok && !named[r.Seq] {
			open = append(open, r)
		}
	}
	return open
}

// crashWorker is one client of the burst; it keeps to its own sandboxes.
type crashWorker struct {
	n     int
	rng   *mrand.Rand
	sbs   []string
	files map[string][]string // sandbox → paths written and not deleted
	ok    []okOp
	errs  []string // failures before the kill
	// inflight is the request the kill interrupted, if any.
	inflight okOp
}

// TestCrashSafety runs a burst of mutations from 8 clients, kills the
// daemon with SIGKILL in the middle of it, and checks that the audit
// chain verifies; that every mutation answered with a 2xx has its intent
// and its successful outcome; that every action left without an outcome
// is an intent of a request that was in flight at the kill (an action is
// never silently missing, and nothing was done without an intent); and
// that the next daemon knows every sandbox whose create was answered
// (with the files written to it) and none that was deleted.
func TestCrashSafety(t *testing.T) {
	e := newEnv(t, "--rate-limit", "100000", "--rate-burst", "100000")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	const workers = 8
	ws := make([]*crashWorker, workers)
	seed := uint64(time.Now().UnixNano())
	for i := range ws {
		w := &crashWorker{n: i, rng: mrand.New(mrand.NewPCG(uint64(i), seed)), files: map[string][]string{}}
		ws[i] = w
		// One sandbox each to start with, so that the burst mixes every
		// kind of mutation from its first moment.
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"worker": fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		w.sbs = []string{sb.ID}
		w.ok = []okOp{{action: "sandbox.create", target: sb.ID}}
	}

	// The kill comes 1.2 to 2 s into the burst, once at least 60
	// mutations were answered (bounded, on a slow host).
	var killing atomic.Bool
	var answeredN atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, w := range ws {
		wg.Go(func() { w.run(ctx, d, &killing, &answeredN, start.Add(30*time.Second)) })
	}
	killAfter := 1200*time.Millisecond + time.Duration(mrand.Int64N(int64(800*time.Millisecond)))
	time.Sleep(killAfter)
	waitFor(15*time.Second, func() bool { return answeredN.Load() >= 60 })
	killAfter = time.Since(start)
	killing.Store(true)
	d.Kill()
	wg.Wait()

	var answered []okOp
	// maybeDeleted: a delete was in flight at the kill.
	created, deleted, maybeDeleted := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, w := range ws {
		for _, msg := range w.errs {
			t.Errorf("worker %d, before the kill: %s", w.n, msg)
		}
		answered = append(answered, w.ok...)
		for _, op := range w.ok {
			switch op.action {
			case "sandbox.create":
				created[op.target] = true
			case "sandbox.delete":
				deleted[op.target] = true
			}
		}
		if w.inflight.action == "sandbox.delete" {
			maybeDeleted[w.inflight.target] = true
		}
	}
	byAction := map[string]int{}
	for _, op := range answered {
		byAction[op.action]++
	}
	t.Logf("killed the daemon %v into the burst: %d mutations answered 2xx %v, %d deletes in flight",
		killAfter.Round(time.Millisecond), len(answered), byAction, len(maybeDeleted))
	if byAction["sandbox.exec"] == 0 || byAction["file.write"] == 0 {
		t.Fatalf("the burst did too little before the kill to test anything: %v", byAction)
	}

	// The kill of the daemon must not take any sandbox with it.
	for id := range created {
		if !deleted[id] && !maybeDeleted[id] && len(cgroupProcs(id)) == 0 {
			t.Errorf("sandbox %s (created, not deleted) has no process left after the daemon was killed; agent log:\n%s",
				id, tail(filepath.Join(e.dir, "sandboxes", id, "agent.log"), 30))
		}
	}

	// Every answered mutation is in the verified chain: its outcome,
	// which names its intent.
	recs := verifyAudit(t, e)
	open := checkIntents(t, recs)
	have := map[okOp]int{}
	createIntents := 0
	for _, r := range recs {
		phase, intent := audit.PhaseOf(r.Outcome, r.Details)
		if r.Outcome == audit.OutcomeOK && intent > 0 {
			have[auditKey(r)]++
		}
		if phase == audit.PhaseIntent && r.Action == "sandbox.create" {
			createIntents++
		}
	}
	var missing []string
	for _, op := range answered {
		if have[op] == 0 {
			missing = append(missing, fmt.Sprintf("%s %s %s", op.action, op.target, op.detail))
			continue
		}
		have[op]--
	}
	if len(missing) > 0 {
		t.Errorf("%d mutations answered 2xx have no audit record, e.g. %v", len(missing), missing[:min(len(missing), 10)])
	}
	extra := 0
	for _, n := range have {
		extra += n
	}
	// At most one request per worker was in flight at the kill: its
	// record may exist without an answer.
	if extra > workers {
		t.Errorf("%d successful audit records match no answered request; at most %d were in flight", extra, workers)
	}
	t.Logf("audit: %d records verified, %d answered mutations matched, %d records of requests in flight at the kill, %d open intents",
		len(recs), len(answered), extra, len(open))

	// The actions left without an outcome are intents of the requests in
	// flight at the kill: at most one per worker, each matching one.
	inflight := map[okOp]int{}
	for _, w := range ws {
		if w.inflight.action != "" {
			k := w.inflight
			if k.action == "sandbox.create" {
				k.target = "" // its intent has no target yet
			}
			inflight[k]++
		}
	}
	if len(open) > workers {
		t.Errorf("%d intents have no outcome; at most %d requests were in flight", len(open), workers)
	}
	for _, r := range open {
		k := auditKey(r)
		if inflight[k] == 0 {
			t.Errorf("open intent %d (%s %s %s) matches no request in flight at the kill", r.Seq, k.action, k.target, k.detail)
			continue
		}
		inflight[k]--
	}
	// Nothing was done without an intent: every sandbox the data dir
	// ever held was announced by a create intent, and a file written by
	// a request in flight at the kill exists only if announced.
	if n := len(e.seenIDs()); n > createIntents {
		t.Errorf("%d sandboxes existed, but only %d creates were announced by an intent", n, createIntents)
	}
	intentKeys := map[okOp]bool{}
	for _, r := range recs {
		if phase, _ := audit.PhaseOf(r.Outcome, r.Details); phase == audit.PhaseIntent {
			intentKeys[auditKey(r)] = true
		}
	}
	var inflightWrites []okOp
	for _, w := range ws {
		if w.inflight.action == "file.write" {
			inflightWrites = append(inflightWrites, w.inflight)
		}
	}

	// The next daemon knows every answered sandbox and its files.
	d = e.start()
	t.Logf("restart after SIGKILL: serving after %v", d.StartedIn.Round(time.Millisecond))
	sbs := waitRecovered(t, d, time.Minute)
	listed := map[string]client.State{}
	unaudited := 0
	for _, sb := range sbs {
		track(sb.ID)
		listed[sb.ID] = sb.State
		// An ended one (a create the restart undid, listed as stopped
		// for the retention period) does not exist any more.
		if sb.StoppedAt.IsZero() && have[okOp{action: "sandbox.create", target: sb.ID}] == 0 && !created[sb.ID] {
			unaudited++
		}
	}
	for id := range created {
		st, ok := listed[id]
		switch {
		case deleted[id] && ok && st != client.StateStopped:
			t.Errorf("sandbox %s was deleted (204) but is %s after the restart", id, st)
		case !deleted[id] && !maybeDeleted[id] && (!ok || st != client.StateRunning):
			t.Errorf("sandbox %s was created (201) but is %q after the restart (listed: %v); its log:\n%s", id, st, ok, e.logLines(id))
		}
	}
	// What does not run after the restart (deleted, or half-made or
	// half-destroyed at the kill) has no cgroups and no state left.
	for _, id := range e.seenIDs() {
		if listed[id] == client.StateRunning {
			continue
		}
		if cg := sandboxCgroups(id); len(cg) > 0 {
			t.Errorf("sandbox %s is not running after the restart but its cgroups remain: %v", id, cg)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sandbox %s is not running after the restart but its state dir remains (%v)", id, err)
		}
	}
	// A create in flight at the kill was never confirmed: the restart
	// removes its sandbox (and records that) rather than keep one that
	// no successful create record names.
	if unaudited > 0 {
		t.Errorf("%d sandboxes exist after the restart without a successful create record", unaudited)
	}
	for _, op := range inflightWrites {
		if deleted[op.target] || maybeDeleted[op.target] || listed[op.target] != client.StateRunning {
			continue
		}
		rc, err := d.C.ReadFile(ctx, op.target, op.detail)
		if err == nil {
			rc.Close()
			if !intentKeys[op] {
				t.Errorf("file %s in %s exists after the restart, but its write (in flight at the kill) has no intent", op.detail, op.target)
			}
		}
	}
	checked := 0
	for _, w := range ws {
		for id, paths := range w.files {
			if deleted[id] || maybeDeleted[id] || len(paths) == 0 || checked >= 12 {
				continue
			}
			p := paths[len(paths)-1]
			if w.inflight == (okOp{action: "file.delete", target: id, detail: p}) {
				// Its delete (of the oldest path: this is the only one)
				// was in flight at the kill: it may be gone, rightly.
				continue
			}
			if got := string(readAll(t, d, id, p)); got != "content of "+p {
				t.Errorf("file %s in %s = %q after the restart", p, id, got)
			}
			res := mustExec(t, d, id, client.ExecRequest{Cmd: []string{"true"}})
			if res.Status != "success" {
				t.Errorf("exec in %s after the restart: %+v", id, res)
			}
			checked++
		}
	}

	// The chain goes on after the crash: delete everything, stop, verify.
	for _, sb := range sbs {
		if sb.State != client.StateStopped {
			if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
				t.Errorf("delete %s: %v", sb.ID, err)
			}
		}
	}
	d.Stop()
	after := verifyAudit(t, e)
	if len(after) <= len(recs) {
		t.Errorf("audit log did not grow after the restart: %d then %d records", len(recs), len(after))
	}
	// Every sandbox that ever existed and did not come back running has
	// a record of its end: the delete that was answered, or the daemon's
	// sandbox.end (a create or delete cut by the kill).
	ended := map[string]bool{}
	for _, r := range after {
		if r.Outcome == audit.OutcomeOK && (r.Action == "sandbox.delete" || r.Action == "sandbox.end") {
			ended[r.Target] = true
		}
	}
	for _, id := range e.seenIDs() {
		if listed[id] != client.StateRunning && !ended[id] {
			t.Errorf("sandbox %s existed, is gone after the restart, and no record says how it ended", id)
		}
	}
}

// run performs random mutations until the kill or the deadline.
func (w *crashWorker) run(ctx context.Context, d *daemon, killing *atomic.Bool, answered *atomic.Int64, deadline time.Time) {
	for seq := 0; !killing.Load() && time.Now().Before(deadline); seq++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		op, err := w.step(rctx, d, seq)
		cancel()
		switch {
		case err == nil:
			if op.action != "" {
				w.ok = append(w.ok, op)
				answered.Add(1)
			}
		case killing.Load():
			w.inflight = op
			return
		default:
			w.errs = append(w.errs, fmt.Sprintf("%s %s %s: %v", op.action, op.target, op.detail, err))
		}
	}
}

// step performs one mutation and returns it; op.action is empty when
// there was nothing to do.
func (w *crashWorker) step(ctx context.Context, d *daemon, seq int) (okOp, error) {
	r := w.rng.IntN(100)
	if len(w.sbs) == 0 || r < 12 {
		op := okOp{action: "sandbox.create"}
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"worker": fmt.Sprint(w.n)}})
		if err != nil {
			return op, err
		}
		track(sb.ID)
		op.target = sb.ID
		w.sbs = append(w.sbs, sb.ID)
		return op, nil
	}
	id := w.sbs[w.rng.IntN(len(w.sbs))]
	switch {
	case r < 50:
		op := okOp{action: "sandbox.exec", target: id, detail: fmt.Sprintf("echo w%d-%d", w.n, seq)}
		res, err := d.C.Exec(ctx, id, client.ExecRequest{Command: op.detail})
		if err == nil && (res.Status != "success" || strings.TrimSpace(string(res.Stdout)) != op.detail[5:]) {
			err = fmt.Errorf("result %+v", res)
		}
		return op, err
	case r < 80:
		op := okOp{action: "file.write", target: id, detail: fmt.Sprintf("f/w%d-%d.txt", w.n, seq)}
		if _, err := d.C.WriteFile(ctx, id, op.detail, strings.NewReader("content of "+op.detail)); err != nil {
			return op, err
		}
		w.files[id] = append(w.files[id], op.detail)
		return op, nil
	case r < 90:
		paths := w.files[id]
		if len(paths) == 0 {
			return okOp{}, nil
		}
		op := okOp{action: "file.delete", target: id, detail: paths[0]}
		if err := d.C.RemoveFile(ctx, id, op.detail, false); err != nil {
			return op, err
		}
		w.files[id] = paths[1:]
		return op, nil
	default:
		if len(w.sbs) < 2 {
			return okOp{}, nil
		}
		op := okOp{action: "sandbox.delete", target: id}
		if err := d.C.DeleteSandbox(ctx, id); err != nil {
			return op, err
		}
		w.sbs = removeString(w.sbs, id)
		delete(w.files, id)
		return op, nil
	}
}

func removeString(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
