package e2b

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/client"
	filesystempb "github.com/airlock-sandbox/airlock/gen/filesystem"
)

// Bounds of the polled watchers.
const (
	// maxWatchers caps the polled watchers alive at once, all callers
	// together; maxWatchersPerSandbox those of one sandbox.
	maxWatchers           = 256
	maxWatchersPerSandbox = 16
	// maxWatcherEvents caps the events a watcher keeps between polls;
	// past it the oldest are dropped and the next poll fails, so that
	// a client never takes a partial record for a whole one.
	maxWatcherEvents = 4096
	// watcherIdle removes a watcher nobody polled for this long.
	watcherIdle = 5 * time.Minute
	// watcherStart bounds the wait for a watch to be in place.
	watcherStart = 30 * time.Second
)

// watchers are the polled watchers (CreateWatcher, GetWatcherEvents,
// RemoveWatcher): each runs a watch of the API in the background and
// keeps its events until polled. A watcher is reachable only by the key
// and sandbox that created it.
type watchers struct {
	mu sync.Mutex
	m  map[string]*watcher
}

type watcher struct {
	id, sandbox string
	key         [32]byte // SHA-256 of the caller's key
	cancel      context.CancelFunc

	mu       sync.Mutex
	events   []*filesystempb.FilesystemEvent
	overflow bool
	err      error // why the watch ended, once it did
	polled   time.Time
}

func newWatchers() *watchers { return &watchers{m: map[string]*watcher{}} }

func keyHash(cl *call) [32]byte { return sha256.Sum256([]byte(cl.key)) }

// sweepLocked removes the watchers nobody polled for watcherIdle. w.mu
// is held.
func (ws *watchers) sweepLocked(now time.Time) {
	for id, w := range ws.m {
		w.mu.Lock()
		idle := now.Sub(w.polled) > watcherIdle
		w.mu.Unlock()
		if idle {
			w.cancel()
			delete(ws.m, id)
		}
	}
}

// start starts a watcher of root for cl and returns its ID once the
// watch is in place.
func (ws *watchers) start(ctx context.Context, cl *call, root string, recursive bool) (string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	w := &watcher{id: "w" + hex.EncodeToString(b[:]), sandbox: cl.id, key: keyHash(cl), polled: time.Now()}
	ws.mu.Lock()
	ws.sweepLocked(time.Now())
	n := 0
	for _, o := range ws.m {
		if o.sandbox == cl.id {
			n++
		}
	}
	if len(ws.m) >= maxWatchers || n >= maxWatchersPerSandbox {
		ws.mu.Unlock()
		return "", connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("too many watchers (at most %d per sandbox, %d in all); remove one", maxWatchersPerSandbox, maxWatchers))
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(cl.base))
	w.cancel = cancel
	ws.m[w.id] = w
	ws.mu.Unlock()

	started := make(chan struct{})
	var once sync.Once
	go func() {
		err := cl.c.WatchDir(wctx, cl.id, root, recursive, func() { once.Do(func() { close(started) }) }, func(ev client.WatchEvent) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.events) == maxWatcherEvents {
				w.events = w.events[1:]
				w.overflow = true
			}
			w.events = append(w.events, fsEvent(root, ev))
			return nil
		}, fileOpt(cl))
		w.mu.Lock()
		if err == nil || wctx.Err() != nil {
			err = errors.New("the watch ended")
		}
		w.err = err
		w.mu.Unlock()
		once.Do(func() { close(started) })
	}()
	t := time.NewTimer(watcherStart)
	defer t.Stop()
	select {
	case <-started:
	case <-t.C:
		_ = ws.remove(cl, w.id)
		return "", connect.NewError(connect.CodeDeadlineExceeded, errors.New("the watch did not start in time"))
	case <-ctx.Done():
		_ = ws.remove(cl, w.id)
		return "", connectError(ctx.Err())
	}
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		_ = ws.remove(cl, w.id)
		return "", cl.fail(err)
	}
	return w.id, nil
}

// get finds cl's watcher id.
func (ws *watchers) get(cl *call, id string) (*watcher, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.sweepLocked(time.Now())
	w, ok := ws.m[id]
	if !ok || w.sandbox != cl.id || w.key != keyHash(cl) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %s not found", clip(id)))
	}
	return w, nil
}

// take returns and clears the events of cl's watcher id; a watcher
// whose watch ended, or that dropped events, fails (and is removed).
func (ws *watchers) take(cl *call, id string) ([]*filesystempb.FilesystemEvent, error) {
	w, err := ws.get(cl, id)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	evs, overflow, werr := w.events, w.overflow, w.err
	w.events, w.polled = nil, time.Now()
	w.mu.Unlock()
	switch {
	case overflow:
		_ = ws.remove(cl, id)
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watcher %s kept more than %d events between polls and dropped some; create it again", id, maxWatcherEvents))
	case werr != nil && len(evs) == 0:
		_ = ws.remove(cl, id)
		if err := cl.fail(werr); connect.CodeOf(err) == connect.CodeUnavailable {
			return nil, err // the sandbox ended
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("watcher %s: %v", id, werr))
	}
	if evs == nil {
		evs = []*filesystempb.FilesystemEvent{}
	}
	return evs, nil
}

// remove stops cl's watcher id.
func (ws *watchers) remove(cl *call, id string) error {
	w, err := ws.get(cl, id)
	if err != nil {
		return err
	}
	ws.mu.Lock()
	delete(ws.m, id)
	ws.mu.Unlock()
	w.cancel()
	return nil
}
