package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testutil/testns"
)

// openWorld builds the namespaces of an open-mode test: a router
// namespace (the daemon's --open-netns) whose uplink up0 (198.51.100.1)
// leads to an uplink namespace holding the test host 198.51.100.2 and a
// host of a blocked range, 10.77.0.1. It returns both namespaces and the
// daemon's arguments.
func openWorld(t *testing.T) (routerNS, uplinkNS *os.File, args []string) {
	t.Helper()
	routerNS, uplinkNS = testns.New(t), testns.New(t)
	handle := func(ns *os.File) *netlink.Handle {
		h, err := netlink.NewHandleAt(netns.NsHandle(int(ns.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	rh, uh := handle(routerNS), handle(uplinkNS)
	if err := rh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up1",
		PeerNamespace: netlink.NsFd(int(uplinkNS.Fd()))}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h          *netlink.Handle
		link, addr string
	}{{rh, "up0", "198.51.100.1/24"}, {uh, "up1", "198.51.100.2/24"}, {uh, "lo", "10.77.0.1/32"}} {
		l, err := c.h.LinkByName(c.link)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := netlink.ParseAddr(c.addr)
		if err := c.h.AddrAdd(l, a); err != nil {
			t.Fatal(err)
		}
		if err := c.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	up0, _ := rh.LinkByName("up0")
	if err := rh.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP("198.51.100.2")}); err != nil {
		t.Fatal(err)
	}
	return routerNS, uplinkNS, []string{"--open-uplink", "up0", "--open-netns", fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), routerNS.Fd())}
}

// TestOpenNetworkAudit: an open sandbox's flow to the test host and
// its refused request to a blocked range are in its network log (GET
// /network/log: audit records egress.connect), and GET /network shows its
// address and counters. (Its name is short: the sandbox's agent socket
// path, under 108 bytes, holds it.)
func TestOpenNetworkAudit(t *testing.T) {
	_, uplinkNS, args := openWorld(t)
	listenIn(t, uplinkNS, "198.51.100.2:8080")
	private := listenIn(t, uplinkNS, "10.77.0.1:8080")
	d := newEnv(t, args...).start()
	ctx := ctxT(t, 3*time.Minute)

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Network: &client.Network{Mode: client.NetworkOpen}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	defer d.C.DeleteSandbox(ctx, sb.ID)
	res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "ip -4 -o addr show dev eth0"})
	f := strings.Fields(string(res.Stdout))
	if len(f) < 4 {
		t.Fatalf("eth0: %q", res.Stdout)
	}
	addr := strings.Split(f[3], "/")[0]
	res = mustExec(t, d, sb.ID, client.ExecRequest{Command: "curl -sS --max-time 2 -o - http://198.51.100.2:8080/"})
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "from=198.51.100.1:") {
		t.Fatalf("to the test host: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "curl -sS --max-time 2 http://10.77.0.1:8080/"}); res.ExitCode == 0 || private.Load() != 0 {
		t.Fatalf("the blocked range was reached: %q", res.Stdout)
	}

	type details struct {
		Allowed   bool   `json:"allowed"`
		Reason    string `json:"reason"`
		Protocol  string `json:"protocol"`
		Host      string `json:"host"`
		Addr      string `json:"addr"`
		Port      int    `json:"port"`
		Class     string `json:"class"`
		BytesUp   int64  `json:"bytes_up"`
		BytesDown int64  `json:"bytes_down"`
	}
	var flow, refusal *details
	var tenant string
	deadline := time.Now().Add(20 * time.Second)
	for (flow == nil || refusal == nil) && time.Now().Before(deadline) {
		recs, _, err := d.C.NetworkLog(ctx, sb.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			var dt details
			if err := json.Unmarshal(r.Details, &dt); err != nil {
				t.Fatal(err)
			}
			switch {
			case dt.Allowed && dt.Addr == "198.51.100.2" && dt.Port == 8080:
				flow, tenant = &dt, r.TenantID
			case !dt.Allowed && dt.Addr == "10.77.0.1" && dt.Port == 8080:
				refusal = &dt
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if flow == nil || refusal == nil {
		t.Fatalf("network log: flow %+v, refusal %+v; want both", flow, refusal)
	}
	if flow.Protocol != "open" || flow.Host != "198.51.100.2" || flow.Reason != "allowed" || flow.BytesUp == 0 || flow.BytesDown == 0 || tenant == "" {
		t.Errorf("flow record %+v (tenant %q)", *flow, tenant)
	}
	if refusal.Reason != "blocked_address" || refusal.Class != "private" {
		t.Errorf("refusal record %+v", *refusal)
	}
	v, err := d.C.Network(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Address != addr || v.Stats == nil || v.Stats.Conns < 1 || v.Stats.BytesDown < flow.BytesDown || v.Stats.Refused < 1 {
		t.Errorf("network view: address %q (eth0 has %s), stats %+v", v.Address, addr, v.Stats)
	}
}
