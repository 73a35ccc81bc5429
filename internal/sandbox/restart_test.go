package sandbox

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

func TestRestartAdoption(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	cfg := Config{PoolSize: map[string]int{"host": 1}, MaxLifetime: time.Hour, DefaultTimeout: time.Minute}
	m1 := e.manager(cfg)
	eventually(t, 5*time.Second, "pool fill", func() bool { return poolReady(m1, "host") == 1 })

	// claimed: from the pool (record only in the state file).
	claimed, err := m1.Create(ctx, Spec{Owner: "tenant-a", Metadata: map[string]string{"kind": "claimed"}, Env: map[string]string{"E": "1"}, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// cold: custom limits (record in the labels), then extended (state file).
	cold, err := m1.Create(ctx, Spec{Metadata: map[string]string{"kind": "cold"}, Limits: runtime.Limits{Pids: 100}})
	if err != nil {
		t.Fatal(err)
	}
	cold, err = m1.SetTimeout(ctx, cold.ID, 50*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// plain: labels only.
	plain, err := m1.Create(ctx, Spec{Owner: "tenant-b", Metadata: map[string]string{"kind": "plain"}, Limits: runtime.Limits{Pids: 100}, Timeout: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// doomed: expires while no daemon runs.
	doomed, err := m1.Create(ctx, Spec{Limits: runtime.Limits{Pids: 100}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "pool refill", func() bool { return poolReady(m1, "host") == 1 })

	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	live := e.rt.Live()
	for _, id := range []string{claimed.ID, cold.ID, plain.ID, doomed.ID} {
		if !slices.Contains(live, id) {
			t.Fatalf("Close stopped sandbox %s", id)
		}
	}
	if len(live) != 4 {
		t.Errorf("runtime holds %v after Close, want the 4 sandboxes and no pool member", live)
	}

	// A crashed daemon may leave an unclaimed pool member and foreign
	// sandboxes behind.
	orphanLabels, err := encodeLabels(persisted{Version: 1, Template: "host", Pool: true, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := runtime.Rootfs{Layers: []string{"/nonexistent"}}
	if _, err := e.rt.Create(ctx, runtime.Spec{ID: "sb-orphanpoolmember", Labels: orphanLabels, Rootfs: rootfs}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Create(ctx, runtime.Spec{ID: "sb-nolabels", Rootfs: rootfs}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Create(ctx, runtime.Spec{ID: "sb-badlabels", Labels: map[string]string{labelKey: "{"}, Rootfs: rootfs}); err != nil {
		t.Fatal(err)
	}
	// And a stale state file of a sandbox that is gone.
	stale := filepath.Join(e.stateDir, "sb-gone.json")
	if err := os.WriteFile(stale, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // let doomed expire

	ends := &endLog{}
	m2 := e.newManager(Config{MaxLifetime: time.Hour, DefaultTimeout: time.Minute, Ends: ends})
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Start returns with every live sandbox known (adopting, or running
	// already); the rest happens in the background.
	for _, want := range []Sandbox{claimed, cold, plain} {
		if got, err := m2.Get(want.ID); err != nil || (got.State != StateAdopting && got.State != StateRunning) {
			t.Errorf("%s right after Start: %+v %v, want adopting or running", want.ID, got, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m2.WaitRecovered(wctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []Sandbox{claimed, cold, plain} {
		got, err := m2.Get(want.ID)
		if err != nil {
			t.Errorf("%s (%s) not adopted: %v", want.ID, want.Metadata["kind"], err)
			continue
		}
		if got.State != StateRunning || got.Owner != want.Owner || got.Template != want.Template || got.Metadata["kind"] != want.Metadata["kind"] ||
			!got.ExpiresAt.Equal(want.ExpiresAt) || !got.CreatedAt.Equal(want.CreatedAt) ||
			!got.MaxExpiresAt.Equal(want.MaxExpiresAt) || got.Limits != want.Limits || got.IdleTimeout != want.IdleTimeout {
			t.Errorf("adopted %s:\n got %+v\nwant %+v", want.Metadata["kind"], got, want)
		}
	}
	if got, _ := m2.Get(claimed.ID); got.Env["E"] != "1" {
		t.Errorf("claimed sandbox lost its env: %v", got.Env)
	}
	live = e.rt.Live()
	for _, id := range []string{doomed.ID, "sb-orphanpoolmember", "sb-nolabels", "sb-badlabels"} {
		if slices.Contains(live, id) {
			t.Errorf("%s survived adoption", id)
		}
		if sb, err := m2.Get(id); err == nil && sb.State != StateStopped {
			t.Errorf("%s is %s, want stopped or gone", id, sb.State)
		}
	}
	// Each end but the pool member's is on the record, with its reason.
	wantEnds := map[string]string{doomed.ID: EndExpired, "sb-nolabels": EndNoRecord, "sb-badlabels": EndNoRecord, "sb-gone": EndAgentGone}
	if got := ends.reasons(); !maps.Equal(got, wantEnds) {
		t.Errorf("ends recorded %v, want %v", got, wantEnds)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale state file kept: %v", err)
	}

	// Adopted sandboxes are fully usable and count against the limit.
	if _, err := m2.SetTimeout(ctx, plain.ID, 40*time.Minute); err != nil {
		t.Errorf("SetTimeout on adopted: %v", err)
	}
	if err := m2.Destroy(ctx, cold.ID); err != nil {
		t.Errorf("Destroy adopted: %v", err)
	}
	m2.mu.Lock()
	active := m2.active
	m2.mu.Unlock()
	if active != 2 {
		t.Errorf("active = %d, want 2", active)
	}
}
