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
	cancel context.CancelFunc
	once   sync.Once

	// preparing counts appends between their start and their arrival in
	// the queue.
	preparing atomic.Int64

	mu   sync.Mutex
	head store.AuditHead // last committed record, as the writer knows it
}

// pending is one Append waiting for its batch's commit.
type pending struct {
	rec  store.AuditRecord
	done chan result // buffered, receives exactly once
}

type result struct {
	rec store.AuditRecord
	err error
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
func (l *Log) AppendRecord(ctx context.Context, ev Event) (Record, error) {
	p, err := l.enqueue(ctx, ev)
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

// enqueue prepares ev and hands it to the writer.
func (l *Log) enqueue(ctx context.Context, ev Event) (*pending, error) {
	l.preparing.Add(1)
	defer l.preparing.Add(-1)
	rec, err := prepare(ev, l.opts.Now(), l.opts.MaxDetailsBytes)
	if err != nil {
		return nil, err
	}
	p := &pending{rec: rec, done: make(chan result, 1)}
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
	return recordOf(r.rec), nil
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

// Close stops accepting appends, commits those already queued and stops
// the writer. If ctx ends first, the commit in flight is aborted and the
// appends still queued fail with ErrUnavailable. Close does not close the
// store.
func (l *Log) Close(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.exited:
		return nil
	case <-ctx.Done():
		l.cancel()
		<-l.exited
		return fmt.Errorf("audit log close: %w", ctxErr(ctx))
	}
}

// run is the writer goroutine: it commits queued appends in batches until
// Close, then drains the queue.
func (l *Log) run(ctx context.Context) {
	defer close(l.exited)
	defer l.cancel()
	batch := make([]*pending, 0, l.opts.MaxBatch)
	stale := false
	for {
		batch = batch[:0]
		select {
		case p := <-l.queue:
			batch = append(batch, p)
		case <-l.stop:
			l.drain(ctx, batch, &stale)
			return
		}
		l.gather(&batch)
		l.commit(ctx, batch, &stale)
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
func (l *Log) drain(ctx context.Context, batch []*pending, stale *bool) {
	for {
		select {
		case p := <-l.queue:
			if ctx.Err() != nil {
				p.done <- result{err: errClosed}
				continue
			}
			batch = append(batch, p)
			if len(batch) == l.opts.MaxBatch {
				l.commit(ctx, batch, stale)
				batch = batch[:0]
			}
		default:
			if len(batch) > 0 {
				l.commit(ctx, batch, stale)
			}
			return
		}
	}
}

// commit chains batch onto the head, stores it in one transaction and
// answers every caller. After a failed commit the head is reloaded from
// the store before the next one, since a failed commit may still have
// been applied.
func (l *Log) commit(ctx context.Context, batch []*pending, stale *bool) {
	cctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	fail := func(err error) {
		for _, p := range batch {
			p.done <- result{err: err}
		}
	}
	l.mu.Lock()
	head := l.head
	l.mu.Unlock()
	if *stale {
		h, err := l.st.AuditHead(cctx)
		if err != nil {
			fail(fmt.Errorf("audit append: %w", err))
			return
		}
		head, *stale = h, false
	}
	recs := make([]store.AuditRecord, len(batch))
	prev := head
	for i, p := range batch {
		r := p.rec
		r.Seq = prev.Seq + 1
		r.PrevHash = prev.Hash
		h, err := Hash(r)
		if err != nil { // only if the stored head is corrupt
			*stale = true
			fail(fmt.Errorf("audit append: head: %w", err))
			return
		}
		r.Hash = h
		recs[i] = r
		prev = store.AuditHead{Seq: r.Seq, Hash: r.Hash}
	}
	if err := l.st.AppendAudit(cctx, recs); err != nil {
		*stale = true
		l.opts.Logger.Warn("audit commit failed", "records", len(recs), "first_seq", recs[0].Seq, "err", err)
		fail(fmt.Errorf("audit append: %w", err))
		return
	}
	l.mu.Lock()
	l.head = prev
	l.mu.Unlock()
	for i, p := range batch {
		p.done <- result{rec: recs[i]}
	}
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

// Verify checks the whole chain in the store; see the package Verify.
func (l *Log) Verify(ctx context.Context, checkpoints ...store.AuditHead) (Report, error) {
	return Verify(ctx, l.st, checkpoints...)
}
