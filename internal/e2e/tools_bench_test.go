package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// toolBenchPy times calls from Python, with the standard library's
// http.client on one kept-alive connection per thread, either straight
// to the echo server (direct, argv[1] its URL) or through the sandbox's
// tools module (tool): 1,000 sequential calls (p50 and p90 in µs, every
// answer checked), then 100 calls at once from 100 threads to a tool
// that sleeps 50 ms (wall time in ms). It prints one JSON line.
const toolBenchPy = `
import json, sys, time, threading, http.client, urllib.parse
mode, url = sys.argv[1], sys.argv[2]
local = threading.local()
def direct(path, payload):
    if not hasattr(local, "c"):
        u = urllib.parse.urlsplit(url)
        local.c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    local.c.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
    r = local.c.getresponse()
    return json.loads(r.read())
if mode == "tool":
    import tools
    echo = lambda p: tools.call("echo", **p)
    slow = lambda p: tools.call("slow_echo", **p)
else:
    echo = lambda p: direct("/echo", p)
    slow = lambda p: direct("/slow", p)
for i in range(20):
    echo({"n": i})
durs = []
for i in range(1000):
    t0 = time.perf_counter()
    r = echo({"n": i})
    durs.append(time.perf_counter() - t0)
    assert r["n"] == i, r
durs.sort()
errs = []
def one(i):
    try:
        r = slow({"n": i})
        assert r["n"] == i
    except Exception as e:
        errs.append(repr(e))
ths = [threading.Thread(target=one, args=(i,)) for i in range(100)]
t0 = time.perf_counter()
for t in ths: t.start()
for t in ths: t.join()
wall = time.perf_counter() - t0
print(json.dumps({"p50_us": durs[500] * 1e6, "p90_us": durs[900] * 1e6, "calls": len(durs), "concurrent_ms": wall * 1e3, "errors": errs[:3]}))
`

// TestToolBench measures the tool gateway from code in a real sandbox
// against the same Python client calling the echo server straight from
// the host: the overhead per call (the agent's bridge, the tools socket,
// grant, schema, policy, budgets, the upstream call and the audit
// record), 1,000 calls from one program, and 100 concurrent calls of a
// 50 ms tool, which must not serialize (they would take 5 s). The
// figures go to docs/BENCHMARKS.md:
//
//	CGO_ENABLED=0 go test ./internal/e2e -run 'TestToolBench$' -v
func TestToolBench(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("the host has no python3 (the direct side of the comparison):", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echo := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", echo)
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
		echo(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String()

	e := newEnv(t, "--gateway-allow", "127.0.0.1/32")
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	for name, path := range map[string]string{"echo": "/echo", "slow_echo": "/slow"} {
		if _, err := d.C.CreateTool(ctx, client.PutToolRequest{Name: name, InputSchema: schema,
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "POST", URL: url + path}}}); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"echo", "slow_echo"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	script := filepath.Join(t.TempDir(), "bench.py")
	if err := os.WriteFile(script, []byte(toolBenchPy), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.WriteFile(ctx, sb.ID, "/tmp/bench.py", strings.NewReader(toolBenchPy)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		P50          float64 `json:"p50_us"`
		P90          float64 `json:"p90_us"`
		Calls        int     `json:"calls"`
		ConcurrentMS float64 `json:"concurrent_ms"`
		Errors       []string
	}
	parse := func(what string, out []byte) result {
		var r result
		if err := json.Unmarshal(out, &r); err != nil || r.Calls != 1000 || len(r.Errors) > 0 {
			t.Fatalf("%s: %q: %v", what, out, err)
		}
		return r
	}
	for run := 1; run <= 3; run++ {
		out, err := exec.CommandContext(ctx, py, script, "direct", url).Output()
		if err != nil {
			t.Fatalf("direct: %v", err)
		}
		direct := parse("direct", out)
		res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "python3 /tmp/bench.py tool " + url, Timeout: 2 * time.Minute})
		if res.ExitCode != 0 {
			t.Fatalf("through the gateway: exit %d, %q", res.ExitCode, res.Stderr)
		}
		gw := parse("gateway", res.Stdout)
		t.Logf("run %d: one call p50 direct %.0f µs, through the gateway %.0f µs (+%.2f ms); 100 concurrent 50 ms calls: direct %.0f ms, gateway %.0f ms",
			run, direct.P50, gw.P50, (gw.P50-direct.P50)/1000, direct.ConcurrentMS, gw.ConcurrentMS)
		// Serialized, the 100 calls would take 5 s.
		if gw.ConcurrentMS > 2500 {
			t.Errorf("100 concurrent calls took %.0f ms through the gateway: they serialize", gw.ConcurrentMS)
		}
	}
}
