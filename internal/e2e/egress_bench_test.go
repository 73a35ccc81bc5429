package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestEgressBench measures allowlist egress through a real sandbox, side
// by side with the same transfer straight from the host, three runs:
// a 64 MiB download with curl inside the sandbox (through the agent's
// bridge and the host's proxy, as plain HTTP forwarding and as a CONNECT
// tunnel) against curl on the host, and the time to the first byte of a
// small GET (connection set-up, p50 of 30) both ways. The server is on
// a host loopback address (see pkgRegistryAddr). It judges only errors
// and sizes; the numbers go to docs/BENCHMARKS.md:
//
//	CGO_ENABLED=0 go test ./internal/e2e -run 'TestEgressBench$' -v
func TestEgressBench(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the host has no curl (the direct side of the comparison):", err)
	}
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 5*time.Minute)

	const size = 64 << 20
	ln, err := net.Listen("tcp", net.JoinHostPort(pkgRegistryAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 256<<10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/64m" {
			fmt.Fprint(w, "small")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := "http://" + ln.Addr().String()

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{Mode: client.NetworkAllowlist, Allow: []string{ln.Addr().String()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	inSandbox := func(command string) string {
		t.Helper()
		res := mustExec(t, d, sb.ID, client.ExecRequest{Command: command, Timeout: 50 * time.Second})
		if res.ExitCode != 0 {
			t.Fatalf("%s: exit %d: %s%s", command, res.ExitCode, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	onHost := func(command string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 50*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, "sh", "-c", command).Output()
		if err != nil {
			t.Fatalf("%s: %v: %s", command, err, out)
		}
		return string(out)
	}
	// rate parses curl's "size speed" and checks the size.
	rate := func(out string) float64 {
		t.Helper()
		var n, speed float64
		if _, err := fmt.Sscanf(out, "%f %f", &n, &speed); err != nil || n != size {
			t.Fatalf("curl download: %q (want %d bytes)", out, size)
		}
		return speed / (1 << 20)
	}
	// p50 parses one time_starttransfer (seconds) per line.
	p50 := func(out string) time.Duration {
		t.Helper()
		var ds []time.Duration
		for l := range strings.Lines(out) {
			s, err := strconv.ParseFloat(strings.TrimSpace(l), 64)
			if err != nil {
				t.Fatalf("curl timing %q: %v", l, err)
			}
			ds = append(ds, time.Duration(s*float64(time.Second)))
		}
		if len(ds) != 30 {
			t.Fatalf("%d timings, want 30", len(ds))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	const get = "curl -sS --max-time 40 -o /dev/null -w '%{size_download} %{speed_download}\\n' "
	const first = "for i in $(seq 30); do curl -sS --max-time 10 -o /dev/null -w '%{time_starttransfer}\\n' "
	for run := 1; run <= 3; run++ {
		direct := rate(onHost(get + "--noproxy '*' " + base + "/64m"))
		fwd := rate(inSandbox(get + base + "/64m"))
		tun := rate(inSandbox(get + "--proxytunnel " + base + "/64m"))
		setDirect := p50(onHost(first + "--noproxy '*' " + base + "/small; done"))
		setProxy := p50(inSandbox(first + base + "/small; done"))
		t.Logf("run %d: 64 MiB download: direct on the host %.0f MiB/s; in the sandbox through the proxy %.0f MiB/s forwarded (%.0f %%), %.0f MiB/s tunnelled (%.0f %%); "+
			"first byte of a small GET p50: direct %v, through the proxy %v (+%v)",
			run, direct, fwd, 100*fwd/direct, tun, 100*tun/direct, setDirect, setProxy, setProxy-setDirect)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.C.DeleteSandbox(dctx, sb.ID); err != nil {
		t.Error(err)
	}
}
