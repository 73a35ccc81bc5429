package agent

import (
	"bytes"
	"os"
	"sync"
	"sync/atomic"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
)

const (
	// outputChunk is the read size of an output pump and so the largest
	// Output event.
	outputChunk = 32 << 10
	// subscriberBuffer is how many events a subscriber may lag behind
	// before it slows the pumps down (and with them the process).
	subscriberBuffer = 16
	// drainWindow is how long after the main process exits the agent
	// waits for its output pipes to reach EOF. Background children that
	// hold them open do not delay the exit event longer than this.
	drainWindow = 50 * time.Millisecond
	// drainMax bounds the wait for a slow subscriber to take the output
	// the process wrote before it exited.
	drainMax = 30 * time.Second
	// drainPoll is how often the drain checks progress after drainWindow.
	drainPoll = 2 * time.Millisecond
)

// subscriber is one stream (Start or Connect) that receives a process's
// events. Its channel is bounded: a slow subscriber applies backpressure.
type subscriber struct {
	ch   chan *agentv1.ProcessEvent
	gone chan struct{}
	once sync.Once
}

func newSubscriber() *subscriber {
	return &subscriber{
		ch:   make(chan *agentv1.ProcessEvent, subscriberBuffer),
		gone: make(chan struct{}),
	}
}

// leave marks the subscriber as gone; publishers stop waiting for it.
func (s *subscriber) leave() { s.once.Do(func() { close(s.gone) }) }

// deliver hands ev to s, waiting while s is full. It reports false when s
// has left.
func (s *subscriber) deliver(ev *agentv1.ProcessEvent) bool {
	select {
	case <-s.gone:
		return false
	default:
	}
	select {
	case s.ch <- ev:
		return true
	case <-s.gone:
		return false
	}
}

// fanout distributes a process's events to its subscribers, in order.
// Once finished (the exit event was published) it accepts no more events;
// late subscribers get the exit event only.
type fanout struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
	exit *agentv1.ProcessEvent
}

// subscribe adds s. When the process has already finished it returns the
// exit event instead and s is not added.
func (f *fanout) subscribe(s *subscriber) *agentv1.ProcessEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exit != nil {
		return f.exit
	}
	if f.subs == nil {
		f.subs = make(map[*subscriber]struct{})
	}
	f.subs[s] = struct{}{}
	return nil
}

// publishOutput sends a copy of data to every subscriber. With no
// subscriber (or after the exit) the data is dropped without copying.
func (f *fanout) publishOutput(stderr bool, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exit != nil || len(f.subs) == 0 {
		return
	}
	out := &agentv1.ProcessEvent_Output{}
	if stderr {
		out.Data = &agentv1.ProcessEvent_Output_Stderr{Stderr: bytes.Clone(data)}
	} else {
		out.Data = &agentv1.ProcessEvent_Output_Stdout{Stdout: bytes.Clone(data)}
	}
	ev := &agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Output_{Output: out}}
	f.deliverLocked(ev)
}

// finish publishes the exit event, after every output event published
// before it, and closes the fanout.
func (f *fanout) finish(ev *agentv1.ProcessEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exit = ev
	f.deliverLocked(ev)
	f.subs = nil
}

func (f *fanout) deliverLocked(ev *agentv1.ProcessEvent) {
	for s := range f.subs {
		if !s.deliver(ev) {
			delete(f.subs, s)
		}
	}
}

// outStream is the agent's end of one output pipe (or of the terminal).
type outStream struct {
	f      *os.File
	stderr bool
	limit  uint64
	// forwarded is only touched by the pump goroutine.
	forwarded uint64
	// read counts bytes read from f; handled counts bytes read and then
	// published or discarded. handled <= read.
	read, handled atomic.Uint64
	truncated     atomic.Bool
	eof           chan struct{}
}

func newOutStream(f *os.File, stderr bool, limit uint64) *outStream {
	return &outStream{f: f, stderr: stderr, limit: limit, eof: make(chan struct{})}
}

// pump reads s until EOF (or, for a terminal, EIO), forwarding at most
// s.limit bytes to fan and discarding the rest. It never blocks the writer
// because of the cap, and it keeps reading after the exit event so that
// background children holding the pipe do not get SIGPIPE; it closes the
// file at EOF.
func (s *outStream) pump(fan *fanout) {
	defer close(s.eof)
	defer s.f.Close()
	buf := make([]byte, outputChunk)
	for {
		n, err := s.f.Read(buf)
		if n > 0 {
			s.read.Add(uint64(n))
			m := uint64(n)
			if room := s.limit - s.forwarded; m > room {
				m = room
				s.truncated.Store(true)
			}
			if m > 0 {
				fan.publishOutput(s.stderr, buf[:m])
				s.forwarded += m
			}
			s.handled.Add(uint64(n))
		}
		if err != nil {
			return
		}
	}
}

// drain waits, after the main process exited at exitAt, for the output
// of streams to be published: until every stream reaches EOF, but once
// drainWindow has passed only until the bytes that were already in the
// pipes (everything the main process wrote) have been handled.
func drain(exitAt time.Time, streams ...*outStream) {
	allEOF := func() bool {
		for _, s := range streams {
			select {
			case <-s.eof:
			default:
				return false
			}
		}
		return true
	}
	window := time.NewTimer(time.Until(exitAt.Add(drainWindow)))
	defer window.Stop()
	for _, s := range streams {
		select {
		case <-s.eof:
			continue
		case <-window.C:
		}
		break
	}
	if allEOF() {
		return
	}
	// Queued bytes first, then the read count: their sum is at least what
	// had been written when the queue was measured, which is after exit.
	targets := make([]uint64, len(streams))
	for i, s := range streams {
		q := pendingBytes(s.f)
		targets[i] = q + s.read.Load()
	}
	deadline := exitAt.Add(drainMax)
	for time.Now().Before(deadline) {
		done := true
		for i, s := range streams {
			select {
			case <-s.eof:
				continue
			default:
			}
			if s.handled.Load() < targets[i] {
				done = false
			}
		}
		if done {
			return
		}
		time.Sleep(drainPoll)
	}
}
