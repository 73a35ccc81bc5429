package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

const auditUsage = `usage:
  airlock audit [--action A] [--target T] [--since T] [--until T] [--limit N | --tail N | --after SEQ]
                [--oldest-first] [--follow] [--json]
      List your tenant's audit records, newest first: the latest --limit
      (default 100; 0: all). --tail N shows the latest N oldest first, as
      tail does; --follow (-f) then keeps printing new records as they are
      written (it asks every second) until interrupted, after the latest
      --tail (default 10); with --json it prints one JSON object per line.
      --after SEQ pages forward from a record (oldest first), as does
      --oldest-first from the start. T is an RFC 3339 time
      (2026-01-02T15:04:05Z), a date (2026-01-02) or a duration ago (2h).
  airlock audit checkpoint [--public-key]
      Print the head of the audit chain signed by the daemon (admin), one JSON
      line: append it to a file kept off the host (>> checkpoints.jsonl). The
      daemon also appends one to its export file periodically. --public-key
      prints the daemon's public key (PEM) instead, to verify them offline.
  airlock audit verify [--checkpoint SEQ:HASH|FILE]... [--public-key PEM] [--offline] [--json]
      Verify the whole hash chain (admin) against checkpoints kept off the
      host: heads printed by an earlier verify (SEQ:HASH), or files of signed
      checkpoints (one JSON object per line, as audit checkpoint prints and the
      daemon exports; the latest 1024 are sent). A log truncated or wiped since a
      checkpoint, or rewritten, fails naming it; a forged checkpoint is refused.
      With --public-key, signed checkpoints must verify with that key first;
      --offline checks only that, without a daemon.
`

// maxAuditShown caps what one `airlock audit` prints, whatever --limit.
const maxAuditShown = 1_000_000

// auditPage is the most records one request asks for (the server's cap).
const auditPage = 1000

// followEvery is how often audit --follow asks for new records.
var followEvery = time.Second

func (c *cli) auditCmd(ctx context.Context, args []string) (int, error) {
	if len(args) > 0 && args[0] == "verify" {
		return c.auditVerify(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "checkpoint" {
		return c.auditCheckpoint(ctx, args[1:])
	}
	fs := c.flags("audit", auditUsage)
	var q client.AuditQuery
	var since, until string
	fs.StringVar(&q.Action, "action", "", "keep records of this `action` (e.g. sandbox.exec)")
	fs.StringVar(&q.Target, "target", "", "keep records of this `target` (e.g. a sandbox ID)")
	fs.StringVar(&since, "since", "", "keep records from this `time` on")
	fs.StringVar(&until, "until", "", "keep records before this `time`")
	fs.Uint64Var(&q.After, "after", 0, "show records after this `seq`, oldest first")
	limit := fs.Int("limit", 100, "show at most `N` records, the newest first (0: all)")
	tail := fs.Int("tail", -1, "show the latest `N` records, oldest first")
	oldest := fs.Bool("oldest-first", false, "show the oldest records first (from --after, or the start)")
	follow := fs.Bool("follow", false, "keep printing new records until interrupted")
	fs.BoolVar(follow, "f", false, "same as --follow")
	asJSON := fs.Bool("json", false, "print JSON (one object per line with --follow)")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(pos) != 0:
		return 2, usagef("unknown audit argument %q; want flags, verify or checkpoint", pos[0])
	case *limit < 0:
		return 2, usagef("--limit must not be negative")
	case set["tail"] && (*tail < 0 || *tail > maxAuditShown):
		return 2, usagef("--tail must be from 0 to %d", maxAuditShown)
	case set["tail"] && set["limit"]:
		return 2, usagef("give --limit (newest first) or --tail (the latest, oldest first), not both")
	case (set["after"] || *oldest) && (set["tail"] || *follow):
		return 2, usagef("--after and --oldest-first page from the start; --tail and --follow show the end")
	}
	now := time.Now()
	if q.Since, err = parseTimeArg(since, now); err != nil {
		return 2, usagef("--since: %v", err)
	}
	if q.Until, err = parseTimeArg(until, now); err != nil {
		return 2, usagef("--until: %v", err)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	want := *limit
	if want == 0 {
		want = maxAuditShown
	}
	lctx, cancel := context.WithTimeout(ctx, controlTimeout)
	var recs []client.AuditRecord
	switch {
	case set["after"] || *oldest:
		recs, _, err = auditFrom(lctx, cl, q, q.After, want)
	case set["tail"] || *follow:
		n := *tail
		if !set["tail"] {
			n = 10
		}
		recs, err = auditLast(lctx, cl, q, n)
	default:
		recs, err = auditLast(lctx, cl, q, want)
		slices.Reverse(recs)
	}
	cancel()
	if err != nil {
		return fail(err)
	}
	if *follow {
		return c.auditFollow(ctx, cl, q, recs, *asJSON)
	}
	if *asJSON {
		if recs == nil {
			recs = []client.AuditRecord{}
		}
		return fail(c.printJSON(recs))
	}
	rows := make([][]string, 0, len(recs))
	for _, r := range recs {
		rows = append(rows, auditRow(r))
	}
	return fail(c.table(auditHeader, rows))
}

// auditHeader heads the audit table; auditRow is one record's row.
var auditHeader = []string{"SEQ", "TIME", "ACTION", "TARGET", "OUTCOME", "KEY", "DETAILS"}

func auditRow(r client.AuditRecord) []string {
	return []string{strconv.FormatUint(r.Seq, 10), formatTime(r.Time), r.Action, dash(r.Target),
		r.Outcome, dash(r.KeyID), shorten(string(r.Details), 80)}
}

// auditFrom returns the first n records q selects after seq after,
// oldest first, and whether more may follow.
func auditFrom(ctx context.Context, cl *client.Client, q client.AuditQuery, after uint64, n int) ([]client.AuditRecord, bool, error) {
	var recs []client.AuditRecord
	q.After = after
	for len(recs) < n {
		q.Limit = min(n-len(recs), auditPage)
		page, next, err := cl.AuditList(ctx, q)
		if err != nil {
			return nil, false, err
		}
		recs = append(recs, page...)
		if next == 0 || len(page) == 0 {
			return recs, false, nil
		}
		q.After = next
	}
	return recs, true, nil
}

// auditLast returns the latest n records q selects, oldest first. The
// API pages forward only, so it searches for the seq after which exactly
// n records match: at least n match after lo, fewer than n after hi
// (found by doubling), and halving [lo, hi) ends with hi = lo+1. That
// takes a few dozen small requests for millions of records instead of
// reading them all.
func auditLast(ctx context.Context, cl *client.Client, q client.AuditQuery, n int) ([]client.AuditRecord, error) {
	if n == 0 {
		return nil, nil
	}
	recs, more, err := auditFrom(ctx, cl, q, 0, n+1)
	if err != nil || !more && len(recs) <= n {
		return recs, err
	}
	atLeast := func(after uint64) (bool, error) {
		page, _, err := auditFrom(ctx, cl, q, after, n)
		return len(page) == n, err
	}
	lo, hi := uint64(0), max(recs[len(recs)-1].Seq, 1)
	for {
		ok, err := atLeast(hi)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		lo = hi
		if hi >= maxAuditSeq/2 {
			hi = maxAuditSeq
			break
		}
		hi *= 2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := atLeast(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	recs, _, err = auditFrom(ctx, cl, q, lo, n)
	return recs, err
}

// maxAuditSeq is the largest seq the API takes in after.
const maxAuditSeq = 1 << 62

// auditFollow prints recs, then every followEvery the records written
// since, until ctx ends (an interrupt: exit 0). Rows have fixed widths,
// as they arrive in pieces; --json prints one object per line.
func (c *cli) auditFollow(ctx context.Context, cl *client.Client, q client.AuditQuery, recs []client.AuditRecord, asJSON bool) (int, error) {
	enc := json.NewEncoder(c.stdout)
	print := func(rs []client.AuditRecord) error {
		for _, r := range rs {
			var err error
			if asJSON {
				err = enc.Encode(r)
			} else {
				row := auditRow(r)
				_, err = fmt.Fprintf(c.stdout, "%-7s %-19s %-18s %-20s %-9s %-13s %s\n", row[0], row[1], row[2], row[3], row[4], row[5], row[6])
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if !asJSON {
		h := auditHeader
		fmt.Fprintf(c.stdout, "%-7s %-19s %-18s %-20s %-9s %-13s %s\n", h[0], h[1], h[2], h[3], h[4], h[5], h[6])
	}
	if err := print(recs); err != nil {
		return fail(err)
	}
	var last uint64
	if len(recs) > 0 {
		last = recs[len(recs)-1].Seq
	} else {
		// Nothing matched yet: start from the head, not the beginning.
		all, err := auditLast(ctx, cl, client.AuditQuery{}, 1)
		if err != nil {
			return fail(err)
		}
		if len(all) > 0 {
			last = all[0].Seq
		}
	}
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, controlTimeout)
		for {
			page, more, err := auditFrom(pctx, cl, q, last, auditPage)
			if err != nil {
				cancel()
				if ctx.Err() != nil {
					return 0, nil
				}
				return fail(err)
			}
			if err := print(page); err != nil {
				cancel()
				return fail(err)
			}
			if len(page) > 0 {
				last = page[len(page)-1].Seq
			}
			if !more {
				break
			}
		}
		cancel()
	}
}

// parseTimeArg reads an RFC 3339 time, a date (local midnight) or a
// duration before now; "" is the zero time.
func parseTimeArg(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation("2006-01-02", s, time.Local); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("want an RFC 3339 time, a date (2026-01-02) or a duration ago (2h), got %q", s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shorten cuts s to n runes for a table cell, on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// Caps on audit verify's checkpoints.
const (
	// maxCheckpointsRead caps the checkpoints read from files: more than
	// three years of a checkpoint every 5 minutes.
	maxCheckpointsRead = 1 << 20
	// maxCheckpointsSent is what the server takes in one request.
	maxCheckpointsSent = 1024
)

// headArg matches a SEQ:HASH checkpoint argument.
var headArg = regexp.MustCompile(`^[0-9]+:[0-9a-fA-F]{64}$`)

func (c *cli) auditCheckpoint(ctx context.Context, args []string) (int, error) {
	fs := c.flags("audit checkpoint", auditUsage)
	pubOnly := fs.Bool("public-key", false, "print the daemon's checkpoint public key (PEM) instead")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("audit checkpoint takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	res, err := cl.AuditCheckpoint(ctx)
	if err != nil {
		return fail(err)
	}
	if *pubOnly {
		_, err := io.WriteString(c.stdout, res.PublicKey)
		return fail(err)
	}
	line, err := json.Marshal(res.Checkpoint)
	if err != nil {
		return fail(err)
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", line)
	return fail(err)
}

// readCheckpointFile reads the signed checkpoints of a file (one JSON
// object per line).
func readCheckpointFile(path string, max int) ([]audit.Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cps, err := audit.ReadCheckpoints(f, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", path, strings.TrimSuffix(err.Error(), ": "+errdefs.ErrInvalidArgument.Error()))
	}
	return cps, nil
}

func (c *cli) auditVerify(ctx context.Context, args []string) (int, error) {
	fs := c.flags("audit verify", auditUsage)
	var cpArgs listFlag
	fs.Var(&cpArgs, "checkpoint", "a head saved earlier, `SEQ:HASH`, or a FILE of signed checkpoints (repeatable)")
	pubPath := fs.String("public-key", "", "verify signed checkpoints with the public key in this PEM `file` first")
	offline := fs.Bool("offline", false, "only verify the checkpoints' signatures (needs --public-key), without a daemon")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("audit verify takes no arguments, got %q", pos[0])
	}
	if *offline && *pubPath == "" {
		return 2, usagef("--offline needs --public-key: the key to verify the checkpoints with")
	}
	var cps []audit.Checkpoint
	signed := 0
	for _, arg := range cpArgs {
		if headArg.MatchString(arg) {
			seq, hash, _ := strings.Cut(arg, ":")
			n, err := strconv.ParseUint(seq, 10, 64)
			if err != nil || n == 0 {
				return 2, usagef("--checkpoint %q: want SEQ:HASH with SEQ of at least 1, or a file", arg)
			}
			cps = append(cps, audit.Checkpoint{Seq: n, Hash: strings.ToLower(hash)})
			continue
		}
		read, err := readCheckpointFile(arg, maxCheckpointsRead-len(cps))
		if errors.Is(err, os.ErrNotExist) && strings.Contains(arg, ":") {
			return 2, usagef("--checkpoint %q: want SEQ:HASH, e.g. 42:%s, or a file", arg, strings.Repeat("0", 64))
		}
		if err != nil {
			return 2, usagef("--checkpoint: %v", err)
		}
		cps = append(cps, read...)
		signed += len(read)
	}
	if *pubPath != "" {
		text, err := readInput(*pubPath, nil, maxKeyFileBytes)
		if err != nil {
			return 2, usagef("--public-key: %v", err)
		}
		pub, err := audit.ParsePublicKey(text)
		if err != nil {
			return 2, usagef("--public-key %s: %s", *pubPath, strings.TrimSuffix(err.Error(), ": "+errdefs.ErrInvalidArgument.Error()))
		}
		for _, cp := range cps {
			if !cp.Signed() {
				continue
			}
			if err := pub.Verify(cp); err != nil {
				msg := strings.Replace(err.Error(), "this daemon's key", "the key of "+*pubPath, 1)
				return 1, &cliError{msg: "refused: " + msg, err: err}
			}
		}
	}
	if *offline {
		if signed == 0 {
			return 2, usagef("--offline needs signed checkpoints: --checkpoint FILE")
		}
		last := latest(cps)
		fmt.Fprintf(c.stdout, "ok: %d signed checkpoints verify with %s; the latest: seq %d, hash %s, %s\n",
			signed, *pubPath, last.Seq, last.Hash, last.Time.UTC().Format(time.RFC3339))
		return 0, nil
	}
	// The latest checkpoint catches whatever an earlier one would: a
	// rewrite of any record before it changes its hash.
	slices.SortStableFunc(cps, func(a, b audit.Checkpoint) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(cps) > maxCheckpointsSent {
		fmt.Fprintf(c.stderr, "checking the latest %d of %d checkpoints\n", maxCheckpointsSent, len(cps))
		cps = cps[len(cps)-maxCheckpointsSent:]
	}
	send := make([]client.AuditCheckpoint, len(cps))
	for i, cp := range cps {
		send[i] = client.AuditCheckpoint{Seq: cp.Seq, Hash: cp.Hash, Time: cp.Time, KeyID: cp.KeyID, Signature: cp.Signature}
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	rep, err := cl.AuditVerifyCheckpoints(ctx, send...)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		if err := c.printJSON(rep); err != nil {
			return fail(err)
		}
	} else if rep.OK {
		fmt.Fprintf(c.stdout, "ok: %d records verified\nhead: %d:%s\n", rep.Records, rep.Head.Seq, rep.Head.Hash)
		if len(cps) > 0 {
			fmt.Fprintf(c.stdout, "%d checkpoints match (the latest at seq %d)\n", len(cps), latest(cps).Seq)
		}
	} else {
		fmt.Fprintf(c.stdout, "BROKEN: record %d: %s\n%d records checked; head: %d:%s\n",
			rep.FirstBadSeq, rep.Reason, rep.Records, rep.Head.Seq, rep.Head.Hash)
	}
	if !rep.OK {
		return 1, &cliError{msg: fmt.Sprintf("the audit log does not verify (first bad record: %d)", rep.FirstBadSeq)}
	}
	return 0, nil
}

// latest returns the checkpoint of the highest seq (the last of them).
func latest(cps []audit.Checkpoint) audit.Checkpoint {
	var l audit.Checkpoint
	for _, cp := range cps {
		if cp.Seq >= l.Seq {
			l = cp
		}
	}
	return l
}
