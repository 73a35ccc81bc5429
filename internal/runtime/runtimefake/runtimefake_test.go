package runtimefake

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var testRootfs = runtime.Rootfs{Layers: []string{"/nonexistent"}}

func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	r, err := New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func TestCreateDialDestroy(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t)
	spec := runtime.Spec{ID: "sb-one", Rootfs: testRootfs, Env: map[string]string{"A": "1"}, Labels: map[string]string{"k": "v"}}
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Labels["k"] = "mutated"
	if got := inst.Spec().Labels["k"]; got != "v" {
		t.Errorf("Spec().Labels[k] = %q: instance shares the caller's map", got)
	}
	if inst.ID() != "sb-one" || inst.CreatedAt().IsZero() {
		t.Errorf("ID/CreatedAt = %q/%v", inst.ID(), inst.CreatedAt())
	}
	root := inst.(*Instance).Root()
	for _, d := range []string{"home/user", "tmp", "root"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s missing: %v", d, err)
		}
	}
	c := agentclient.New(inst.Dial)
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("Info: %v", err)
	}
	if _, err := inst.Stats(ctx); err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if got := r.Live(); len(got) != 1 || got[0] != "sb-one" {
		t.Errorf("Live = %v", got)
	}
	if r.Creates() != 1 {
		t.Errorf("Creates = %d", r.Creates())
	}

	if _, err := r.Create(ctx, runtime.Spec{ID: "sb-one", Rootfs: testRootfs}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate Create = %v, want ErrAlreadyExists", err)
	}

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := inst.Destroy(ctx); err != nil {
				t.Errorf("Destroy: %v", err)
			}
		})
	}
	wg.Wait()
	if _, err := os.Stat(filepath.Dir(root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir left behind: %v", err)
	}
	if _, err := inst.Dial(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Dial after Destroy = %v, want ErrUnavailable", err)
	}
	if got := r.Live(); len(got) != 0 {
		t.Errorf("Live after Destroy = %v", got)
	}
	// The ID can be reused once destroyed.
	if _, err := r.Create(ctx, runtime.Spec{ID: "sb-one", Rootfs: testRootfs}); err != nil {
		t.Errorf("Create after Destroy: %v", err)
	}
}

func TestCreateInvalid(t *testing.T) {
	r := newRuntime(t)
	for _, spec := range []runtime.Spec{
		{ID: ""}, {ID: "UPPER"}, {ID: "../x"}, {ID: strings.Repeat("a", 64)},
		{ID: "neg", Rootfs: testRootfs, Limits: runtime.Limits{MemoryBytes: -1}},
		{ID: "nolayers"},
	} {
		if _, err := r.Create(context.Background(), spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%q) = %v, want ErrInvalidArgument", spec.ID, err)
		}
	}
	if len(r.Live()) != 0 {
		t.Errorf("failed creates left %v", r.Live())
	}
}

func TestInjectedFailureAndDelay(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t)
	boom := errors.New("boom")
	r.SetCreateError(boom)
	if _, err := r.Create(ctx, runtime.Spec{ID: "a", Rootfs: testRootfs}); !errors.Is(err, boom) {
		t.Fatalf("Create = %v, want injected error", err)
	}
	r.SetCreateError(nil)
	inst, err := r.Create(ctx, runtime.Spec{ID: "d", Rootfs: testRootfs})
	if err != nil {
		t.Fatal(err)
	}
	r.SetDestroyError(boom)
	if err := inst.Destroy(ctx); !errors.Is(err, boom) {
		t.Fatalf("Destroy = %v, want injected error", err)
	}
	r.SetDestroyError(nil)
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	r.SetCreateDelay(50 * time.Millisecond)
	start := time.Now()
	if _, err := r.Create(ctx, runtime.Spec{ID: "a", Rootfs: testRootfs}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("Create took %v, want >= delay", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Create(cctx, runtime.Spec{ID: "b", Rootfs: testRootfs}); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("Create with canceled ctx = %v, want ErrCanceled", err)
	}
	if got := r.Live(); len(got) != 1 {
		t.Errorf("Live = %v, want only a", got)
	}
}

func TestRecoverDropsCrashed(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := r.Create(ctx, runtime.Spec{ID: id, Rootfs: testRootfs, Labels: map[string]string{"id": id}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Crash("b"); err != nil {
		t.Fatal(err)
	}
	if err := r.Crash("zz"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Crash(unknown) = %v", err)
	}
	insts, err := r.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, inst := range insts {
		ids = append(ids, inst.ID()+"="+inst.Spec().Labels["id"])
	}
	if strings.Join(ids, ",") != "a=a,c=c" {
		t.Fatalf("Recover = %v, want a and c", ids)
	}
	if got := r.Live(); strings.Join(got, ",") != "a,c" {
		t.Errorf("Live = %v: crashed sandbox not cleaned up", got)
	}
}

func TestLongBaseDir(t *testing.T) {
	base := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := New(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("x", 63)
	inst, err := r.Create(context.Background(), runtime.Spec{ID: id, Rootfs: testRootfs})
	if err != nil {
		t.Fatal(err)
	}
	_ = inst
	sockDir := r.sockDir
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sockDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir left behind")
	}
}

// TestDestroyKillsProcesses starts a background process through the agent
// and checks that Destroy kills it. It needs the agent's process service.
func TestDestroyKillsProcesses(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t)
	inst, err := r.Create(ctx, runtime.Spec{ID: "procs", Rootfs: testRootfs})
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return inst.Dial(ctx) },
		Protocols:   &protocols,
	}
	defer tr.CloseIdleConnections()
	pc := agentv1connect.NewProcessServiceClient(&http.Client{Transport: tr}, "http://agent")
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := pc.Start(sctx, connect.NewRequest(&agentv1.StartRequest{Config: &agentv1.ProcessConfig{
		Argv: []string{"sleep", "600"}, Background: true,
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		if connect.CodeOf(stream.Err()) == connect.CodeUnimplemented {
			t.Skip("agent process service not implemented yet")
		}
		t.Fatalf("Start: %v", stream.Err())
	}
	pid := int(stream.Msg().GetEvent().GetStarted().GetPid())
	if pid <= 0 {
		t.Fatalf("first event = %v, want started", stream.Msg())
	}
	_ = stream.Close()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("process %d not running: %v", pid, err)
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d survived Destroy", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDestroyKillsOrphans checks that a background process which outlived
// its command (reparented away from the agent) dies with the sandbox.
func TestDestroyKillsOrphans(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t)
	inst, err := r.Create(ctx, runtime.Spec{ID: "orphans", Rootfs: testRootfs})
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(inst.Dial)
	defer c.Close()
	var out strings.Builder
	res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: "sleep 600 >/dev/null 2>&1 & echo $!", Stdout: &out, Timeout: 10 * time.Second})
	if err != nil || res.Status != agentclient.StatusSuccess {
		t.Fatalf("exec: %v %+v", err, res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil || syscall.Kill(pid, 0) != nil {
		t.Fatalf("background pid %q not running: %v", out.String(), err)
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil || strings.Contains(string(b), ") Z ") {
			break // gone, or a zombie waiting for its new parent
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d survived Destroy", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
