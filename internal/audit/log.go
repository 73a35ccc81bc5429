package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Options tunes a Log. Zero values take the documented defaults.
type Options struct {
	// Logger receives commit failures. Default: discard.
	Logger *slog.Logger
	// MaxBatch caps the records committed in one transaction.
	// Default 256.
	MaxBatch int
	// QueueSize caps the appends waiting for the writer; Append blocks
	// (until its context ends) while the queue is full. Default 4096.
	QueueSize int
	// MaxDetailsBytes caps a record's encoded details; larger details are
	// truncated with a marker. Default DefaultMaxDetailsBytes; at least
	// 256 and at most store.MaxAuditDetailsBytes.
	MaxDetailsBytes int
	// CommitTimeout bounds one batch's transaction. Default 10 seconds.
	CommitTimeout time.Duration
	// Now is the clock for events without a time. Default time.Now.
	Now func() time.Time
	// Observe, if set, is told of every append when it returns: how
	// long it took and its error (metrics).
	Observe func(took time.Duration, err error)
}

func (o Options) withDefaults() (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 256
	}
	if o.QueueSize == 0 {
		o.QueueSize = 4096
	}
	if o.MaxDetailsBytes == 0 {
		o.MaxDetailsBytes = DefaultMaxDetailsBytes
	}
	if o.CommitTimeout == 0 {
		o.CommitTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.MaxBatch < 1 || o.MaxBatch > 4096:
		return o, fmt.Errorf("audit MaxBatch %d out of range 1-4096: %w", o.MaxBatch, errdefs.ErrInvalidArgument)
	case o.QueueSize < 1 || o.QueueSize > 1<<20:
		return o, fmt.Errorf("audit QueueSize %d out of range: %w", o.QueueSize, errdefs.ErrInvalidArgument)
	case o.MaxDetailsBytes < minDetailsCap || o.MaxDetailsBytes > store.MaxAuditDetailsBytes:
		return o, fmt.Errorf("audit MaxDetailsBytes %d out of range %d-%d: %w",
			o.MaxDetailsBytes, minDetailsCap, store.MaxAuditDetailsBytes, errdefs.ErrInvalidArgument)
	case o.CommitTimeout < 0:
		return o, fmt.Errorf("audit CommitTimeout is negative: %w", errdefs.ErrInvalidArgument)
	}
	return o, nil
}

// Log is the audit log. Its methods are safe for concurrent use. The
// lifecycle is New, any number of Append/List/Verify calls, Close.
type Log struct {
	st   store.AuditStore
	opts Options

	queue  chan *pending
	stop   chan struct{} // closed by Close
	exited chan struct{} // closed when the writer returns
	wctx   context.Context
	cancel context.CancelFunc
	once   sync.Once

	// preparing counts appends between their start and their arrival in
	// the queue.
	preparing atomic.Int64
	// active counts the appends in progress, from call to return.
	active atomic.Int64

	// commitMu is held while records are chained onto the head and
	// stored: by the writer for a batch, or by an Append that found the
	// log idle and commits its own record (see AppendRecord).
	commitMu sync.Mutex
	stale    bool // the head must be reloaded from the store (commitMu)
	closed   bool // no more inline commits (commitMu)

	mu   sync.Mutex
	head store.AuditHead // last committed record
	// writeErr is the failure of the last commit, nil once one succeeds
	// (see WriteErr).
	writeErr error
}

// pending is one Append waiting for its batch's commit.
type pending struct {
	rec       store.AuditRecord
	intentSeq uint64
	done      chan result // buffered, receives exactly once
}

type result struct {
	rec       store.AuditRecord
	intentSeq uint64
	err       error
}

// New loads the head of the chain from st and starts the writer. Only one
// Log may write to a store at a time: a second writer's appends fail with
// ErrFailedPrecondition instead of forking the chain.
func New(ctx context.Context, st store.AuditStore, opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	head, err := st.AuditHead(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	l := &Log{
		st:     st,
		opts:   opts,
		queue:  make(chan *pending, opts.QueueSize),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
		wctx:   wctx,
		cancel: cancel,
		head:   head,
	}
	go l.run(wctx)
	return l, nil
}

// Append records ev and returns once it is durable in the store. It fails
// with ErrInvalidArgument for an event with a malformed Action, Outcome,
// TenantID or KeyID, and ErrUnavailable once the log is closed. If ctx
// ends while the commit is in flight the error wraps ErrCanceled or
// ErrTimeout and the event may or may not have been recorded.
func (l *Log) Append(ctx context.Context, ev Event) error {
	_, err := l.AppendRecord(ctx, ev)
	return err
}

// AppendRecord is Append returning the stored record.
//
// An append that finds the log idle (no other append in progress, no
// commit, nothing queued) commits its record itself, in the calling
// goroutine: a lone request does not pay for two goroutine handoffs to
// and from the writer. Concurrent appends queue up for the writer, which
// commits them together (group commit).
func (l *Log) AppendRecord(ctx context.Context, ev Event) (rec Record, err error) {
	if l.opts.Observe != nil {
		began := time.Now()
		defer func() { l.opts.Observe(time.Since(began), err) }()
	}
	return l.appendRecord(ctx, ev)
}

func (l *Log) appendRecord(ctx context.Context, ev Event) (Record, error) {
	alone := l.active.Add(1) == 1
	defer l.active.Add(-1)
	l.preparing.Add(1)
	rec, err := prepare(ev, l.opts.Now(), l.opts.MaxDetailsBytes)
	if err != nil {
		l.preparing.Add(-1)
		return Record{}, err
	}
	if alone && l.active.Load() == 1 && len(l.queue) == 0 && l.commitMu.TryLock() {
		l.preparing.Add(-1)
		return l.commitInline(ctx, rec, ev.IntentSeq)
	}
	p, err := l.enqueue(ctx, rec, ev.IntentSeq)
	if err != nil {
		return Record{}, err
	}
	select {
	case res := <-p.done:
		return res.record()
	case <-ctx.Done():
		return Record{}, fmt.Errorf("audit append: outcome unknown: %w", ctxErr(ctx))
	case <-l.exited:
		select {
		case res := <-p.done:
			return res.record()
		default:
			return Record{}, errClosed
		}
	}
}

// commitInline stores rec as a batch of its own. The caller holds
// commitMu, which commitInline releases. The commit is bounded by ctx,
// Options.CommitTimeout and Close.
func (l *Log) commitInline(ctx context.Context, rec store.AuditRecord, intentSeq uint64) (Record, error) {
	defer l.commitMu.Unlock()
	select {
	case <-l.stop:
		return Record{}, errClosed
	default:
	}
	if l.closed {
		return Record{}, errClosed
	}
	cctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	stop := context.AfterFunc(l.wctx, cancel) // Close gave up waiting
	defer stop()
	recs := [1]store.AuditRecord{rec}
	if err := l.storeLocked(cctx, recs[:]); err != nil {
		if ctx.Err() != nil {
			return Record{}, fmt.Errorf("audit append: outcome unknown: %w", ctxErr(ctx))
		}
		return Record{}, err
	}
	return appended(recs[0], intentSeq), nil
}

// appended is the Record of a record just stored (its phase is known).
func appended(r store.AuditRecord, intentSeq uint64) Record {
	if r.Outcome == OutcomeIntent {
		return recordWith(r, PhaseIntent, 0)
	}
	return recordWith(r, PhaseOutcome, intentSeq)
}

// enqueue hands a prepared record to the writer. The caller counted
// itself in l.preparing; enqueue uncounts it.
func (l *Log) enqueue(ctx context.Context, rec store.AuditRecord, intentSeq uint64) (*pending, error) {
	defer l.preparing.Add(-1)
	p := &pending{rec: rec, intentSeq: intentSeq, done: make(chan result, 1)}
	select {
	case <-l.stop:
		return nil, errClosed
	default:
	}
	select {
	case l.queue <- p:
		return p, nil
	case <-l.stop:
		return nil, errClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("audit append: %w", ctxErr(ctx))
	}
}

func (r result) record() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	return appended(r.rec, r.intentSeq), nil
}

var errClosed = fmt.Errorf("audit log is closed: %w", errdefs.ErrUnavailable)

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%v: %w", ctx.Err(), errdefs.ErrTimeout)
	}
	return fmt.Errorf("%v: %w", ctx.Err(), errdefs.ErrCanceled)
}

// Head returns the Seq and Hash of the last record this Log committed (or
// found at New).
func (l *Log) Head() store.AuditHead {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head
}

// QueueDepth is how many appends wait in the queue for the writer.
func (l *Log) QueueDepth() int { return len(l.queue) }

// Close stops accepting appends, commits those already queued and stops
// the writer. If ctx ends first, the commit in flight is aborted and the
// appends still queued fail with ErrUnavailable. Close does not close the
// store.
func (l *Log) Close(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	var err error
	select {
	case <-l.exited:
	case <-ctx.Done():
		l.cancel()
		<-l.exited
		err = fmt.Errorf("audit log close: %w", ctxErr(ctx))
	}
	// Wait for an inline commit in progress (bounded by CommitTimeout,
	// or aborted above).
	l.commitMu.Lock()
	l.closed = true
	l.commitMu.Unlock()
	return err
}

// run is the writer goroutine: it commits queued appends in batches until
// Close, then drains the queue.
func (l *Log) run(ctx context.Context) {
	defer close(l.exited)
	defer l.cancel()
	batch := make([]*pending, 0, l.opts.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case p := <-l.queue:
			batch = append(batch, p)
		case <-l.stop:
			l.drain(ctx, batch)
			return
		}
		l.gather(&batch)
		l.commit(ctx, batch)
	}
}

// maxYields bounds how many times gather lets other goroutines run.
const maxYields = 16

// gather adds waiting appends to batch, up to MaxBatch. The callers of
// the previous batch were woken together but run one after another, and
// other appends may be between their start and the queue (l.preparing):
// yielding the processor while appends keep arriving, or are on their
// way, lets the next commit carry them instead of just the first. When
// nothing arrives the writer commits at once, so an append on an idle log
// is not delayed.
func (l *Log) gather(batch *[]*pending) {
	for yields := 0; len(*batch) < l.opts.MaxBatch; {
		select {
		case p := <-l.queue:
			*batch = append(*batch, p)
			continue
		default:
		}
		if yields == maxYields {
			return
		}
		yields++
		runtime.Gosched()
		if len(l.queue) == 0 && l.preparing.Load() == 0 {
			return
		}
	}
}

// drain commits what is left in the queue after Close, unless ctx ends.
func (l *Log) drain(ctx context.Context, batch []*pending) {
	for {
		select {
		case p := <-l.queue:
			if ctx.Err() != nil {
				p.done <- result{err: errClosed}
				continue
			}
			batch = append(batch, p)
			if len(batch) == l.opts.MaxBatch {
				l.commit(ctx, batch)
				batch = batch[:0]
			}
		default:
			if len(batch) > 0 {
				l.commit(ctx, batch)
			}
			return
		}
	}
}

// commit stores batch in one transaction and answers every caller.
func (l *Log) commit(ctx context.Context, batch []*pending) {
	cctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	recs := make([]store.AuditRecord, len(batch))
	for i, p := range batch {
		recs[i] = p.rec
	}
	l.commitMu.Lock()
	err := l.storeLocked(cctx, recs)
	l.commitMu.Unlock()
	for i, p := range batch {
		if err != nil {
			p.done <- result{err: err}
		} else {
			p.done <- result{rec: recs[i], intentSeq: p.intentSeq}
		}
	}
}

// storeLocked chains recs onto the head (filling their Seq, PrevHash and
// Hash) and stores them in one transaction. The caller holds commitMu.
// After a failed commit the head is reloaded from the store before the
// next one, since a failed commit may still have been applied.
func (l *Log) storeLocked(ctx context.Context, recs []store.AuditRecord) error {
	l.mu.Lock()
	head := l.head
	l.mu.Unlock()
	if l.stale {
		h, err := l.st.AuditHead(ctx)
		if err != nil {
			return fmt.Errorf("audit append: %w", err)
		}
		head, l.stale = h, false
	}
	prev := head
	for i := range recs {
		r := &recs[i]
		r.Seq = prev.Seq + 1
		r.PrevHash = prev.Hash
		h, err := Hash(*r)
		if err != nil { // only if the stored head is corrupt
			l.stale = true
			return fmt.Errorf("audit append: head: %w", err)
		}
		r.Hash = h
		prev = store.AuditHead{Seq: r.Seq, Hash: r.Hash}
	}
	if err := l.st.AppendAudit(ctx, recs); err != nil {
		l.stale = true
		l.opts.Logger.Warn("audit commit failed", "records", len(recs), "first_seq", recs[0].Seq, "err", err)
		if ctx.Err() == nil { // a commit cut short by its caller says nothing of the store
			l.mu.Lock()
			l.writeErr = err
			l.mu.Unlock()
		}
		return fmt.Errorf("audit append: %w", err)
	}
	l.mu.Lock()
	l.head = prev
	l.writeErr = nil
	l.mu.Unlock()
	return nil
}

// WriteErr returns the error of the last commit if it failed (the store
// refused the write: a full disk, a read-only or failing filesystem), nil
// if it succeeded or nothing was committed yet. The daemon's readiness
// check reads it: while it is set, every mutation fails with 503.
func (l *Log) WriteErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeErr
}

// Query selects records for List; see store.AuditQuery for the fields.
type Query = store.AuditQuery

// List returns the records q selects, in ascending Seq order, for
// GET /v1/audit. Page with q.AfterSeq set to the last Seq returned.
func (l *Log) List(ctx context.Context, q Query) ([]Record, error) {
	rs, err := l.st.ListAudit(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("audit list: %w", err)
	}
	out := make([]Record, len(rs))
	for i, r := range rs {
		out[i] = recordOf(r)
	}
	return out, nil
}

// Page is one page of Select.
type Page struct {
	// Records are the records selected, in ascending Seq order.
	Records []Record
	// NextAfter is the AfterSeq of the next page; 0 when no record after
	// this page can match. A page may hold fewer records than the limit
	// (even none) while NextAfter is not 0: the scan stopped at its bound.
	NextAfter uint64
}

// maxScanPages bounds the store pages one Select with a phase filter
// reads.
const maxScanPages = 16

// Select returns a page of the records q selects, in ascending Seq order,
// keeping only those of phase ("" keeps both). Page on with q.AfterSeq set
// to the NextAfter returned.
func (l *Log) Select(ctx context.Context, q Query, phase Phase) (Page, error) {
	switch phase {
	case "", PhaseIntent, PhaseOutcome:
	default:
		return Page{}, fmt.Errorf("audit phase %q: want intent or outcome: %w", store.Clip(string(phase)), errdefs.ErrInvalidArgument)
	}
	limit := store.EffectiveLimit(q.Limit)
	if phase == "" {
		recs, err := l.List(ctx, q)
		if err != nil {
			return Page{}, err
		}
		p := Page{Records: recs}
		if len(recs) == limit {
			p.NextAfter = recs[len(recs)-1].Seq
		}
		return p, nil
	}
	scan := q
	scan.Limit = store.MaxListLimit
	var out []Record
	for range maxScanPages {
		rs, err := l.st.ListAudit(ctx, scan)
		if err != nil {
			return Page{}, fmt.Errorf("audit list: %w", err)
		}
		for _, r := range rs {
			rec := recordOf(r)
			if rec.Phase != phase {
				continue
			}
			out = append(out, rec)
			if len(out) == limit {
				return Page{Records: out, NextAfter: rec.Seq}, nil
			}
		}
		if len(rs) < scan.Limit {
			return Page{Records: out}, nil
		}
		scan.AfterSeq = rs[len(rs)-1].Seq
	}
	return Page{Records: out, NextAfter: scan.AfterSeq}, nil
}

// Verify checks the whole chain in the store; see the package Verify.
func (l *Log) Verify(ctx context.Context, checkpoints ...store.AuditHead) (Report, error) {
	return Verify(ctx, l.st, checkpoints...)
}

// VerifyCheckpoints checks the whole chain in the store against
// checkpoints; see the package VerifyCheckpoints. Signatures are the
// caller's to check.
func (l *Log) VerifyCheckpoints(ctx context.Context, checkpoints ...Checkpoint) (Report, error) {
	return VerifyCheckpoints(ctx, l.st, checkpoints...)
}
