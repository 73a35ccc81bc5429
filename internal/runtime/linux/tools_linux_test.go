package linux

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// echoCalls answers every call with its args and records its callers.
type echoCalls struct {
	mu      sync.Mutex
	callers []gateway.Caller
}

func (e *echoCalls) Granted(ctx context.Context, c gateway.Caller) ([]gateway.Tool, error) {
	return []gateway.Tool{{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil
}

func (e *echoCalls) Call(ctx context.Context, c gateway.Caller, name string, args json.RawMessage) (gateway.Result, error) {
	e.mu.Lock()
	e.callers = append(e.callers, c)
	e.mu.Unlock()
	return gateway.Result{Output: args}, nil
}

// TestToolsBridge: code in a real sandbox reaches the gateway served on
// the sandbox's tools socket at runtime.ToolsBridgeAddr, through its
// agent; with the socket closed, the bridge closes the connection.
func TestToolsBridge(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("tools"), Rootfs: hostRootfsFor(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	c := agentclient.New(inst.Dial)
	defer c.Close()
	run := func(shell string) (string, *agentclient.ExecResult) {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: shell, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out.String()), res
	}
	const curl = `curl -sS --max-time 10 -H 'Content-Type: application/json' --data '{"tool":"echo","args":{"n":7}}' http://` + runtime.ToolsBridgeAddr + `/v1/call`

	// Nothing listens yet: the bridge closes the connection.
	if out, res := run(curl); res.ExitCode == 0 {
		t.Errorf("a call with no gateway served succeeded: %s", out)
	}

	ln, err := inst.(runtime.Tools).ListenTools()
	if err != nil {
		t.Fatal(err)
	}
	calls := &echoCalls{}
	srv := &http.Server{Handler: gateway.Handler(calls, gateway.Caller{Sandbox: inst.ID()}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	out, res := run(curl + ` && curl -sS --max-time 10 http://` + runtime.ToolsBridgeAddr + `/v1/tools`)
	if res.ExitCode != 0 || !strings.Contains(out, `{"result":{"n":7}}`) || !strings.Contains(out, `"name":"echo"`) {
		t.Fatalf("calls from the sandbox = %d %q", res.ExitCode, out)
	}
	calls.mu.Lock()
	if len(calls.callers) != 1 || calls.callers[0].Sandbox != inst.ID() {
		t.Errorf("the gateway saw %+v", calls.callers)
	}
	calls.mu.Unlock()

	// Closed: the socket is gone and calls fail again.
	srv.Close()
	if out, res := run(curl); res.ExitCode == 0 {
		t.Errorf("a call after the gateway closed succeeded: %s", out)
	}
}
