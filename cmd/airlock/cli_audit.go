package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const auditUsage = `usage:
  airlock audit [--action A] [--target T] [--since T] [--until T] [--after SEQ] [--limit N] [--json]
      List your tenant's audit records, oldest first. T is an RFC 3339 time
      (2026-01-02T15:04:05Z), a date (2026-01-02) or a duration ago (2h).
  airlock audit verify [--checkpoint SEQ:HASH]... [--json]
      Verify the whole hash chain (admin). Save the printed head off the host
      and pass it later as a checkpoint to detect a rewritten chain.
`

// maxAuditShown caps what one `airlock audit` prints, whatever --limit.
const maxAuditShown = 1_000_000

func (c *cli) auditCmd(ctx context.Context, args []string) (int, error) {
	if len(args) > 0 && args[0] == "verify" {
		return c.auditVerify(ctx, args[1:])
	}
	fs := c.flags("audit", auditUsage)
	var q client.AuditQuery
	var since, until string
	fs.StringVar(&q.Action, "action", "", "keep records of this `action` (e.g. sandbox.exec)")
	fs.StringVar(&q.Target, "target", "", "keep records of this `target` (e.g. a sandbox ID)")
	fs.StringVar(&since, "since", "", "keep records from this `time` on")
	fs.StringVar(&until, "until", "", "keep records before this `time`")
	fs.Uint64Var(&q.After, "after", 0, "keep records after this `seq`")
	limit := fs.Int("limit", 100, "show at most `N` records (0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("unknown audit argument %q; want flags or verify", pos[0])
	}
	now := time.Now()
	if q.Since, err = parseTimeArg(since, now); err != nil {
		return 2, usagef("--since: %v", err)
	}
	if q.Until, err = parseTimeArg(until, now); err != nil {
		return 2, usagef("--until: %v", err)
	}
	if *limit < 0 {
		return 2, usagef("--limit must not be negative")
	}
	want := *limit
	if want == 0 {
		want = maxAuditShown
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	var recs []client.AuditRecord
	for len(recs) < want {
		q.Limit = min(want-len(recs), 1000)
		page, next, err := cl.AuditList(ctx, q)
		if err != nil {
			return fail(err)
		}
		recs = append(recs, page...)
		if next == 0 || len(page) == 0 {
			break
		}
		q.After = next
	}
	if *asJSON {
		if recs == nil {
			recs = []client.AuditRecord{}
		}
		return fail(c.printJSON(recs))
	}
	rows := make([][]string, 0, len(recs))
	for _, r := range recs {
		rows = append(rows, []string{strconv.FormatUint(r.Seq, 10), formatTime(r.Time), r.Action, dash(r.Target),
			r.Outcome, dash(r.KeyID), shorten(string(r.Details), 80)})
	}
	return fail(c.table([]string{"SEQ", "TIME", "ACTION", "TARGET", "OUTCOME", "KEY", "DETAILS"}, rows))
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

func (c *cli) auditVerify(ctx context.Context, args []string) (int, error) {
	fs := c.flags("audit verify", auditUsage)
	var cps listFlag
	fs.Var(&cps, "checkpoint", "a head saved earlier, `SEQ:HASH` (repeatable)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("audit verify takes no arguments, got %q", pos[0])
	}
	var heads []client.AuditHead
	for _, cp := range cps {
		seq, hash, ok := strings.Cut(cp, ":")
		n, err := strconv.ParseUint(seq, 10, 64)
		if !ok || err != nil || n == 0 || len(hash) != 64 {
			return 2, usagef("--checkpoint %q: want SEQ:HASH, e.g. 42:%s", cp, strings.Repeat("0", 64))
		}
		heads = append(heads, client.AuditHead{Seq: n, Hash: strings.ToLower(hash)})
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	rep, err := cl.AuditVerify(ctx, heads...)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		if err := c.printJSON(rep); err != nil {
			return fail(err)
		}
	} else if rep.OK {
		fmt.Fprintf(c.stdout, "ok: %d records verified\nhead: %d:%s\n", rep.Records, rep.Head.Seq, rep.Head.Hash)
	} else {
		fmt.Fprintf(c.stdout, "BROKEN: record %d: %s\n%d records checked; head: %d:%s\n",
			rep.FirstBadSeq, rep.Reason, rep.Records, rep.Head.Seq, rep.Head.Hash)
	}
	if !rep.OK {
		return 1, &cliError{msg: fmt.Sprintf("the audit log does not verify (first bad record: %d)", rep.FirstBadSeq)}
	}
	return 0, nil
}
