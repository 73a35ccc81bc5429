package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Record is an Event as the log stored it, with its place in the chain.
// Details is the stored JSON text, byte for byte what the hash covers.
// Phase and IntentSeq are derived from Outcome and Details (they are not
// stored fields of their own).
type Record struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	TenantID string    `json:"tenant_id,omitempty"`
	KeyID    string    `json:"key_id,omitempty"`
	Action   string    `json:"action"`
	Target   string    `json:"target,omitempty"`
	Outcome  string    `json:"outcome"`
	// Phase is PhaseIntent or PhaseOutcome.
	Phase Phase `json:"phase"`
	// IntentSeq is, for an outcome, the Seq of its intent (0 for a
	// request refused before anything was done).
	IntentSeq uint64          `json:"intent_seq,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
	PrevHash  string          `json:"prev_hash"`
	Hash      string          `json:"hash"`
}

// Event returns the record's event, with Details decoded (numbers become
// json.Number). IntentSeq is set from the details, which keep it too.
func (r Record) Event() (Event, error) {
	ev := Event{Time: r.Time, TenantID: r.TenantID, KeyID: r.KeyID, Action: r.Action, Target: r.Target,
		Outcome: r.Outcome, IntentSeq: r.IntentSeq}
	if len(r.Details) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r.Details))
		dec.UseNumber()
		if err := dec.Decode(&ev.Details); err != nil {
			return Event{}, fmt.Errorf("audit record %d: details: %v: %w", r.Seq, err, errdefs.ErrInternal)
		}
	}
	return ev, nil
}

// PhaseOf returns the phase of a stored record and, for an outcome, the
// Seq of its intent (from details' "intent_seq"; 0 if absent or not a
// positive integer).
func PhaseOf(outcome string, details []byte) (Phase, uint64) {
	if outcome == OutcomeIntent {
		return PhaseIntent, 0
	}
	if len(details) == 0 || !bytes.Contains(details, []byte(`"`+intentSeqKey+`"`)) {
		return PhaseOutcome, 0
	}
	var d struct {
		IntentSeq json.Number `json:"intent_seq"`
	}
	if json.Unmarshal(details, &d) != nil {
		return PhaseOutcome, 0
	}
	n, err := strconv.ParseUint(d.IntentSeq.String(), 10, 64)
	if err != nil {
		return PhaseOutcome, 0
	}
	return PhaseOutcome, n
}

func recordOf(r store.AuditRecord) Record {
	phase, intent := PhaseOf(r.Outcome, r.Details)
	return recordWith(r, phase, intent)
}

// recordWith is recordOf with the phase and intent seq known.
func recordWith(r store.AuditRecord, phase Phase, intent uint64) Record {
	return Record{
		Seq: r.Seq, Time: r.Time, TenantID: r.TenantID, KeyID: r.KeyID, Action: r.Action,
		Target: r.Target, Outcome: r.Outcome, Phase: phase, IntentSeq: intent, Details: json.RawMessage(r.Details),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
}

// hashDomain starts every hashed message; it names the format version.
const hashDomain = "airlock-audit-v1\n"

// Hash computes a record's hash from its fields and PrevHash, as the
// package documentation specifies. r.Hash is ignored. It fails only if
// PrevHash is not 64 hex digits.
func Hash(r store.AuditRecord) (string, error) {
	var prev [sha256.Size]byte
	if len(r.PrevHash) != 2*sha256.Size {
		return "", fmt.Errorf("prev_hash is not %d hex digits: %w", 2*sha256.Size, errdefs.ErrInvalidArgument)
	}
	if _, err := hex.Decode(prev[:], []byte(r.PrevHash)); err != nil {
		return "", fmt.Errorf("prev_hash is not hex: %w", errdefs.ErrInvalidArgument)
	}
	h := sha256.New()
	var buf [8]byte
	h.Write([]byte(hashDomain))
	h.Write(prev[:])
	binary.BigEndian.PutUint64(buf[:], r.Seq)
	h.Write(buf[:])
	binary.BigEndian.PutUint64(buf[:], uint64(r.Time.UnixNano()))
	h.Write(buf[:])
	for _, f := range [...]string{r.TenantID, r.KeyID, r.Action, r.Target, r.Outcome} {
		binary.BigEndian.PutUint32(buf[:4], uint32(len(f)))
		h.Write(buf[:4])
		h.Write([]byte(f))
	}
	binary.BigEndian.PutUint32(buf[:4], uint32(len(r.Details)))
	h.Write(buf[:4])
	h.Write(r.Details)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Limits on event fields.
const (
	// DefaultMaxDetailsBytes is the default cap on a record's details.
	DefaultMaxDetailsBytes = 16 << 10
	// MaxTargetBytes caps Target; longer targets are cut.
	MaxTargetBytes = 512
	maxActionBytes = 64
	maxIDBytes     = store.MaxIDBytes
	minDetailsCap  = 256
)

// validWord reports whether s is 1-maxActionBytes bytes of letters,
// digits and "_.:-", starting with a letter (a lowercase one if lower) or,
// unless lower, a digit. Actions are lower; outcomes are not.
func validWord(s string, lower bool) bool {
	if s == "" || len(s) > maxActionBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		isLower, isUpper, isDigit := c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9'
		switch {
		case isLower:
		case i == 0 && lower:
			return false
		case isUpper && !lower, isDigit:
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// prepare validates ev and turns it into a record without its chain
// fields. It runs in the caller's goroutine, so encoding is parallel.
func prepare(ev Event, now time.Time, maxDetails int) (store.AuditRecord, error) {
	if !validWord(ev.Action, true) {
		return store.AuditRecord{}, fmt.Errorf("audit action %q must be 1-%d of [a-z0-9_.:-], starting with a letter: %w",
			store.Clip(ev.Action), maxActionBytes, errdefs.ErrInvalidArgument)
	}
	if !validWord(ev.Outcome, false) {
		return store.AuditRecord{}, fmt.Errorf("audit outcome %q must be 1-%d of [A-Za-z0-9_.:-]: %w",
			store.Clip(ev.Outcome), maxActionBytes, errdefs.ErrInvalidArgument)
	}
	for _, f := range []struct{ name, v string }{{"tenant", ev.TenantID}, {"key", ev.KeyID}} {
		if len(f.v) > maxIDBytes || !utf8.ValidString(f.v) || strings.ContainsFunc(f.v, isControl) {
			return store.AuditRecord{}, fmt.Errorf("audit %s ID %q is malformed: %w", f.name, store.Clip(f.v), errdefs.ErrInvalidArgument)
		}
	}
	t := ev.Time
	if t.IsZero() {
		t = now
	}
	if t.Before(time.Unix(0, 0)) || t.Year() >= 2262 {
		return store.AuditRecord{}, fmt.Errorf("audit time %s is outside 1970-2261: %w", t.UTC().Format(time.RFC3339), errdefs.ErrInvalidArgument)
	}
	details := ev.Details
	switch {
	case ev.IntentSeq > 0 && ev.Outcome == OutcomeIntent:
		return store.AuditRecord{}, fmt.Errorf("audit intent cannot name an intent seq: %w", errdefs.ErrInvalidArgument)
	case ev.IntentSeq > MaxSeq:
		return store.AuditRecord{}, fmt.Errorf("audit intent seq %d out of range: %w", ev.IntentSeq, errdefs.ErrInvalidArgument)
	case ev.IntentSeq > 0:
		details = make(map[string]any, len(ev.Details)+1)
		for k, v := range ev.Details {
			details[k] = v
		}
		details[intentSeqKey] = ev.IntentSeq
	}
	return store.AuditRecord{
		Time:     time.Unix(0, t.UnixNano()).UTC(),
		TenantID: ev.TenantID,
		KeyID:    ev.KeyID,
		Action:   ev.Action,
		Target:   cleanTarget(ev.Target),
		Outcome:  ev.Outcome,
		Details:  encodeDetails(details, maxDetails, ev.IntentSeq),
	}, nil
}

// MaxSeq is the largest sequence number the store accepts.
const MaxSeq = 1 << 62

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// cleanTarget replaces invalid UTF-8 and NULs and cuts s to MaxTargetBytes
// (marking the cut with "..."), so that an odd target never costs the
// record.
func cleanTarget(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= MaxTargetBytes {
		return s
	}
	return cutUTF8(s, MaxTargetBytes-3) + "..."
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a rune.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// marshalCompact encodes v as compact JSON with sorted map keys and without
// HTML escaping.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeDetails returns the stored form of d: nil for none, the JSON if it
// fits in max bytes, otherwise a marker object with the beginning of it.
// A non-zero intentSeq is kept in the marker objects too, so that an
// outcome never loses the link to its intent.
func encodeDetails(d map[string]any, max int, intentSeq uint64) []byte {
	if len(d) == 0 {
		return nil
	}
	marker := func(m map[string]any) []byte {
		if intentSeq > 0 {
			m[intentSeqKey] = intentSeq
		}
		b, _ := marshalCompact(m)
		return b
	}
	b, err := marshalCompact(d)
	if err != nil {
		return marker(map[string]any{"_error": "details are not JSON-encodable"})
	}
	if len(b) <= max {
		return b
	}
	// Escaping can double the prefix (or worse for control characters),
	// so shrink it until the marker fits.
	n := max / 2
	for {
		m := marker(map[string]any{"_truncated": true, "_bytes": len(b), "_head": cutUTF8(string(b), n)})
		if len(m) <= max || n == 0 {
			return m
		}
		n = n * 3 / 4
	}
}
