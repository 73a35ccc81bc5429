package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The deadline is the agent's own end of its sandbox: the backstop for a
// sandbox whose daemon is not running when it expires. The daemon gives
// the agent a time (Options.Deadline at start, SetDeadline whenever the
// sandbox's expiry changes) some seconds after the sandbox's expiry, so
// that its own reaper, when it runs, ends the sandbox first and records
// why. When the time comes and the agent is still alive, nobody ended the
// sandbox: the agent kills every process of it (KillAll's killAll) and
// calls Options.End, which under the native runtime exits the agent; as
// PID 1 its exit makes the kernel kill whatever is left of the PID
// namespace. The next daemon finds the agent gone and records the end as
// expired.
//
// Clocks. The time arrives as the host's wall clock (the daemon's expiry
// is wall-clock time: it is persisted and survives restarts). The agent
// reads the wall clock once, on receipt, to turn it into a time left, and
// from then on counts on CLOCK_BOOTTIME (a timerfd, see alarm). Nothing in
// a sandbox can set any clock: the wall clock needs CAP_SYS_TIME in the
// host's user namespace, and a time namespace, the only way to offset the
// monotonic and boot clocks, cannot be made inside a sandbox
// (max_time_namespaces is 0 there, and the agent is in the host's). Boot
// time rather than the wall clock, because the host's wall clock may be
// stepped (NTP, an operator) and should not shorten or lengthen a running
// sandbox; boot time rather than CLOCK_MONOTONIC (Go's timers), because
// monotonic time stops while the host is suspended, and a sandbox's
// expiry counts real time: after a suspend the deadline is as due as the
// daemon's wall-clock expiry.

// deadlineKillWait bounds the kill of every process when the deadline
// fires; the agent ends the sandbox after it either way.
const deadlineKillWait = 10 * time.Second

// deadline holds the sandbox's deadline and ends the sandbox when it
// passes.
type deadline struct {
	a   *Agent
	end func()

	mu    sync.Mutex
	alarm *alarm
	at    time.Duration // on the boot clock (bootNow); valid when set
	set   bool
	fired bool
}

// newDeadline starts the deadline service; a non-zero at sets the first
// deadline. Without end it holds no deadline and refuses to take one.
func newDeadline(a *Agent, end func(), at time.Time) (*deadline, error) {
	d := &deadline{a: a, end: end}
	if end == nil {
		return d, nil
	}
	al, err := newAlarm()
	if err != nil {
		return nil, fmt.Errorf("agent: deadline timer: %w", err)
	}
	d.alarm = al
	if !at.IsZero() {
		if _, err := d.setTo(at); err != nil {
			_ = al.close()
			return nil, err
		}
	}
	go d.run()
	return d, nil
}

// setTo makes at (wall clock; zero clears) the deadline and returns the
// time left, as the boot clock counts it (ok false when cleared).
func (d *deadline) setTo(at time.Time) (left time.Duration, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fired {
		return 0, fmt.Errorf("the sandbox is ending: its deadline has passed: %w", errdefs.ErrFailedPrecondition)
	}
	if at.IsZero() {
		d.set = false
		return 0, d.alarm.disarm()
	}
	// The one read of the wall clock: at has no monotonic reading, so
	// Until compares wall-clock times.
	left = time.Until(at)
	d.at, d.set = bootNow()+left, true
	return left, d.alarm.arm(d.at)
}

// remaining returns the time left before the deadline, if there is one.
func (d *deadline) remaining() (time.Duration, bool) {
	if d.alarm == nil {
		return 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.set {
		return 0, false
	}
	return d.at - bootNow(), true
}

// run waits for the alarm and ends the sandbox when the deadline has
// really passed (the alarm may have fired just as SetDeadline moved it).
// It returns when the alarm is closed.
func (d *deadline) run() {
	for {
		if err := d.alarm.wait(); err != nil {
			return
		}
		d.mu.Lock()
		due := d.set && !d.fired && bootNow() >= d.at
		if due {
			d.fired = true
		}
		d.mu.Unlock()
		if due {
			d.fire()
			return
		}
	}
}

// fire ends the sandbox: every process killed, then Options.End.
func (d *deadline) fire() {
	log := d.a.log
	log.Warn("the sandbox's deadline has passed and no daemon has ended it: ending it")
	ctx, cancel := context.WithTimeout(context.Background(), deadlineKillWait)
	killed, left, err := d.a.procs.killAll(ctx)
	cancel()
	log.Info("killed every process at the deadline", "killed", killed, "left", left, "err", err)
	d.end()
}

// close stops the deadline; it never fires after close returns, unless
// it is firing already.
func (d *deadline) close() error {
	if d.alarm == nil {
		return nil
	}
	d.mu.Lock()
	d.set = false
	d.mu.Unlock()
	return d.alarm.close()
}

// SetDeadline implements the AgentService RPC (see deadline).
func (s *infoService) SetDeadline(ctx context.Context, req *connect.Request[agentv1.SetDeadlineRequest]) (*connect.Response[agentv1.SetDeadlineResponse], error) {
	d := s.a.deadline
	if d.alarm == nil {
		return nil, agentwire.ToConnect(fmt.Errorf("this agent cannot end its sandbox by itself: %w", errdefs.ErrNotSupported))
	}
	n := req.Msg.GetEndAtUnixNano()
	if n < 0 {
		return nil, agentwire.ToConnect(invalidf("end_at_unix_nano must not be negative"))
	}
	var at time.Time
	if n > 0 {
		at = time.Unix(0, n)
	}
	left, err := d.setTo(at)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	res := &agentv1.SetDeadlineResponse{}
	if n > 0 {
		ms := left.Milliseconds()
		res.DeadlineInMs = &ms
		s.a.log.Info("deadline set", "in", left.Round(time.Millisecond))
	} else {
		s.a.log.Info("deadline cleared")
	}
	return connect.NewResponse(res), nil
}
