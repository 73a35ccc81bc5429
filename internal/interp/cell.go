package interp

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// overflowError names the error of a cell stopped for its output.
const overflowError = "OutputLimitExceeded"

// cellBuffer is how many events the kernel's stream may run ahead of the
// caller of Run before it waits (and with it, the kernel).
const cellBuffer = 64

// cell is one running cell: the kernel's stream goroutine turns frames
// and raw output into events for it (the fields below the line are only
// touched by that goroutine); Run's loop consumes them.
type cell struct {
	id     uint64
	lim    Limits
	events chan Event
	gone   chan struct{} // closed when Run no longer reads events
	intr   chan struct{} // an interrupt was requested (InterruptContext)
	// interruptFn interrupts the cell (SIGINT to the kernel).
	interruptFn func()

	ends       [2]bool
	endFrame   frame
	out        int
	outTrunc   bool
	overflowed bool
	resBytes   int
	resTrunc   bool
}

func newCell(id uint64, lim Limits, interrupt func()) *cell {
	return &cell{
		id: id, lim: lim, interruptFn: interrupt,
		events: make(chan Event, cellBuffer),
		gone:   make(chan struct{}),
		intr:   make(chan struct{}, 1),
	}
}

// deliver hands ev to Run, waiting while Run is behind.
func (cl *cell) deliver(ev Event) {
	select {
	case cl.events <- ev:
	case <-cl.gone:
	}
}

// requestInterrupt tells Run that the cell was interrupted on request.
func (cl *cell) requestInterrupt() {
	select {
	case cl.intr <- struct{}{}:
	default:
	}
}

// cutUTF8 returns at most n bytes of s, not splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// output passes text on within the output cap. Raw output over the cap
// interrupts the cell: nothing else would stop a command that writes
// without end, and past the agent's budget the kernel would go deaf.
func (cl *cell) output(typ EventType, text string, raw bool) {
	if text == "" {
		return
	}
	if room := cl.lim.MaxOutputBytes - cl.out; len(text) > room {
		cl.outTrunc = true
		text = cutUTF8(text, max(room, 0))
		if raw && !cl.overflowed {
			cl.overflowed = true
			cl.deliver(Event{Type: EventError, Error: &ExecError{Name: overflowError,
				Value: fmt.Sprintf("the cell wrote more than %d bytes of output; it was interrupted", cl.lim.MaxOutputBytes)}})
			// While this runs the stream is not read: the agent holds
			// the kernel's output back until the interrupt lands.
			cl.interruptFn()
		}
	}
	if text == "" {
		return
	}
	cl.out += len(text)
	cl.deliver(Event{Type: typ, Text: text})
}

// result passes a result on within the results cap.
func (cl *cell) result(r Result) {
	size := r.size()
	if cl.resBytes+size > cl.lim.MaxResultBytes {
		cl.resTrunc = true
		r = Result{
			IsMain:  r.IsMain,
			Text:    cutUTF8(r.Text, 1024),
			Omitted: fmt.Sprintf("a result of %d bytes, over the cell's limit of %d bytes for results", size, cl.lim.MaxResultBytes),
		}
		size = r.size()
	}
	cl.resBytes += size
	cl.deliver(Event{Type: EventResult, Result: &r})
}

// error passes the cell's error on.
func (cl *cell) error(e ExecError) {
	e.Value = cutUTF8(e.Value, cl.lim.MaxTextBytes)
	e.Traceback = cutUTF8(e.Traceback, cl.lim.MaxTextBytes)
	cl.deliver(Event{Type: EventError, Error: &e})
}

// endOn records the end frame of channel idx; once both channels ended,
// the cell is over.
func (cl *cell) endOn(idx int, f frame, k *kernel) {
	if cl.ends[idx] {
		return
	}
	cl.ends[idx] = true
	cl.endFrame.Truncated = cl.endFrame.Truncated || f.Truncated
	if f.Code != nil {
		cl.endFrame.Code = f.Code
	}
	if !cl.ends[0] || !cl.ends[1] {
		return
	}
	out, errs := k.flushCarries()
	cl.output(EventStdout, out, false)
	cl.output(EventStderr, errs, false)
	end := &End{
		OutputTruncated:  cl.endFrame.Truncated || cl.outTrunc,
		ResultsTruncated: cl.resTrunc,
	}
	if cl.endFrame.Code != nil {
		end.ExitCode = *cl.endFrame.Code
	}
	cl.deliver(Event{Type: EventEnd, End: end})
}

// runCell sends the cell to k and relays its events until its end (see
// Manager.Run). Call with c's slot held: release gives it back before the
// end event goes out, so that a caller may send the next cell as soon as
// it has seen the end.
func (c *codeContext) runCell(ctx context.Context, k *kernel, n int, req RunRequest, emit func(Event) error, release func()) error {
	m := c.b.m
	lim := m.lim
	cl := newCell(nextCellID(), lim, func() {
		if err := k.interrupt(context.Background()); err != nil {
			m.log.Debug("interrupt code kernel", "sandbox", c.b.id, "err", err)
		}
	})
	payload, err := drivers[c.lang].command(cl.id, req.Code, req.Env)
	if err != nil {
		return err
	}
	k.setCell(cl)
	var once sync.Once
	over := func() {
		once.Do(func() {
			k.clearCell(cl)
			close(cl.gone)
			release()
		})
	}
	defer over()

	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = k.send(sctx, payload)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("send the cell: %w", ctxErr(ctx))
		}
		k.kill()
		return fmt.Errorf("context %s did not take the cell; it was stopped (%v): %w", c.id, errdefs.Class(err), errdefs.ErrUnavailable)
	}

	var (
		status   Status // set by a timeout or interrupt; else from the outcome
		errEvent *ExecError
		emitErr  error
		killed   bool
		grace    <-chan time.Time
		again    <-chan time.Time
	)
	send := func(ev Event) {
		if emitErr == nil {
			emitErr = emit(ev)
		}
	}
	// interrupted starts the way out of a cell: SIGINT now (unless the
	// caller sent it), again halfway through the grace period (one can
	// land before the driver is ready for it), and a kill at its end.
	interrupted := func(s Status, signal bool) {
		if status == "" {
			status = s
		}
		if grace != nil {
			return
		}
		if signal {
			go cl.interruptFn()
		}
		again = time.After(lim.InterruptGrace / 2)
		grace = time.After(lim.InterruptGrace)
	}
	timeout := time.NewTimer(req.Timeout)
	defer timeout.Stop()
	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	done := ctx.Done()

	finish := func(e *End) error {
		e.ContextID, e.Language, e.ExecutionCount = c.id, c.lang, n
		e.Duration = time.Since(start)
		if c.lang == Bash && e.ExitCode != 0 && errEvent == nil {
			errEvent = &ExecError{Name: "ExitStatus", Value: fmt.Sprintf("exit status %d", e.ExitCode)}
			send(Event{Type: EventError, Error: errEvent})
		}
		switch {
		case status != "":
		case errEvent != nil:
			status = StatusError
		default:
			status = StatusOK
		}
		e.Status = status
		if k.spent() {
			// Record the reason first: once killed, the stream's end may
			// record "killed by signal 9" before this line ran.
			c.kernelExited(k, "it used up its output budget (64 MiB over its life)")
			k.kill()
			note := "[airlock] this context has sent 64 MiB of output over its life, the most a context may; it was stopped and its state is lost"
			if c.isDefault {
				note += "; the next cell starts a fresh one"
			}
			send(Event{Type: EventStderr, Text: note + "\n"})
		}
		over()
		send(Event{Type: EventEnd, End: e})
		return emitErr
	}
	handle := func(ev Event) (end *End) {
		switch ev.Type {
		case EventEnd:
			return ev.End
		case EventError:
			if errEvent != nil {
				return nil // at most one error per cell: the first
			}
			errEvent = ev.Error
			if ev.Error.Name == overflowError {
				interrupted(StatusInterrupted, false)
			}
		}
		send(ev)
		if emitErr != nil && done != nil {
			done = nil
			interrupted(StatusInterrupted, true)
		}
		return nil
	}
	for {
		select {
		case ev := <-cl.events:
			if e := handle(ev); e != nil {
				return finish(e)
			}
		case <-timeout.C:
			interrupted(StatusTimeout, true)
		case <-cl.intr:
			interrupted(StatusInterrupted, false)
		case <-again:
			again = nil
			go cl.interruptFn()
		case <-grace:
			grace = nil
			killed = true
			k.kill()
		case <-done:
			done = nil
			interrupted(StatusInterrupted, true)
		case <-keepalive.C:
			_ = m.sb.Touch(c.b.id) // a running cell is activity of the sandbox
		case <-k.exited:
			// Everything the stream delivered is in the buffer.
			for len(cl.events) > 0 {
				if e := handle(<-cl.events); e != nil {
					return finish(e)
				}
			}
			return c.died(k, cl, killed, status, errEvent != nil, start, n, send, &emitErr, over)
		}
	}
}

// died ends a cell whose kernel ended before the cell did.
func (c *codeContext) died(k *kernel, cl *cell, killed bool, status Status, hadError bool, start time.Time, n int,
	send func(Event), emitErr *error, over func()) error {
	msg := fmt.Sprintf("the %s context died: %s; its state is lost", c.lang, k.exitReason())
	if killed {
		msg = fmt.Sprintf("the cell did not stop within %v of the interrupt, so its %s context was killed; its state is lost",
			c.b.m.lim.InterruptGrace, c.lang)
	}
	if !c.isDefault {
		msg += "; restart the context to go on"
	}
	if status == "" {
		status = StatusDied
	}
	if !hadError {
		send(Event{Type: EventError, Error: &ExecError{Name: "ContextDied", Value: msg}})
	}
	over()
	send(Event{Type: EventEnd, End: &End{
		ContextID: c.id, Language: c.lang, ExecutionCount: n, Status: status,
		OutputTruncated: cl.outTrunc, ResultsTruncated: cl.resTrunc, Duration: time.Since(start),
	}})
	return *emitErr
}
