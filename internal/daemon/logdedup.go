package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Repeated warnings and errors are collapsed in the daemon's log: when the
// store refuses every write (a full disk), each refused request used to
// log the same three lines, hundreds of megabytes in minutes. dedupHandler
// wraps the daemon's root handler (see Run), so every component's logger
// goes through it. A warning or error is identified by its level, its
// message, the attributes its logger was made with (the component) and
// its "err" attribute; the other attributes (a path, a sandbox) may differ.
// The first one is logged; identical ones within dedupWindow after it are
// counted, not logged, and when the window ends the last of them is
// logged once with "repeated" = their count. Debug and info lines pass
// through.
const (
	dedupWindow = 10 * time.Second
	// dedupMaxKeys bounds the distinct lines tracked; past it, lines pass
	// through uncollapsed.
	dedupMaxKeys = 1024
)

// dedupHandler is a slog.Handler that collapses repeated warnings and
// errors (see above). Handlers made by WithAttrs and WithGroup share the
// counts of the one they came from.
type dedupHandler struct {
	next   slog.Handler
	prefix string // the attributes and groups of WithAttrs/WithGroup
	d      *dedup
}

// dedup is the state the handlers of one root share.
type dedup struct {
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	seen   map[string]*dedupEntry
	closed bool
}

// dedupEntry is one line being collapsed.
type dedupEntry struct {
	since      time.Time    // when it was last logged
	suppressed int          // identical lines not logged since
	last       slog.Record  // the last of them
	h          slog.Handler // the handler that would have logged it
	timer      *time.Timer  // logs the count when the window ends
}

// newDedupHandler returns next wrapped, and flush, which logs the counts
// of the lines suppressed so far and stops the timers (call it before the
// log's writer goes away).
func newDedupHandler(next slog.Handler, window time.Duration) (h *dedupHandler, flush func()) {
	d := &dedup{window: window, now: time.Now, seen: map[string]*dedupEntry{}}
	return &dedupHandler{next: next, d: d}, d.flush
}

func (h *dedupHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *dedupHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		b.WriteString(a.String())
		b.WriteByte(' ')
	}
	return &dedupHandler{next: h.next.WithAttrs(as), prefix: b.String(), d: h.d}
}

func (h *dedupHandler) WithGroup(name string) slog.Handler {
	return &dedupHandler{next: h.next.WithGroup(name), prefix: h.prefix + name + ".", d: h.d}
}

func (h *dedupHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	key := h.key(r)
	d := h.d
	d.mu.Lock()
	now := d.now()
	e := d.seen[key]
	if e != nil && now.Sub(e.since) < d.window && !d.closed {
		e.suppressed++
		e.last, e.h = r.Clone(), h.next
		if e.timer == nil {
			e.timer = time.AfterFunc(d.window-now.Sub(e.since), func() { d.expire(key, e) })
		}
		d.mu.Unlock()
		return nil
	}
	if e == nil && !d.closed && (len(d.seen) < dedupMaxKeys || d.pruneLocked(now)) {
		d.seen[key] = &dedupEntry{since: now}
	} else if e != nil {
		e.since = now // its window had ended: a new one starts with this line
	}
	d.mu.Unlock()
	return h.next.Handle(ctx, r)
}

// key identifies r's line for collapsing.
func (h *dedupHandler) key(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte('|')
	b.WriteString(h.prefix)
	b.WriteByte('|')
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			b.WriteByte('|')
			b.WriteString(a.Value.String())
			return false
		}
		return true
	})
	return b.String()
}

// expire ends e's window: the count of the lines it suppressed is logged
// with the last of them, and the next identical line is logged at once.
func (d *dedup) expire(key string, e *dedupEntry) {
	d.mu.Lock()
	if d.seen[key] != e || e.suppressed == 0 {
		d.mu.Unlock()
		return
	}
	rec, h, n := e.last, e.h, e.suppressed
	delete(d.seen, key)
	d.mu.Unlock()
	rec.AddAttrs(slog.Int("repeated", n))
	_ = h.Handle(context.Background(), rec)
}

// pruneLocked drops the entries whose window has ended without repeats
// and reports whether there is room for one more.
func (d *dedup) pruneLocked(now time.Time) bool {
	for k, e := range d.seen {
		if e.timer == nil && now.Sub(e.since) >= d.window {
			delete(d.seen, k)
		}
	}
	return len(d.seen) < dedupMaxKeys
}

// flush logs the counts suppressed so far and stops collapsing.
func (d *dedup) flush() {
	d.mu.Lock()
	d.closed = true
	var pending []*dedupEntry
	for k, e := range d.seen {
		if e.timer != nil {
			e.timer.Stop()
		}
		if e.suppressed > 0 {
			pending = append(pending, e)
		}
		delete(d.seen, k)
	}
	d.mu.Unlock()
	for _, e := range pending {
		rec := e.last
		rec.AddAttrs(slog.Int("repeated", e.suppressed))
		_ = e.h.Handle(context.Background(), rec)
	}
}
