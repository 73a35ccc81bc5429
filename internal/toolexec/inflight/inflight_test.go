package inflight

import (
	"context"
	"testing"
	"time"
)

// TestTenants: a tenant gets Max slots and no more; a slot given back
// can be taken again; other tenants are not counted against it.
func TestTenants(t *testing.T) {
	ts := &Tenants{Max: 2}
	d1, ok1 := ts.Take("a")
	_, ok2 := ts.Take("a")
	if !ok1 || !ok2 {
		t.Fatal("the first two slots of a were refused")
	}
	if _, ok := ts.Take("a"); ok {
		t.Fatal("a third slot of a was given")
	}
	if _, ok := ts.Take("b"); !ok {
		t.Fatal("b was refused for a's slots")
	}
	d1()
	if _, ok := ts.Take("a"); !ok {
		t.Fatal("a's slot given back was not taken again")
	}
}

// TestSlot: a full semaphore waits until its context ends.
func TestSlot(t *testing.T) {
	sem := make(chan struct{}, 1)
	free, err := Slot(context.Background(), sem)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Slot(ctx, sem); err == nil {
		t.Fatal("a full semaphore gave a slot")
	}
	free()
	if _, err := Slot(context.Background(), sem); err != nil {
		t.Fatalf("a freed slot: %v", err)
	}
}
