package anthropic

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// errClosed: the handler is closed.
var errClosed = errors.New("anthropic: the executor is closed")

// convKey names a conversation: whose key, which sandbox, which name.
type convKey struct{ key, sandbox, name string }

// conversation is one conversation's state: a lock that serialises its
// requests and its bash session, if one was started.
type conversation struct {
	key  convKey
	lock chan struct{} // held by the request in progress
	// Guarded by sessions.mu.
	users    int // requests holding or waiting for lock
	lastUsed time.Time
	// Guarded by lock.
	bash *bashSession
}

// sessions keeps the conversations.
type sessions struct {
	idle          time.Duration
	max, maxPerKy int
	// maxPerTn caps one tenant's conversations (a quarter of max, at
	// least maxPerKy), so that a tenant's keys cannot fill the table and
	// evict the other tenants' shells.
	maxPerTn  int
	log       *slog.Logger
	ctx       context.Context // the bash streams' context, ended by close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the bash streams
	stopSweep chan struct{}

	mu     sync.Mutex
	convs  map[convKey]*conversation
	closed bool
}

func newSessions(idle time.Duration, max, maxPerKey int, log *slog.Logger) *sessions {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sessions{idle: idle, max: max, maxPerKy: maxPerKey, maxPerTn: perTenant(max, maxPerKey), log: log, ctx: ctx, cancel: cancel,
		stopSweep: make(chan struct{}), convs: map[convKey]*conversation{}}
	go s.sweeper()
	return s
}

// acquire returns k's conversation, made if new, with its lock held;
// release gives it back.
func (s *sessions) acquire(ctx context.Context, k convKey) (*conversation, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	c := s.convs[k]
	if c == nil {
		if victims, ok := s.makeRoomLocked(k.key); !ok {
			s.mu.Unlock()
			return nil, &client.APIError{Status: http.StatusTooManyRequests, Code: api.CodeResourceExhausted,
				Message: "too many conversations are busy; end one (DELETE .../anthropic/sessions/{session}) or retry"}
		} else {
			for _, v := range victims {
				go v.shutdown()
			}
		}
		c = &conversation{key: k, lock: make(chan struct{}, 1)}
		s.convs[k] = c
	}
	c.users++
	c.lastUsed = time.Now()
	s.mu.Unlock()
	select {
	case c.lock <- struct{}{}:
		return c, nil
	case <-ctx.Done():
		s.mu.Lock()
		c.users--
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// release gives back c's lock.
func (s *sessions) release(c *conversation) {
	s.mu.Lock()
	c.users--
	c.lastUsed = time.Now()
	s.mu.Unlock()
	<-c.lock
}

// makeRoomLocked removes, past a cap, the unused conversation idle
// longest (of key's own past the per-key cap, of its tenant's past the
// per-tenant cap) and returns the bash sessions to end; false when every
// candidate is in use.
func (s *sessions) makeRoomLocked(key string) ([]*bashSession, bool) {
	var victims []*bashSession
	tenant := tenantOf(key)
	for {
		total, mine, ours := len(s.convs), 0, 0
		for k := range s.convs {
			if k.key == key {
				mine++
			}
			if tenantOf(k.key) == tenant {
				ours++
			}
		}
		if total < s.max && mine < s.maxPerKy && ours < s.maxPerTn {
			return victims, true
		}
		onlyMine := mine >= s.maxPerKy
		onlyOurs := !onlyMine && ours >= s.maxPerTn
		var oldest *conversation
		for k, c := range s.convs {
			if c.users > 0 || onlyMine && k.key != key || onlyOurs && tenantOf(k.key) != tenant {
				continue
			}
			if oldest == nil || c.lastUsed.Before(oldest.lastUsed) {
				oldest = c
			}
		}
		if oldest == nil {
			return victims, false
		}
		delete(s.convs, oldest.key)
		// Unused, so nobody holds its lock: its bash is ours to end.
		if oldest.bash != nil {
			victims = append(victims, oldest.bash)
		}
	}
}

// perTenant is the per-tenant cap for caps total and perKey.
func perTenant(total, perKey int) int { return max(perKey, total/4) }

// tenantOf is the tenant of a conversation's key ("tenant/key").
func tenantOf(key string) string {
	t, _, _ := strings.Cut(key, "/")
	return t
}

// end ends k's conversation, waiting for its requests in progress.
func (s *sessions) end(ctx context.Context, k convKey) error {
	s.mu.Lock()
	c := s.convs[k]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	c2, err := s.acquire(ctx, k)
	if err != nil {
		return err
	}
	b := c2.bash
	c2.bash = nil
	s.mu.Lock()
	if s.convs[k] == c2 && c2.users == 1 {
		delete(s.convs, k)
	}
	s.mu.Unlock()
	s.release(c2)
	if b != nil {
		b.shutdown()
	}
	return nil
}

// sweeper ends, each minute (or idle/4 when shorter), the unused
// conversations idle too long or whose shell ended (unless it timed
// out: then its next command is told to restart).
func (s *sessions) sweeper() {
	every := min(time.Minute, s.idle/4)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-t.C:
		}
		var ended []*bashSession
		s.mu.Lock()
		for k, c := range s.convs {
			if c.users > 0 {
				continue
			}
			gone := c.bash != nil && c.bash.done() && !c.bash.timedOut.Load()
			if time.Since(c.lastUsed) >= s.idle || gone {
				delete(s.convs, k)
				if c.bash != nil {
					ended = append(ended, c.bash)
				}
			}
		}
		s.mu.Unlock()
		for _, b := range ended {
			go b.shutdown()
		}
	}
}

// count is the number of conversations kept.
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.convs)
}

// close ends every bash stream (which kills the shells) and waits for
// them up to ctx.
func (s *sessions) close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stopSweep)
	}
	s.convs = map[convKey]*conversation{}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
