// Package sqlitestore implements store.Store on an embedded SQLite
// database through modernc.org/sqlite, a pure-Go translation of SQLite, so
// the daemon builds with CGO_ENABLED=0.
//
// # Connections
//
// A Store holds two connection pools on the same file. Writes go through a
// pool of exactly one connection, so writers queue in Go instead of
// contending for SQLite's write lock (no SQLITE_BUSY between our own
// writers), and every write transaction starts with BEGIN IMMEDIATE, so a
// read-then-write transaction (a quota check, an audit append) is atomic.
// Reads go through a separate pool of query-only connections that, in WAL
// mode, never wait for the writer. Commits never checkpoint the WAL
// themselves (wal_autocheckpoint=0): a background goroutine with its own
// connection runs a PASSIVE checkpoint every Options.CheckpointInterval,
// so the fsyncs a checkpoint needs stay off the commit path; the WAL
// usually holds about one interval of writes.
//
// # Durability
//
// The database runs in WAL mode with synchronous=NORMAL: a transaction is
// committed once its frames are written to the WAL file, without an fsync.
// The write has reached the kernel when Commit returns, so a commit
// survives the daemon being killed (SIGKILL, OOM kill, panic) at any
// point; what it does not survive is the loss of the kernel's page cache
// (power loss, kernel crash), which can roll back the last transactions
// but never corrupts the database. Options.FullSync selects
// synchronous=FULL, which fsyncs the WAL at every commit and so also
// survives power loss, at the cost of one fsync per transaction (the audit
// log's group commit amortizes it over a batch).
//
// # Schema
//
// The schema is versioned by the numbered files in migrations/, embedded in
// the binary. Open applies the ones a database lacks, each in its own
// transaction, recording each in the schema_migrations table, and refuses a
// database whose schema is newer than the binary knows.
//
// # File modes
//
// The database holds API key hashes and the audit log, so its files are
// readable by their owner only, whatever the process's umask: Open creates
// the database file with mode 0600 before SQLite opens it (SQLite gives the
// -wal and -shm files it creates the database file's mode) and brings an
// existing database, -wal, -shm or -journal file back to 0600.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.Store = (*Store)(nil)

// Options tunes Open. Zero values take the documented defaults.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by
	// another process using the same file. Default 5 seconds.
	BusyTimeout time.Duration
	// ReadConns is the size of the read-only connection pool. Default 4.
	ReadConns int
	// FullSync makes every commit fsync the WAL (synchronous=FULL), so
	// that commits also survive power loss. Default false: commits survive
	// the daemon being killed, not the host losing power.
	FullSync bool
	// CheckpointInterval is how often a background goroutine copies the
	// WAL into the database file. Commits never checkpoint themselves, so
	// the fsyncs a checkpoint needs stay off the commit path.
	// Default 500 milliseconds.
	CheckpointInterval time.Duration
	// Logger receives migration progress and checkpoint failures.
	// Default: discard.
	Logger *slog.Logger
}

// Store is a store.Store backed by one SQLite database file.
type Store struct {
	w, r *sql.DB
	// ckpt is a one-connection pool the checkpointer uses, so that it
	// runs beside the writer instead of in front of it.
	ckpt      *sql.DB
	log       *slog.Logger
	stmts     stmtCache
	stopCkpt  chan struct{}
	ckptDone  chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the database at path and brings its
// schema up to date. It fails with ErrFailedPrecondition if the database
// was written by a newer binary.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#\x00") {
		return nil, fmt.Errorf("database path must be non-empty without '?' or '#': %w", errdefs.ErrInvalidArgument)
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = 500 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := privateFiles(path); err != nil {
		return nil, err
	}
	syncMode := "NORMAL"
	if opts.FullSync {
		syncMode = "FULL"
	}
	common := url.Values{}
	common.Add("_pragma", "busy_timeout("+strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)+")")
	common.Add("_pragma", "foreign_keys(1)")
	common.Add("_pragma", "synchronous("+syncMode+")")

	// The WAL file is truncated back to this size when it is reset.
	common.Add("_pragma", "journal_size_limit(67108864)")

	wq := cloneValues(common)
	wq.Add("_pragma", "journal_mode(WAL)")
	wq.Add("_pragma", "wal_autocheckpoint(0)")
	wq.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("open database: %w", wrap(err))
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	s := &Store{w: w, log: opts.Logger, stmts: stmtCache{db: w}}
	if err := s.checkWAL(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}

	rq := cloneValues(common)
	rq.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open database: %w", wrap(err))
	}
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	r.SetConnMaxIdleTime(5 * time.Minute)
	s.r = r

	ckpt, err := sql.Open("sqlite", path+"?"+common.Encode())
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("open database: %w", wrap(err))
	}
	ckpt.SetMaxOpenConns(1)
	s.ckpt = ckpt
	s.stopCkpt = make(chan struct{})
	s.ckptDone = make(chan struct{})
	go s.checkpointLoop(opts.CheckpointInterval)
	return s, nil
}

// checkpointLoop copies committed WAL frames into the database file every
// interval (PASSIVE: it never blocks the writer or readers) until Close.
func (s *Store) checkpointLoop(interval time.Duration) {
	defer close(s.ckptDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCkpt:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var busy, frames, done int
		err := s.ckpt.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done)
		cancel()
		if err != nil {
			s.log.Warn("database checkpoint failed", "err", err)
		}
	}
}

// fileMode is the mode of the database and its companion files.
const fileMode = 0o600

// companions are the suffixes of the files SQLite keeps beside a database.
var companions = []string{"-wal", "-shm", "-journal"}

// privateFiles creates the database file at path with mode 0600 if it does
// not exist, and makes it and its existing companion files 0600: SQLite
// creates the -wal and -shm files with the database file's mode, so a
// database created by SQLite itself (0644 less the umask) would leave all
// three readable by every local user.
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fileMode)
	if err != nil {
		return fmt.Errorf("open database: %w", fileError(err))
	}
	err = f.Chmod(fileMode) // an existing file keeps its mode at open; the umask may have cut a new one's
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("database file mode: %w", fileError(err))
	}
	for _, suffix := range companions {
		p := path + suffix
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("database file %s: %w", suffix, fileError(err))
		case !fi.Mode().IsRegular():
			return fmt.Errorf("database file %s is not a regular file: %w", suffix, errdefs.ErrFailedPrecondition)
		case fi.Mode().Perm() != fileMode:
			if err := os.Chmod(p, fileMode); err != nil {
				return fmt.Errorf("database file %s mode: %w", suffix, fileError(err))
			}
		}
	}
	return nil
}

// fileError gives a file system error its errdefs class.
func fileError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%v: %w", err, errdefs.ErrPermissionDenied)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%v (a symbolic link): %w", err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// checkWAL makes sure the database really is in WAL mode (it is not, for
// example, on file systems without shared memory support).
func (s *Store) checkWAL(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("open database: %w", wrap(err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("database is in journal mode %q, not WAL: %w", mode, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Close closes both connection pools. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stopCkpt)
		<-s.ckptDone
		errs := []error{s.stmts.close(), s.ckpt.Close(), s.r.Close()}
		// Closing the last connection checkpoints the WAL into the
		// database file.
		errs = append(errs, s.w.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// stmtCache keeps prepared statements on the writer pool, so hot writes
// skip SQL parsing.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// prepare returns the prepared statement for query. It must not be
// called inside a write transaction: the writer pool has one connection,
// which the transaction holds. Bind the result with tx.StmtContext.
func (c *stmtCache) prepare(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, wrap(err)
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// writeTx runs fn in one write transaction (BEGIN IMMEDIATE) and commits
// it if fn returns nil.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return wrap(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return wrap(err)
	}
	return nil
}

// wrap gives a driver or database/sql error its errdefs class. Errors that
// already carry a class are returned as they are.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if errdefs.Class(err) != errdefs.ErrInternal || errors.Is(err, errdefs.ErrInternal) {
		return err
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w", errdefs.ErrNotFound)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%v: %w", err, errdefs.ErrCanceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%v: %w", err, errdefs.ErrTimeout)
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone):
		return fmt.Errorf("database: %v: %w", err, errdefs.ErrUnavailable)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code()
		switch {
		case code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, code == sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("%w", errdefs.ErrAlreadyExists)
		case code == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("referenced row: %w", errdefs.ErrNotFound)
		case code&0xff == sqlite3.SQLITE_CONSTRAINT:
			return fmt.Errorf("database constraint: %v: %w", err, errdefs.ErrInvalidArgument)
		case code&0xff == sqlite3.SQLITE_BUSY, code&0xff == sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("database busy: %w", errdefs.ErrUnavailable)
		case code&0xff == sqlite3.SQLITE_INTERRUPT:
			return fmt.Errorf("database query interrupted: %w", errdefs.ErrCanceled)
		case code&0xff == sqlite3.SQLITE_FULL:
			return fmt.Errorf("database disk full: %w", errdefs.ErrResourceExhausted)
		}
	}
	return fmt.Errorf("database: %v: %w", err, errdefs.ErrInternal)
}

// Times are stored as nanoseconds since the Unix epoch, NULL when zero.

func nanos(t time.Time) int64 { return t.UnixNano() }

func nullNanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}
