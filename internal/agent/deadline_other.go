//go:build !linux

package agent

import (
	"errors"
	"sync"
	"time"
)

// bootBase makes bootNow a reading of Go's monotonic clock: systems
// without CLOCK_BOOTTIME count the deadline on it.
var bootBase = time.Now()

func bootNow() time.Duration { return time.Since(bootBase) }

// alarm is a timer on bootNow's clock.
type alarm struct {
	mu     sync.Mutex
	t      *time.Timer
	fired  chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newAlarm() (*alarm, error) {
	return &alarm{fired: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

func (a *alarm) arm(at time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.t != nil {
		a.t.Stop()
	}
	a.t = time.AfterFunc(at-bootNow(), func() {
		select {
		case a.fired <- struct{}{}:
		default:
		}
	})
	return nil
}

func (a *alarm) disarm() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.t != nil {
		a.t.Stop()
	}
	return nil
}

func (a *alarm) wait() error {
	select {
	case <-a.fired:
		return nil
	case <-a.closed:
		return errors.New("alarm closed")
	}
}

func (a *alarm) close() error {
	a.once.Do(func() { close(a.closed) })
	_ = a.disarm()
	return nil
}
