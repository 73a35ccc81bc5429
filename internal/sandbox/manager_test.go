package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// staticSource is a template that resolves to a fixed rootfs (the fake
// runtime does not mount it).
type staticSource struct{ name string }

func (s staticSource) Name() string { return s.name }
func (s staticSource) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Rootfs{}, err
	}
	return runtime.Rootfs{Layers: []string{"/nonexistent/" + s.name}}, nil
}

// env is one test's runtime, registry and state dir; managers built with
// env.manager share them, as a restarted daemon would.
type env struct {
	t         testing.TB
	rt        *runtimefake.Runtime
	templates *template.Registry
	stateDir  string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Errorf("runtime close: %v", err)
		}
	})
	reg, err := template.NewRegistry(staticSource{"host"}, staticSource{"other"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, rt: rt, templates: reg, stateDir: filepath.Join(t.TempDir(), "state")}
}

// manager builds and starts a Manager; cfg's StateDir is filled in. It is
// closed at the end of the test.
func (e *env) manager(cfg Config) *Manager {
	e.t.Helper()
	m := e.newManager(cfg)
	if err := m.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// recovered starts a manager on e's runtime and state, as a restarted
// daemon would, and waits up to 10 s for its recovery to finish.
func (e *env) recovered(cfg Config) *Manager {
	e.t.Helper()
	m := e.manager(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitRecovered(ctx); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) newManager(cfg Config) *Manager {
	e.t.Helper()
	cfg.StateDir = e.stateDir
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = -1
	}
	m, err := New(e.rt, e.templates, cfg, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stateOf(m *Manager, id string) State {
	sb, err := m.Get(id)
	if err != nil {
		return ""
	}
	return sb.State
}

// skipWithoutProcesses skips when the agent has no process service yet.
func skipWithoutProcesses(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, errdefs.ErrNotSupported) {
		t.Skip("agent process service not implemented")
	}
}

func TestCreateExecDestroy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb, err := m.Create(ctx, Spec{
		Env:      map[string]string{"FOO": "from-sandbox", "KEEP": "kept"},
		Metadata: map[string]string{"owner": "alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !ValidID(sb.ID) || !runtime.IDPattern.MatchString(sb.ID) {
		t.Errorf("id %q is malformed", sb.ID)
	}
	if sb.State != StateRunning || sb.Template != "host" || sb.Metadata["owner"] != "alice" {
		t.Errorf("created sandbox = %+v", sb)
	}
	if sb.Limits != m.Config().DefaultLimits {
		t.Errorf("limits = %+v, want defaults %+v", sb.Limits, m.Config().DefaultLimits)
	}
	if d := sb.ExpiresAt.Sub(sb.CreatedAt); d != 5*time.Minute {
		t.Errorf("expiry %v after creation, want the 5m default", d)
	}
	if d := sb.MaxExpiresAt.Sub(sb.CreatedAt); d != 24*time.Hour {
		t.Errorf("max expiry %v after creation, want 24h", d)
	}
	sb.Metadata["owner"] = "mallory"
	if got, _ := m.Get(sb.ID); got.Metadata["owner"] != "alice" {
		t.Error("snapshot shares its metadata map with the record")
	}

	t.Run("exec", func(t *testing.T) {
		var out bytes.Buffer
		res, err := m.Exec(ctx, sb.ID, agentclient.ExecRequest{
			Shell:  `echo "$FOO $KEEP $BAR"`,
			Env:    map[string]string{"FOO": "from-request", "BAR": "bar"},
			Stdout: &out,
		})
		skipWithoutProcesses(t, err)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != agentclient.StatusSuccess || res.ExitCode != 0 {
			t.Fatalf("exec result = %+v", res)
		}
		if got := strings.TrimSpace(out.String()); got != "from-request kept bar" {
			t.Errorf("output = %q, want request env over sandbox env", got)
		}
	})

	t.Run("files", func(t *testing.T) {
		if _, err := m.WriteFile(ctx, sb.ID, "dir/a.txt", strings.NewReader("hello"), agentclient.WriteOptions{MakeParents: true}); err != nil {
			if errors.Is(err, errdefs.ErrNotSupported) {
				t.Skip("agent file service not implemented")
			}
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := m.ReadFile(ctx, sb.ID, "dir/a.txt", &buf); err != nil || buf.String() != "hello" {
			t.Fatalf("ReadFile = %q, %v", buf.String(), err)
		}
		if _, err := m.MakeDir(ctx, sb.ID, "dir/sub", false); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Move(ctx, sb.ID, "dir/a.txt", "dir/sub/b.txt"); err != nil {
			t.Fatal(err)
		}
		if info, err := m.Stat(ctx, sb.ID, "dir/sub/b.txt"); err != nil || info.Size != 5 {
			t.Fatalf("Stat = %+v, %v", info, err)
		}
		entries, _, err := m.ListDir(ctx, sb.ID, "dir", 2)
		if err != nil || len(entries) != 2 {
			t.Fatalf("ListDir = %+v, %v", entries, err)
		}
		if err := m.Remove(ctx, sb.ID, "dir", true); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Stat(ctx, sb.ID, "dir"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Stat after Remove = %v, want ErrNotFound", err)
		}
	})

	if st, err := m.Stats(ctx, sb.ID); err != nil {
		t.Errorf("Stats: %v (%+v)", err, st)
	}
	if err := m.Touch(sb.ID); err != nil {
		t.Errorf("Touch: %v", err)
	}

	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := stateOf(m, sb.ID); got != StateStopped {
		t.Errorf("state after Destroy = %q, want stopped", got)
	}
	if live := e.rt.Live(); len(live) != 0 {
		t.Errorf("runtime still holds %v", live)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Errorf("second Destroy = %v, want nil", err)
	}
	if _, err := m.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Exec on stopped sandbox = %v, want ErrFailedPrecondition", err)
	}
	if _, err := m.SetTimeout(ctx, sb.ID, time.Minute); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("SetTimeout on stopped sandbox = %v, want ErrFailedPrecondition", err)
	}
	if err := m.Destroy(ctx, "sb-unknown"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Destroy(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := m.Exec(ctx, "sb-unknown", agentclient.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Exec(unknown) = %v, want ErrNotFound", err)
	}
}

func TestInvalidSpecs(t *testing.T) {
	e := newEnv(t)
	m := e.manager(Config{})
	many := map[string]string{}
	for i := range MaxMapKeys + 1 {
		many[fmt.Sprintf("K%d", i)] = "v"
	}
	tests := []struct {
		name string
		spec Spec
		want error
	}{
		{"unknown template", Spec{Template: "nope"}, errdefs.ErrNotFound},
		{"bad template name", Spec{Template: "../etc"}, errdefs.ErrInvalidArgument},
		{"negative memory", Spec{Limits: runtime.Limits{MemoryBytes: -1}}, errdefs.ErrInvalidArgument},
		{"negative cpus", Spec{Limits: runtime.Limits{CPUs: -0.5}}, errdefs.ErrInvalidArgument},
		{"memory above max", Spec{Limits: runtime.Limits{MemoryBytes: 1 << 50}}, errdefs.ErrInvalidArgument},
		{"pids above max", Spec{Limits: runtime.Limits{Pids: 1 << 30}}, errdefs.ErrInvalidArgument},
		{"cpus above max", Spec{Limits: runtime.Limits{CPUs: 1e6}}, errdefs.ErrInvalidArgument},
		{"nofile above max", Spec{Limits: runtime.Limits{NoFile: 1 << 40}}, errdefs.ErrInvalidArgument},
		{"negative timeout", Spec{Timeout: -time.Second}, errdefs.ErrInvalidArgument},
		{"timeout above max lifetime", Spec{Timeout: 25 * time.Hour}, errdefs.ErrInvalidArgument},
		{"negative idle", Spec{IdleTimeout: -1}, errdefs.ErrInvalidArgument},
		{"too many env keys", Spec{Env: many}, errdefs.ErrInvalidArgument},
		{"too many metadata keys", Spec{Metadata: many}, errdefs.ErrInvalidArgument},
		{"long env key", Spec{Env: map[string]string{strings.Repeat("K", MaxKeyBytes+1): "v"}}, errdefs.ErrInvalidArgument},
		{"long metadata value", Spec{Metadata: map[string]string{"k": strings.Repeat("v", MaxValueBytes+1)}}, errdefs.ErrInvalidArgument},
		{"env key with =", Spec{Env: map[string]string{"A=B": "v"}}, errdefs.ErrInvalidArgument},
		{"env key empty", Spec{Env: map[string]string{"": "v"}}, errdefs.ErrInvalidArgument},
		{"env value NUL", Spec{Env: map[string]string{"A": "x\x00y"}}, errdefs.ErrInvalidArgument},
		{"metadata key empty", Spec{Metadata: map[string]string{"": "v"}}, errdefs.ErrInvalidArgument},
		{"metadata invalid utf8", Spec{Metadata: map[string]string{"k": "\xff"}}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Create(context.Background(), tt.spec)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Create = %v, want %v", err, tt.want)
			}
		})
	}
	if n := e.rt.Creates(); n != 0 {
		t.Errorf("invalid specs created %d sandboxes", n)
	}
	if l := m.List(Filter{}); len(l) != 0 {
		t.Errorf("List = %v", l)
	}
	// The largest valid maps are accepted.
	ok := map[string]string{}
	for i := range MaxMapKeys {
		ok[fmt.Sprintf("K%d", i)] = strings.Repeat("v", MaxValueBytes)
	}
	if _, err := m.Create(context.Background(), Spec{Env: ok, Metadata: ok, Timeout: 24 * time.Hour}); err != nil {
		t.Errorf("Create at the caps: %v", err)
	}
}

func TestExpiryByReaper(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{ReapInterval: 10 * time.Millisecond, EndedRetention: 100 * time.Millisecond})
	short, err := m.Create(ctx, Spec{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	long, err := m.Create(ctx, Spec{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "expiry", func() bool { return stateOf(m, short.ID) == StateStopped })
	if live := e.rt.Live(); len(live) != 1 || live[0] != long.ID {
		t.Errorf("runtime holds %v, want only %s", live, long.ID)
	}
	eventually(t, 5*time.Second, "record drop", func() bool {
		_, err := m.Get(short.ID)
		return errors.Is(err, errdefs.ErrNotFound)
	})
	if stateOf(m, long.ID) != StateRunning {
		t.Errorf("long-lived sandbox is %q", stateOf(m, long.ID))
	}
}

func TestIdleTimeout(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{ReapInterval: 10 * time.Millisecond})
	sb, err := m.Create(ctx, Spec{IdleTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Activity keeps it alive well past the idle timeout.
	for range 15 {
		if err := m.Touch(sb.ID); err != nil {
			t.Fatalf("sandbox reaped while active: %v", err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	// Monitoring is not activity.
	start := time.Now()
	eventually(t, 5*time.Second, "idle reap", func() bool {
		_, _ = m.Stats(ctx, sb.ID)
		return stateOf(m, sb.ID) == StateStopped
	})
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("reaped %v after the last activity, before the idle timeout", d)
	}

	t.Run("long exec is activity", func(t *testing.T) {
		sb, err := m.Create(ctx, Spec{IdleTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"sleep", "0.4"}})
		skipWithoutProcesses(t, err)
		if err != nil || res.Status != agentclient.StatusSuccess {
			t.Fatalf("exec = %+v, %v (reaped mid-exec?)", res, err)
		}
		if s := stateOf(m, sb.ID); s != StateRunning {
			t.Fatalf("state right after a long exec = %q", s)
		}
	})
}

func TestSetTimeout(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{MaxLifetime: time.Hour, DefaultTimeout: time.Minute})
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.SetTimeout(ctx, sb.ID, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.ExpiresAt.Sub(sb.CreatedAt); d < 30*time.Minute || d > 31*time.Minute {
		t.Errorf("expiry moved to creation+%v, want about 30m", d)
	}
	shorter, err := m.SetTimeout(ctx, sb.ID, time.Second)
	if err != nil || !shorter.ExpiresAt.Before(got.ExpiresAt) {
		t.Errorf("shortening = %v, %v", shorter.ExpiresAt, err)
	}
	for _, d := range []time.Duration{2 * time.Hour, 0, -time.Second} {
		if _, err := m.SetTimeout(ctx, sb.ID, d); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("SetTimeout(%v) = %v, want ErrInvalidArgument", d, err)
		}
	}
	if after, _ := m.Get(sb.ID); !after.ExpiresAt.Equal(shorter.ExpiresAt) {
		t.Errorf("rejected SetTimeout changed the expiry")
	}
	if _, err := m.SetTimeout(ctx, "sb-nope", time.Minute); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetTimeout(unknown) = %v", err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{MaxConcurrent: 2})
	a, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, Spec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, Spec{}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third Create = %v, want ErrResourceExhausted", err)
	}
	if err := m.Destroy(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, Spec{}); err != nil {
		t.Fatalf("Create after a Destroy freed a slot: %v", err)
	}
	// A failed create gives its slot back.
	e.rt.SetCreateError(fmt.Errorf("injected: %w", errdefs.ErrInternal))
	if _, err := m.Create(ctx, Spec{}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("Create at the limit = %v", err)
	}
	m.mu.Lock()
	active := m.active
	m.mu.Unlock()
	if active != 2 {
		t.Errorf("active = %d, want 2", active)
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	e.rt.SetCreateError(fmt.Errorf("mkdir /var/lib/airlock/secret: %w", errdefs.ErrUnavailable))
	_, err := m.Create(ctx, Spec{})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Create = %v, want the runtime's error class", err)
	}
	if strings.Contains(err.Error(), "/var/lib") {
		t.Errorf("error %q reveals a host path", err)
	}
	e.rt.SetCreateError(fmt.Errorf("memory below the minimum: %w", errdefs.ErrInvalidArgument))
	if _, err := m.Create(ctx, Spec{}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "memory below") {
		t.Errorf("Create = %v, want the runtime's invalid-argument message", err)
	}
	if l := m.List(Filter{}); len(l) != 0 {
		t.Errorf("failed create left records %v", l)
	}
	m.mu.Lock()
	active := m.active
	m.mu.Unlock()
	if active != 0 {
		t.Errorf("active = %d after a failed create", active)
	}
}

func TestListFilter(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	a, _ := m.Create(ctx, Spec{Owner: "t1", Metadata: map[string]string{"team": "x", "env": "prod"}})
	b, _ := m.Create(ctx, Spec{Owner: "t2", Metadata: map[string]string{"team": "x"}})
	c, _ := m.Create(ctx, Spec{Template: "other"})
	if err := m.Destroy(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	ids := func(l []Sandbox) string {
		var s []string
		for _, sb := range l {
			s = append(s, sb.ID)
		}
		return strings.Join(s, ",")
	}
	tests := []struct {
		f    Filter
		want string
	}{
		{Filter{}, ids([]Sandbox{a, b, c})},
		{Filter{States: []State{StateRunning}}, a.ID + "," + c.ID},
		{Filter{States: []State{StateStopped}}, b.ID},
		{Filter{Metadata: map[string]string{"team": "x"}}, a.ID + "," + b.ID},
		{Filter{Metadata: map[string]string{"team": "x", "env": "prod"}}, a.ID},
		{Filter{Metadata: map[string]string{"team": "y"}}, ""},
		{Filter{States: []State{StateRunning}, Metadata: map[string]string{"team": "x"}}, a.ID},
		{Filter{Owner: "t1"}, a.ID},
		{Filter{Owner: "t2", Metadata: map[string]string{"team": "x"}}, b.ID},
		{Filter{Owner: "t3"}, ""},
	}
	for i, tt := range tests {
		if got := ids(m.List(tt.f)); got != tt.want {
			t.Errorf("%d: List(%+v) = %s, want %s", i, tt.f, got, tt.want)
		}
	}
}

func TestDestroyWhileCreating(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	e.rt.SetCreateDelay(200 * time.Millisecond)
	type result struct {
		sb  Sandbox
		err error
	}
	done := make(chan result, 1)
	go func() {
		sb, err := m.Create(ctx, Spec{})
		done <- result{sb, err}
	}()
	var id string
	eventually(t, 5*time.Second, "creating record", func() bool {
		l := m.List(Filter{States: []State{StateCreating}})
		if len(l) == 1 {
			id = l[0].ID
		}
		return id != ""
	})
	if err := m.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(m, id); s != StateStopped {
		t.Errorf("state after Destroy = %q", s)
	}
	r := <-done
	if r.err != nil || r.sb.State != StateStopped {
		t.Errorf("Create returned %+v, %v; want the stopped sandbox", r.sb, r.err)
	}
	if live := e.rt.Live(); len(live) != 0 {
		t.Errorf("runtime still holds %v", live)
	}
}

func TestConcurrentCreateDestroy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{MaxConcurrent: 6, PoolSize: map[string]int{"host": 2}, ReapInterval: 5 * time.Millisecond})
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, exhausted := 0, 0
	for i := range 12 {
		wg.Go(func() {
			for j := range 3 {
				spec := Spec{Metadata: map[string]string{"i": fmt.Sprint(i, j)}}
				if (i+j)%3 == 0 {
					spec.Limits.MemoryBytes = 256 << 20 // cold
				}
				var sb Sandbox
				var err error
				for range 200 {
					sb, err = m.Create(ctx, spec)
					if !errors.Is(err, errdefs.ErrResourceExhausted) {
						break
					}
					mu.Lock()
					exhausted++
					mu.Unlock()
					time.Sleep(time.Millisecond)
				}
				if err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				mu.Lock()
				created++
				mu.Unlock()
				_, _ = m.Get(sb.ID)
				_ = m.List(Filter{States: []State{StateRunning}})
				if _, err := m.SetTimeout(ctx, sb.ID, time.Minute); err != nil {
					t.Errorf("SetTimeout: %v", err)
				}
				var wg2 sync.WaitGroup
				for range 2 {
					wg2.Go(func() {
						if err := m.Destroy(ctx, sb.ID); err != nil {
							t.Errorf("Destroy: %v", err)
						}
					})
				}
				wg2.Wait()
			}
		})
	}
	wg.Wait()
	if created != 36 {
		t.Fatalf("%d creates succeeded, want 36", created)
	}
	t.Logf("created %d, rejected %d", created, exhausted)
	m.mu.Lock()
	active := m.active
	m.mu.Unlock()
	if active != 0 {
		t.Errorf("active = %d after destroying everything", active)
	}
	if running := m.List(Filter{States: []State{StateRunning, StateCreating, StateStopping}}); len(running) != 0 {
		t.Errorf("still running: %v", running)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if live := e.rt.Live(); len(live) != 0 {
		t.Errorf("runtime still holds %v after Close (pool members must go)", live)
	}
}

func TestLifecycleErrors(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.newManager(Config{})
	if _, err := m.Create(ctx, Spec{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Create before Start = %v, want ErrUnavailable", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("second Start = %v", err)
	}
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := m.Create(ctx, Spec{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Create after Close = %v, want ErrUnavailable", err)
	}
	if _, err := m.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Exec after Close = %v, want ErrUnavailable", err)
	}
	if live := e.rt.Live(); len(live) != 1 || live[0] != sb.ID {
		t.Errorf("Close did not leave the sandbox running: %v", live)
	}
}

func TestConfigValidate(t *testing.T) {
	base := Config{StateDir: "/x"}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"no state dir", func(c *Config) { c.StateDir = "" }},
		{"bad default template", func(c *Config) { c.DefaultTemplate = "Bad/Name" }},
		{"negative max lifetime", func(c *Config) { c.MaxLifetime = -1 }},
		{"default timeout above lifetime", func(c *Config) { c.MaxLifetime = time.Hour; c.DefaultTimeout = 2 * time.Hour }},
		{"negative max concurrent", func(c *Config) { c.MaxConcurrent = -1 }},
		{"default limits above max", func(c *Config) { c.MaxLimits.MemoryBytes = 1 << 20; c.DefaultLimits.MemoryBytes = 2 << 20 }},
		{"negative default limit", func(c *Config) { c.DefaultLimits.Pids = -5 }},
		{"negative pool size", func(c *Config) { c.PoolSize = map[string]int{"host": -1} }},
		{"pool too large", func(c *Config) { c.PoolSize = map[string]int{"host": 50, "other": 50} }},
		{"bad pool template", func(c *Config) { c.PoolSize = map[string]int{"A B": 1} }},
		{"max pooled too large", func(c *Config) { c.MaxPooled = 100000 }},
		{"negative reap interval", func(c *Config) { c.ReapInterval = -1 }},
	}
	if err := base.withDefaults().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tt := range tests {
		c := base
		tt.mod(&c)
		if err := c.withDefaults().Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Validate = %v, want ErrInvalidArgument", tt.name, err)
		}
	}
	// New also rejects pools of unregistered templates.
	e := newEnv(t)
	if _, err := New(e.rt, e.templates, Config{StateDir: e.stateDir, PoolSize: map[string]int{"missing": 1}}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("New with a pool of an unknown template = %v", err)
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := newID()
		if err != nil {
			t.Fatal(err)
		}
		if !ValidID(id) || !runtime.IDPattern.MatchString(id) || len(id) != 19 {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "sb-", "sb-AAAAAAAAAAAAAAAA", "sb-aaaaaaaaaaaaaaa1", "xx-aaaaaaaaaaaaaaaa", "sb-aaaaaaaaaaaaaaaaa"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestStateFilesRemoved(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetTimeout(ctx, sb.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.stateDir, sb.ID+".json")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("SetTimeout wrote no state file: %v", err)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file survived Destroy: %v", err)
	}
}

func TestDestroyFailure(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	e.rt.SetDestroyError(fmt.Errorf("rmdir /var/lib/airlock/x: %w", errdefs.ErrInternal))
	err = m.Destroy(ctx, sb.ID)
	if !errors.Is(err, errdefs.ErrInternal) || strings.Contains(err.Error(), "/var/lib") {
		t.Fatalf("Destroy = %v, want a path-free internal error", err)
	}
	got, _ := m.Get(sb.ID)
	if got.State != StateFailed || got.Error == "" {
		t.Errorf("after a failed destroy: %+v", got)
	}
	m.mu.Lock()
	active := m.active
	m.mu.Unlock()
	if active != 1 {
		t.Errorf("active = %d: a sandbox that may hold resources stopped counting", active)
	}
	e.rt.SetDestroyError(nil)
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if s := stateOf(m, sb.ID); s != StateStopped {
		t.Errorf("state after retry = %q", s)
	}
}

// envSource is a template with an environment of its own.
type envSource struct{ staticSource }

func (s envSource) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	r, err := s.staticSource.Resolve(ctx)
	r.Env = map[string]string{"FROM_IMAGE": "image", "SHADOWED": "image"}
	return r, err
}

// TestTemplateEnvAndInUse checks that a template's environment reaches
// every process under the sandbox's own, and that a template counts as in
// use from create to destroy.
func TestTemplateEnvAndInUse(t *testing.T) {
	e := newEnv(t)
	reg, err := template.NewRegistry(envSource{staticSource{"img"}})
	if err != nil {
		t.Fatal(err)
	}
	e.templates = reg
	m := e.manager(Config{})
	ctx := context.Background()
	if m.TemplateInUse("img") {
		t.Fatal("template in use before any sandbox")
	}
	sb, err := m.Create(ctx, Spec{Template: "img", Env: map[string]string{"SHADOWED": "sandbox"}})
	if err != nil {
		t.Fatal(err)
	}
	if !m.TemplateInUse("img") || m.TemplateInUse("other") {
		t.Errorf("TemplateInUse(img, other) = %v, %v; want true, false", m.TemplateInUse("img"), m.TemplateInUse("other"))
	}
	var out strings.Builder
	res, err := m.Exec(ctx, sb.ID, agentclient.ExecRequest{Shell: `echo "$FROM_IMAGE $SHADOWED"`, Stdout: &out})
	if err != nil || res.Status != agentclient.StatusSuccess {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if got := out.String(); got != "image sandbox\n" {
		t.Errorf("environment = %q, want the image's under the sandbox's", got)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if m.TemplateInUse("img") {
		t.Error("template still in use after destroy")
	}
}

// TestTemplateNamespaces: a template name resolves to the owner's own
// template, else the shared one, never another owner's; pools are the
// shared templates'.
func TestTemplateNamespaces(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, s := range []template.Source{staticSource{"t1~other"}, staticSource{"t2~mine"}} {
		if err := e.templates.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	m := e.manager(Config{PoolSize: map[string]int{"other": 1}})
	eventually(t, 5*time.Second, "the pool to fill", func() bool { return m.PoolStats()[0].Ready == 1 })

	own, err := m.Create(ctx, Spec{Owner: "t1", Template: "other"})
	if err != nil || own.Template != "t1~other" {
		t.Fatalf("t1 creates other: %+v, %v; want its own template", own, err)
	}
	if m.PoolStats()[0].Ready != 1 {
		t.Error("t1's own template was served from the shared template's pool")
	}
	shared, err := m.Create(ctx, Spec{Owner: "t2", Template: "other"})
	if err != nil || shared.Template != "other" {
		t.Fatalf("t2 creates other: %+v, %v; want the shared template", shared, err)
	}
	for _, owner := range []string{"t1", ""} {
		if _, err := m.Create(ctx, Spec{Owner: owner, Template: "mine"}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("owner %q creates t2's template: %v, want not found", owner, err)
		}
	}
	if _, err := m.Create(ctx, Spec{Owner: "t1", Template: "t2~mine"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a store name in a request: %v, want invalid argument", err)
	}
	if !m.TemplateInUse("t1~other") || !m.TemplateInUse("other") || m.TemplateInUse("t2~mine") {
		t.Error("TemplateInUse does not follow store names")
	}
}
