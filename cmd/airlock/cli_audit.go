package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
  airlock audit [--action A] [--target T] [--since T] [--until T] [--after SEQ] [--limit N] [--json]
      List your tenant's audit records, oldest first. T is an RFC 3339 time
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
	fs.Uint64Var(&q.After, "after", 0, "keep records after this `seq`")
	limit := fs.Int("limit", 100, "show at most `N` records (0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("unknown audit argument %q; want flags, verify or checkpoint", pos[0])
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
