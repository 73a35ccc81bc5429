package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// wrapHostsEnv names a file the daemon wrapper binds over /etc/hosts in
// the daemon's private mount namespace (see wrapHosts): the test names
// of a test then resolve, on the host, to its test servers' addresses
// without DNS, so that no lookup leaves the host.
const wrapHostsEnv = "E2E_WRAP_HOSTS"

// wrapHosts binds the file wrapHostsEnv names, if any, over /etc/hosts.
// The wrapper runs in a private mount namespace of its own, which the
// daemon inherits: the host's /etc/hosts is untouched.
func wrapHosts() error {
	f := os.Getenv(wrapHostsEnv)
	if f == "" {
		return nil
	}
	if err := syscall.Mount(f, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on /etc/hosts: %w", f, err)
	}
	return nil
}

// dnsTestHost is the loopback address the test names resolve to: a test
// server listens there, and the allowlist lists it (the guard refuses
// loopback addresses that are not listed explicitly).
const dnsTestHost = "127.0.0.3"

// TestEgressDNS shows DNS inside an allowlist sandbox through the real
// daemon. The sandbox's resolv.conf is empty, so glibc (getent, Python)
// asks 127.0.0.1:53, where the agent forwards each query to the
// sandbox's egress proxy, which answers it itself. An allowed name
// resolves to its test host (over UDP and TCP, and on ::1 where the
// sandbox has IPv6) and is then reached through the proxy by name; a
// denied name fails without being resolved anywhere, and a listed name
// that rebinds to 127.0.0.1 (not listed) fails; both refusals are in the
// sandbox's network log as DNS refusals with their reasons; a PATCHed
// list lets the denied name resolve at once; a sandbox in mode none
// fails lookups at once instead of timing out. Names resolve on the host
// from a hosts file in the daemon's mount namespace: no query leaves the
// host, and all traffic stays on loopback.
func TestEgressDNS(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+
		dnsTestHost+" allowed.test denied.test\n"+
		"127.0.0.1 rebind.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(wrapHostsEnv, hosts)
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	ln, err := net.Listen("tcp", dnsTestHost+":0")
	if err != nil {
		t.Fatalf("listen on %s (a loopback address): %v", dnsTestHost, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello-dns")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	allow := []string{"allowed.test", "rebind.test", dnsTestHost}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{Mode: client.NetworkAllowlist, Allow: allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	run := func(id, command string) *client.ExecResult {
		t.Helper()
		return mustExec(t, d, id, client.ExecRequest{Command: command})
	}
	// getaddrinfo in Python: the addresses, or the error's name.
	const pyResolve = `python3 -c 'import socket,sys
try:
    print(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 80, proto=socket.IPPROTO_TCP)}))
except socket.gaierror as e:
    print("gaierror", e.args[0])' `

	if res := run(sb.ID, "cat /etc/resolv.conf | wc -c"); strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Fatalf("the sandbox's resolv.conf is not empty: %q", res.Stdout)
	}
	res := run(sb.ID, "getent hosts allowed.test")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), dnsTestHost) || !strings.Contains(string(res.Stdout), "allowed.test") {
		t.Fatalf("getent hosts allowed.test: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// TCP: glibc's use-vc option. (Not getent ahosts: its
	// AI_ADDRCONFIG finds no address but loopback and asks nothing.)
	res = run(sb.ID, "RES_OPTIONS=use-vc getent hosts allowed.test")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), dnsTestHost) {
		t.Fatalf("getent over TCP: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if out := string(run(sb.ID, pyResolve+"allowed.test").Stdout); strings.TrimSpace(out) != "['"+dnsTestHost+"']" {
		t.Fatalf("getaddrinfo(allowed.test) in Python: %q", out)
	}
	// The name then reaches its server through the proxy.
	res = run(sb.ID, "curl -sS --max-time 10 http://allowed.test:"+strconv.Itoa(port)+"/")
	if res.ExitCode != 0 || string(res.Stdout) != "hello-dns" {
		t.Fatalf("curl allowed.test: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// ::1, where the sandbox's loopback has IPv6: a raw query there.
	res = run(sb.ID, `python3 -c 'import socket,struct
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.bind(("::1", 0))
except OSError:
    print("no-ipv6"); raise SystemExit
q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00" + struct.pack(">HH", 1, 1)
s.settimeout(5); s.sendto(q, ("::1", 53)); a = s.recv(4096)
print("id=%x rcode=%d answers=%d" % (struct.unpack(">H", a[:2])[0], a[3] & 15, struct.unpack(">H", a[6:8])[0]))'`)
	switch out := strings.TrimSpace(string(res.Stdout)); out {
	case "no-ipv6":
		t.Log("the sandbox's loopback has no IPv6: ::1 not checked")
	case "id=4242 rcode=0 answers=1":
	default:
		t.Errorf("DNS on [::1]:53: %q %q", out, res.Stderr)
	}

	// Refused: a name not listed, and a listed name that resolves to an
	// address the list does not name.
	for _, name := range []string{"denied.test", "rebind.test"} {
		res := run(sb.ID, "getent hosts "+name)
		if res.ExitCode == 0 || len(res.Stdout) != 0 {
			t.Errorf("getent hosts %s: exit %d, %q", name, res.ExitCode, res.Stdout)
		}
		if out := string(run(sb.ID, pyResolve+name).Stdout); !strings.HasPrefix(out, "gaierror") {
			t.Errorf("getaddrinfo(%s) in Python: %q", name, out)
		}
	}
	recs := waitNetLog(ctx, t, d, sb.ID, func(recs []netRecord) bool {
		var denied, rebound bool
		for _, r := range recs {
			if r.Proto != "dns" || r.Outcome != "permission_denied" {
				continue
			}
			denied = denied || (r.Host == "denied.test" && r.Reason == "not_listed")
			rebound = rebound || (r.Host == "rebind.test" && r.Reason == "blocked_address" && r.Class == "loopback" && r.Addr == "127.0.0.1")
		}
		return denied && rebound
	})
	for _, r := range recs {
		if r.Proto == "dns" && r.Host == "allowed.test" {
			t.Errorf("an answered query was recorded as a decision: %+v", r)
		}
	}

	// The proxy counts the queries it answered, refusals included.
	if v, err := d.C.Network(ctx, sb.ID); err != nil || v.Stats == nil || v.Stats.DNSQueries < 4 {
		t.Errorf("network view after the lookups: %+v %v; want stats.dns_queries of at least 4", v, err)
	}

	// A changed list applies at once.
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkAllowlist, Allow: append(allow, "denied.test")}); err != nil {
		t.Fatal(err)
	}
	if res := run(sb.ID, "getent hosts denied.test"); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), dnsTestHost) {
		t.Errorf("getent hosts denied.test once listed: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// Mode none: no proxy to ask; lookups fail at once.
	none, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(none.ID)
	res = run(none.ID, `s=$(date +%s%N); getent hosts allowed.test; echo "rc=$? ms=$(( ($(date +%s%N) - s) / 1000000 ))"`)
	var rc, ms int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(res.Stdout)), "rc=%d ms=%d", &rc, &ms); err != nil {
		t.Fatalf("mode none lookup: %q %q", res.Stdout, res.Stderr)
	}
	if rc == 0 || ms > 2000 {
		t.Errorf("mode none: getent hosts allowed.test: rc %d after %d ms; want a failure within 2 s", rc, ms)
	}
	t.Logf("mode none: lookup failed in %d ms", ms)

	for _, id := range []string{sb.ID, none.ID} {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.C.DeleteSandbox(dctx, id); err != nil {
			t.Error(err)
		}
		cancel()
	}
}
