// Package testns gives tests network namespaces of their own, so that
// network tests talk only to hosts they make: New makes one with lo up,
// In runs a function on a thread inside one (sockets it opens stay
// there). Only tests import it.
package testns

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// New returns a new network namespace with lo up, closed when t ends.
// The thread that made it is never given back to the Go scheduler: it
// ends with its goroutine.
func New(t testing.TB) *os.File {
	t.Helper()
	type res struct {
		f   *os.File
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			var lo netlink.Link
			if lo, err = netlink.LinkByName("lo"); err == nil {
				err = netlink.LinkSetUp(lo)
			}
		}
		ch <- res{f, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("new netns: %v", r.err)
	}
	t.Cleanup(func() { r.f.Close() })
	return r.f
}

// In runs f on a thread in ns and returns its error; sockets f opens
// stay in ns. The thread is never given back to the Go scheduler.
func In(ns *os.File, f func() error) error {
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		ch <- f()
	}()
	return <-ch
}
