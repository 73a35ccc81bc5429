package audit

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Report is the outcome of Verify.
type Report struct {
	// OK is true when every record up to the head anchor checked out.
	OK bool `json:"ok"`
	// Checked counts the records whose hashes were checked.
	Checked uint64 `json:"checked"`
	// Head is the anchor the walk verified up to: keep it off the host
	// and pass it to a later Verify as a checkpoint.
	Head store.AuditHead `json:"head"`
	// BadSeq is the first sequence number found bad (0 when OK): the
	// edited, missing or misplaced record.
	BadSeq uint64 `json:"bad_seq,omitempty"`
	// Problem says what is wrong with BadSeq.
	Problem string `json:"problem,omitempty"`
	// OpenIntents counts the intent records (up to the head) that no
	// outcome record names: actions in flight while Verify ran, or cut
	// short by a crash of the daemon. They are not chain errors.
	OpenIntents uint64 `json:"open_intents"`
	// Open lists the oldest open intents, at most MaxReportedOpen.
	Open []OpenIntent `json:"open,omitempty"`
}

// OpenIntent is an intent record without an outcome.
type OpenIntent struct {
	Seq      uint64 `json:"seq"`
	TenantID string `json:"tenant_id,omitempty"`
	Action   string `json:"action"`
	Target   string `json:"target,omitempty"`
}

// MaxReportedOpen caps Report.Open.
const MaxReportedOpen = 100

// maxTrackedOpen bounds the open intents Verify remembers while it walks
// the chain; intents beyond it are counted but cannot be matched.
const maxTrackedOpen = 1 << 16

// Err returns nil for a good chain, otherwise an error wrapping
// ErrFailedPrecondition that names the first bad record.
func (r Report) Err() error {
	if r.OK {
		return nil
	}
	return fmt.Errorf("audit chain broken at seq %d: %s: %w", r.BadSeq, r.Problem, errdefs.ErrFailedPrecondition)
}

// verifyPage is how many records Verify reads at a time.
const verifyPage = store.MaxListLimit

// Verify walks the chain in st from Seq 1 up to the head anchor read at
// the start (records appended meanwhile are not checked) and reports the
// first bad record. Each checkpoint, a Seq and Hash saved earlier, must
// match the record now at that Seq; checkpoints beyond the head are
// reported as a missing tail. The error is for failures to read the store;
// a broken chain is reported in the Report.
func Verify(ctx context.Context, st store.AuditStore, checkpoints ...store.AuditHead) (Report, error) {
	cps := make([]Checkpoint, len(checkpoints))
	for i, h := range checkpoints {
		cps[i] = Checkpoint{Seq: h.Seq, Hash: h.Hash}
	}
	return VerifyCheckpoints(ctx, st, cps...)
}

// VerifyCheckpoints is Verify against checkpoints, signed or not, which
// the report names when the chain does not match one: a record at a
// checkpoint's Seq with another hash (a rewritten chain), or a log that
// ends before a checkpoint's Seq (truncated, its head anchor moved back,
// or wiped). It does not check signatures: see PublicKey.Verify.
func VerifyCheckpoints(ctx context.Context, st store.AuditStore, checkpoints ...Checkpoint) (Report, error) {
	head, err := st.AuditHead(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("audit verify: %w", err)
	}
	rep := Report{Head: head}
	bad := func(seq uint64, format string, args ...any) (Report, error) {
		rep.BadSeq, rep.Problem = seq, fmt.Sprintf(format, args...)
		return rep, nil
	}
	cps := slices.Clone(checkpoints)
	slices.SortStableFunc(cps, func(a, b Checkpoint) int { return cmp.Compare(a.Seq, b.Seq) })
	for len(cps) > 0 && cps[0].Seq == 0 {
		cps = cps[1:] // the empty log is a prefix of every log
	}

	open := map[uint64]OpenIntent{}
	var untracked uint64
	prev := store.AuditHead{Hash: store.GenesisHash}
	for prev.Seq < head.Seq {
		page, err := st.ListAudit(ctx, store.AuditQuery{AfterSeq: prev.Seq, Limit: verifyPage})
		if err != nil {
			return Report{}, fmt.Errorf("audit verify: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			if r.Seq > head.Seq {
				break
			}
			want := prev.Seq + 1
			if r.Seq != want {
				return bad(want, "record missing (next stored record is seq %d)", r.Seq)
			}
			if r.PrevHash != prev.Hash {
				return bad(r.Seq, "prev_hash does not match the hash of record %d", prev.Seq)
			}
			h, err := Hash(r)
			if err != nil || h != r.Hash {
				return bad(r.Seq, "record content does not match its hash")
			}
			for len(cps) > 0 && cps[0].Seq == r.Seq {
				if cps[0].Hash != r.Hash {
					return bad(r.Seq, "record differs from %s: the chain was rewritten", cps[0])
				}
				cps = cps[1:]
			}
			rep.Checked++
			prev = store.AuditHead{Seq: r.Seq, Hash: r.Hash}
			switch phase, intent := PhaseOf(r.Outcome, r.Details); {
			case phase == PhaseIntent && len(open) < maxTrackedOpen:
				open[r.Seq] = OpenIntent{Seq: r.Seq, TenantID: r.TenantID, Action: r.Action, Target: r.Target}
			case phase == PhaseIntent:
				untracked++
			case intent > 0:
				delete(open, intent)
			}
		}
		if len(page) < verifyPage {
			break
		}
	}
	if prev.Seq < head.Seq {
		return bad(prev.Seq+1, "records %d to %d are missing (head anchor is at seq %d)", prev.Seq+1, head.Seq, head.Seq)
	}
	if prev.Hash != head.Hash {
		return bad(head.Seq, "head anchor hash does not match record %d", head.Seq)
	}
	if len(cps) > 0 {
		return bad(head.Seq+1, "log ends at seq %d but %s exists: records were removed (the log was truncated or wiped)", head.Seq, cps[0])
	}
	// Records past the anchor were not written by the log (the anchor
	// moves in the same transaction as every append).
	extra, err := st.ListAudit(ctx, store.AuditQuery{AfterSeq: head.Seq, Limit: 1})
	if err != nil {
		return Report{}, fmt.Errorf("audit verify: %w", err)
	}
	if len(extra) > 0 {
		if h, _ := st.AuditHead(ctx); h == head { // not a concurrent append
			return bad(extra[0].Seq, "record beyond the head anchor (seq %d)", head.Seq)
		}
	}
	rep.OK = true
	rep.OpenIntents = uint64(len(open)) + untracked
	for _, o := range open {
		rep.Open = append(rep.Open, o)
	}
	slices.SortFunc(rep.Open, func(a, b OpenIntent) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(rep.Open) > MaxReportedOpen {
		rep.Open = rep.Open[:MaxReportedOpen]
	}
	return rep, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
