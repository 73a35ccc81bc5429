package testns

import (
	"net"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestNewIsolated: a listener in one new namespace is not reachable from
// another, and is from inside its own.
func TestNewIsolated(t *testing.T) {
	testutil.RequireRoot(t, "needs root to make network namespaces")
	a, b := New(t), New(t)
	var ln net.Listener
	if err := In(a, func() (err error) { ln, err = net.Listen("tcp4", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	dial := func() error {
		c, err := net.Dial("tcp4", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := In(a, dial); err != nil {
		t.Errorf("dial inside its namespace: %v", err)
	}
	if err := In(b, dial); err == nil {
		t.Error("dial from another namespace reached the listener")
	}
}
