package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/opennet"
	"github.com/airlock-sandbox/airlock/internal/testutil/testns"
)

// listenIn listens on addr in ns and serves HTTP: the answer is the
// address the request came from. It counts the requests.
func listenIn(t *testing.T, ns *os.File, addr string) *atomic.Int64 {
	t.Helper()
	var ln net.Listener
	if err := testns.In(ns, func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	n := new(atomic.Int64)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		fmt.Fprintf(w, "from=%s", r.RemoteAddr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return n
}

// TestOpenNetwork drives the open mode through the real daemon. The test
// builds its own world: a router namespace (the daemon's --open-netns)
// whose uplink leads to an uplink namespace holding a test host
// (198.51.100.2) and a host standing in for a blocked range (10.77.0.1);
// nothing touches the host's own interfaces or firewall, and no packet
// leaves these namespaces. Two open sandboxes get distinct addresses,
// reach the test host masqueraded, and cannot reach each other, the
// router's own services or the blocked range (the hosts see nothing);
// destroying them leaves no veth and no rule.
func TestOpenNetwork(t *testing.T) {
	routerNS, uplinkNS, args := openWorld(t)
	rh, err := netlink.NewHandleAt(netns.NsHandle(int(routerNS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	web := listenIn(t, uplinkNS, "198.51.100.2:8080")
	private := listenIn(t, uplinkNS, "10.77.0.1:8080")
	hostSvc := listenIn(t, routerNS, "0.0.0.0:9090")

	// Names the daemon resolves from a hosts file of its own (see
	// wrapHosts): no query leaves the host.
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("198.51.100.2 web.test\n10.77.0.1 private.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(wrapHostsEnv, hosts)
	e := newEnv(t, args...)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	var ids, addrs []string
	for range 2 {
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Network: &client.Network{Mode: client.NetworkOpen}})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		ids = append(ids, sb.ID)
		out := mustExec(t, d, sb.ID, client.ExecRequest{Command: "ip -4 -o addr show dev eth0"})
		f := strings.Fields(string(out.Stdout))
		if len(f) < 4 || !strings.HasPrefix(f[3], "100.96.") {
			t.Fatalf("sandbox %s: eth0: %q %q", sb.ID, out.Stdout, out.Stderr)
		}
		addrs = append(addrs, strings.Split(f[3], "/")[0])
	}
	if addrs[0] == addrs[1] {
		t.Fatalf("both sandboxes have address %s", addrs[0])
	}
	curl := func(id, url string) *client.ExecResult {
		return mustExec(t, d, id, client.ExecRequest{Command: "curl -sS --max-time 2 -o - " + url})
	}
	for _, id := range ids {
		res := curl(id, "http://198.51.100.2:8080/")
		if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "from=198.51.100.1:") {
			t.Fatalf("sandbox %s to the test host: exit %d, %q %q; want it reached, from the uplink's address", id, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	// DNS: the sandbox's own proxy answers every name (its agent
	// forwards 127.0.0.1:53 there), but one that resolves into a blocked
	// range, and the name is reached directly.
	if res := curl(ids[0], "http://web.test:8080/"); res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "from=198.51.100.1:") {
		t.Errorf("the test host by name from an open sandbox: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := mustExec(t, d, ids[0], client.ExecRequest{Command: "getent hosts private.test"}); res.ExitCode == 0 {
		t.Errorf("a name resolving into a blocked range resolved in an open sandbox: %q", res.Stdout)
	}
	if v, err := d.C.Network(ctx, ids[0]); err != nil || v.Stats == nil || v.Stats.DNSQueries == 0 || v.Stats.Refused == 0 {
		t.Errorf("open sandbox's network view after lookups: %+v %v; want DNS queries and a refusal counted", v, err)
	}
	// A server in the second sandbox, which the second reaches itself.
	mustExec(t, d, ids[1], client.ExecRequest{Command: "(timeout 60 python3 -m http.server 7070 --bind " + addrs[1] + " >/dev/null 2>&1 &) ; sleep 1"})
	if res := curl(ids[1], "http://"+addrs[1]+":7070/"); res.ExitCode != 0 {
		t.Fatalf("the second sandbox's own server: exit %d %q", res.ExitCode, res.Stderr)
	}
	before := web.Load()
	for _, url := range []string{
		"http://" + addrs[1] + ":7070/", // another sandbox
		"http://198.51.100.1:9090/",     // the router's (host's) services
		"http://10.77.0.1:8080/",        // a blocked range
		"http://169.254.169.254:9090/",  // metadata (nothing there: dropped before routing matters)
	} {
		if res := curl(ids[0], url); res.ExitCode == 0 {
			t.Errorf("%s reached from an open sandbox: %q", url, res.Stdout)
		}
	}
	if n := private.Load() + hostSvc.Load() + web.Load() - before; n != 0 {
		t.Errorf("%d refused requests reached a test host", n)
	}

	for _, id := range ids {
		if err := d.C.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	links, err := rh.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "al-") {
			t.Errorf("veth %s left after destroy", l.Attrs().Name)
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(routerNS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Name: "airlock", Family: nftables.TableFamilyINet}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: "from_sandbox", Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	// Without per-sandbox rules the chain holds the fixed ones only: 3
	// before the blocked ranges, one per range, the final drop.
	if want := 3 + len(opennet.Blocked) + 1; len(rules) != want {
		t.Errorf("from_sandbox holds %d rules after every sandbox was destroyed; want %d", len(rules), want)
	}
}
