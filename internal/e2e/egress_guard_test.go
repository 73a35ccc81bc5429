package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestEgressGuard shows the resolved-address guard through the real
// daemon. A rebinding name (localhost: listed by name, resolved on the
// host to loopback, which the list does not name) and the cloud
// metadata address 169.254.169.254 are refused over plain HTTP
// forwarding, CONNECT and SOCKS5 with the proxy's answer, the test
// server behind the name gets no connection, and each refusal is audited
// with its reason (and, for the name, the loopback address it resolved
// to). Listing the loopback addresses then lets the same name through,
// so the refusal was the guard's. No packet is sent to 169.254.169.254:
// no entry covers it, so the policy refuses it before any resolution or
// dial (the records say not_listed, never dial_failed). That a covering
// CIDR still does not list it is internal/egress's to show, with a
// dialler that fails its test when called, so that no broken guard can
// send a packet there from this test.
func TestEgressGuard(t *testing.T) {
	localhostAddrs := hostsAddrs(t, "localhost")
	if len(localhostAddrs) == 0 {
		t.Fatal("/etc/hosts does not map localhost: the rebinding name needs a host-local name that resolves to loopback without DNS")
	}
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello-guard") }),
		ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	ps := strconv.Itoa(port)
	rebind := "localhost:" + ps

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{Mode: client.NetworkAllowlist, Allow: []string{rebind}},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	// --noproxy '': curl would not proxy localhost (NO_PROXY names it).
	const curl = "curl -sS --max-time 10 --noproxy '' -w ' status=%{http_code}\\n' "
	run := func(command string) string {
		t.Helper()
		res := mustExec(t, d, sb.ID, client.ExecRequest{Command: command})
		return string(res.Stdout) + string(res.Stderr)
	}

	if env := run("env"); !strings.Contains(env, "\nNODE_USE_ENV_PROXY=1\n") {
		t.Errorf("allowlist sandbox's env lacks NODE_USE_ENV_PROXY=1:\n%s", env)
	}
	out := run(curl + "http://" + rebind + "/; " +
		curl + "--proxytunnel http://" + rebind + "/; " +
		curl + "-x \"$ALL_PROXY\" http://" + rebind + "/")
	if strings.Contains(out, "hello-guard") || strings.Contains(out, "status=200") {
		t.Fatalf("the rebinding name reached the server:\n%s", out)
	}
	if !strings.Contains(out, "airlock egress: "+rebind+": destination is a loopback address that the egress allowlist does not list") {
		t.Errorf("plain HTTP to the rebinding name: want the proxy's refusal, got:\n%s", out)
	}
	if !strings.Contains(out, "CONNECT tunnel failed, response 403") {
		t.Errorf("CONNECT to the rebinding name: want a 403, got:\n%s", out)
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the server behind the rebinding name got %d connections", n)
	}

	const metadata = "169.254.169.254"
	out = run(curl + "http://" + metadata + "/latest/meta-data/; " +
		curl + "--proxytunnel http://" + metadata + "/; " +
		curl + "-x \"$ALL_PROXY\" http://" + metadata + "/")
	if strings.Contains(out, "status=200") {
		t.Fatalf("the metadata address answered:\n%s", out)
	}
	if !strings.Contains(out, "airlock egress: "+metadata+": destination not in the sandbox's egress allowlist") {
		t.Errorf("plain HTTP to the metadata address: want the proxy's refusal, got:\n%s", out)
	}
	t.Logf("refusals in the sandbox:\n%s", out)

	recs := waitNetLog(ctx, t, d, sb.ID, func(recs []netRecord) bool {
		var rebound, meta int
		for _, r := range recs {
			switch {
			case r.Host == "localhost" && r.Port == port && r.Outcome == "permission_denied":
				rebound++
			case r.Host == metadata && r.Port == 80 && r.Outcome == "permission_denied":
				meta++
			}
		}
		return rebound >= 3 && meta >= 3
	})
	for _, r := range recs {
		switch r.Host {
		case "localhost":
			a, err := netip.ParseAddr(r.Addr)
			if r.Reason != "blocked_address" || r.Class != "loopback" || err != nil || !a.IsLoopback() {
				t.Errorf("rebinding refusal record: want blocked_address, class loopback, a loopback addr; got %+v", r)
			}
		case metadata:
			if r.Reason != "not_listed" || r.Addr != "" {
				t.Errorf("metadata refusal record: want not_listed and no address connected to; got %+v", r)
			}
		}
	}

	// The same name with its addresses listed: the guard lets it
	// through, so what refused it above was the guard.
	allow := []string{rebind}
	for _, a := range localhostAddrs {
		allow = append(allow, a.String())
	}
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkAllowlist, Allow: allow}); err != nil {
		t.Fatal(err)
	}
	if out := run(curl + "http://" + rebind + "/"); !strings.Contains(out, "hello-guard status=200") {
		t.Fatalf("the name with its loopback addresses listed: %s", out)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.C.DeleteSandbox(dctx, sb.ID); err != nil {
		t.Error(err)
	}
}

// hostsAddrs returns the addresses /etc/hosts gives name.
func hostsAddrs(t *testing.T, name string) []netip.Addr {
	t.Helper()
	f, err := os.Open("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		for _, n := range fields[1:] {
			if strings.EqualFold(n, name) {
				out = append(out, a.Unmap())
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
