package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// reapFallback is how often the reaper polls even without SIGCHLD.
const reapFallback = time.Second

// reaper collects the exit statuses of the agent's children.
//
// With all set (the agent is PID 1, or a subreaper) one goroutine reaps
// every child on SIGCHLD with wait4(-1) and hands the statuses of
// registered pids to their channels; the statuses of orphans that were
// reparented to the agent are dropped. Forking and registering happen under
// the same lock as reaping, so a child that exits at once is never reaped
// before it is registered, and a pid is never reused in between.
//
// Without all, each child is waited for by its own goroutine with
// wait4(pid), leaving other children of the process alone (the agent may
// run inside a test binary or another program).
type reaper struct {
	all     bool
	mu      sync.Mutex
	waiters map[int]chan<- exitInfo
	sigs    chan os.Signal
	stop    chan struct{}
	done    chan struct{}
}

func newReaper(all bool) (*reaper, error) {
	r := &reaper{all: all}
	if all {
		r.waiters = make(map[int]chan<- exitInfo)
		r.sigs = make(chan os.Signal, 1)
		r.stop = make(chan struct{})
		r.done = make(chan struct{})
		signal.Notify(r.sigs, syscall.SIGCHLD)
		go r.loop()
	}
	return r, nil
}

// start calls fork and arranges for the child's exit status to be sent on
// ch (buffered). A fork that returns a pid together with an error (the
// child runs, but something around the fork failed) is still waited for.
func (r *reaper) start(fork func() (int, error), ch chan<- exitInfo) (int, error) {
	if !r.all {
		pid, err := fork()
		if pid > 0 {
			go waitPid(pid, ch)
		}
		return pid, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if pid > 0 {
		r.waiters[pid] = ch
	}
	return pid, err
}

// close stops the reap loop. Children that exit later stay zombies.
func (r *reaper) close() {
	if !r.all {
		return
	}
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
}

func (r *reaper) loop() {
	defer close(r.done)
	tick := time.NewTicker(reapFallback)
	defer tick.Stop()
	for {
		r.reap()
		select {
		case <-r.stop:
			return
		case <-r.sigs:
		case <-tick.C:
		}
	}
}

// reap collects every child that has exited.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- toExitInfo(ws, &ru)
		}
	}
}

// waitPid waits for one child and sends its status on ch.
func waitPid(pid int, ch chan<- exitInfo) {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		_, err := syscall.Wait4(pid, &ws, 0, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// Someone else reaped it (ECHILD).
			ch <- exitInfo{lost: true}
			return
		}
		ch <- toExitInfo(ws, &ru)
		return
	}
}

func toExitInfo(ws syscall.WaitStatus, ru *syscall.Rusage) exitInfo {
	info := exitInfo{
		cpu:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSS: uint64(max(ru.Maxrss, 0)),
	}
	switch {
	case ws.Exited():
		info.exited = true
		info.code = ws.ExitStatus()
	case ws.Signaled():
		info.signal = int(ws.Signal())
	default:
		info.lost = true
	}
	return info
}
