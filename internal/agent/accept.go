package agent

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// acceptEach accepts connections on ln until ctx ends (nil) or ln fails
// (its error), and runs handle on each in a goroutine counted in wg, at
// most limit at once: a connection past that is closed at once. Running
// out of descriptors, or a connection aborted before it was accepted,
// backs off (5 ms doubling to 1 s) instead of failing.
func acceptEach(ctx context.Context, ln net.Listener, wg *sync.WaitGroup, limit int, handle func(net.Conn)) error {
	slots := make(chan struct{}, limit)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			return err
		}
		backoff = 0
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			handle(c)
		}()
	}
}
