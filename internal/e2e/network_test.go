package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestEgressAllowlist drives allowlist mode through the real daemon: a
// sandbox created with one allowed destination (an HTTP server on the
// host's loopback, listed as 127.0.0.1:PORT: the sandbox's own
// 127.0.0.1 is another network namespace's) reaches it through its proxy
// with curl and the proxy variables the manager sets; a denied name, an
// unlisted raw address and direct sockets (the same server, bypassing
// the proxy, and an address outside, which has no route) fail; the
// refusals are in the sandbox's network log with their reasons; a
// PATCHed list applies at once to the running sandbox; mode none has no
// proxy variables and reaches nothing through the bridge. All traffic
// stays on loopback: the address outside is in TEST-NET-1 and gets no
// packet (the sandbox has no route).
func TestEgressAllowlist(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello-egress")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	allowed := "127.0.0.1:" + strconv.Itoa(port)
	url := "http://" + allowed + "/"

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{Mode: client.NetworkAllowlist, Allow: []string{allowed}},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)

	// curl reads http_proxy; --noproxy '' makes it proxy 127.0.0.1 too
	// (NO_PROXY lists it, for the sandbox's own services).
	curl := func(id, target string) *client.ExecResult {
		return mustExec(t, d, id, client.ExecRequest{
			Command: "curl -sS --max-time 10 --noproxy '' -o - -w ' status=%{http_code}' " + target,
		})
	}
	env := string(mustExec(t, d, sb.ID, client.ExecRequest{Command: "env"}).Stdout)
	for _, kv := range []string{
		"HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
		"ALL_PROXY=socks5h://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1",
	} {
		if !strings.Contains(env, kv+"\n") {
			t.Errorf("allowlist sandbox's env lacks %s:\n%s", kv, env)
		}
	}

	res := curl(sb.ID, url)
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello-egress status=200") {
		t.Fatalf("allowed destination: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// HTTPS-style tunnels and SOCKS5 go the same way: CONNECT to the
	// allowed port carries plain HTTP here.
	res = mustExec(t, d, sb.ID, client.ExecRequest{
		Command: "curl -sS --max-time 10 --noproxy '' --proxytunnel -o - " + url +
			" && curl -sS --max-time 10 --noproxy '' -x \"$ALL_PROXY\" -o - " + url,
	})
	if res.ExitCode != 0 || string(res.Stdout) != "hello-egresshello-egress" {
		t.Fatalf("CONNECT and SOCKS5 to the allowed destination: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	denied := []string{
		"http://denied.example/",                         // a name not listed
		"http://127.0.0.2:" + strconv.Itoa(port) + "/",   // a raw address not listed
		"http://127.0.0.1:" + strconv.Itoa(port+1) + "/", // the listed address, another port
	}
	for _, target := range denied {
		res := curl(sb.ID, target)
		if strings.Contains(string(res.Stdout), "status=200") || strings.Contains(string(res.Stdout), "hello-egress") {
			t.Errorf("%s through the proxy: reached: %q", target, res.Stdout)
		}
	}
	// Bypassing the proxy: the sandbox's loopback is its own, and it
	// has no route anywhere else.
	res = mustExec(t, d, sb.ID, client.ExecRequest{Command: fmt.Sprintf(
		`curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:%d/; echo " rc=$?"; `+
			`curl -sS --max-time 5 --noproxy '*' http://192.0.2.1/; echo " rc=$?"`, port)})
	out := string(res.Stdout) + string(res.Stderr)
	if strings.Contains(out, "hello-egress") || strings.Count(out, " rc=0") > 0 {
		t.Errorf("direct sockets bypassing the proxy: %q", out)
	}
	if !strings.Contains(out, "Couldn't connect") && !strings.Contains(out, "Failed to connect") {
		t.Errorf("direct sockets: want connection failures, got %q", out)
	}

	// The evidence: each refusal, and the allowed request, in the log.
	waitLog := func(want func([]client.AuditRecord) bool) []client.AuditRecord {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			recs, _, err := d.C.NetworkLog(ctx, sb.ID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if want(recs) {
				return recs
			}
			if time.Now().After(deadline) {
				t.Fatalf("network log of %s: want not met in %d records: %+v", sb.ID, len(recs), recs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	has := func(recs []client.AuditRecord, host, outcome string, port int) bool {
		for _, r := range recs {
			var d struct {
				Host string `json:"host"`
				Port int    `json:"port"`
			}
			if err := json.Unmarshal(r.Details, &d); err != nil {
				t.Fatalf("record %d: details: %v", r.Seq, err)
			}
			if r.Action == "egress.connect" && r.Target == sb.ID && r.Outcome == outcome && d.Host == host && d.Port == port {
				return true
			}
		}
		return false
	}
	waitLog(func(recs []client.AuditRecord) bool {
		return has(recs, "127.0.0.1", "ok", port) && has(recs, "denied.example", "permission_denied", 80) &&
			has(recs, "127.0.0.2", "permission_denied", port) && has(recs, "127.0.0.1", "permission_denied", port+1)
	})
	view, err := d.C.Network(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if view.Mode != client.NetworkAllowlist || len(view.Allow) != 1 || view.Stats == nil ||
		view.Stats.Allowed < 3 || view.Stats.Refused < 3 || view.Stats.BytesDown == 0 {
		t.Fatalf("network view: %+v stats %+v", view, view.Stats)
	}

	// A changed list applies at once: the allowed server is refused,
	// then allowed again.
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkAllowlist, Allow: []string{"example.org"}}); err != nil {
		t.Fatal(err)
	}
	if res := curl(sb.ID, url); strings.Contains(string(res.Stdout), "hello-egress") {
		t.Fatalf("after the list no longer names it: reached: %q", res.Stdout)
	}
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkAllowlist, Allow: []string{allowed}}); err != nil {
		t.Fatal(err)
	}
	if res := curl(sb.ID, url); !strings.Contains(string(res.Stdout), "hello-egress status=200") {
		t.Fatalf("after the list names it again: %q %q", res.Stdout, res.Stderr)
	}
	// A bad list is a 400 and changes nothing.
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkAllowlist, Allow: []string{"bad entry"}}); err == nil {
		t.Fatal("a malformed allowlist was accepted")
	}
	// Mode none: the proxy stops.
	if _, err := d.C.SetNetwork(ctx, sb.ID, client.Network{Mode: client.NetworkNone}); err != nil {
		t.Fatal(err)
	}
	if res := curl(sb.ID, url); strings.Contains(string(res.Stdout), "hello-egress") {
		t.Fatalf("mode none: reached: %q", res.Stdout)
	}

	// A sandbox created in mode none: no proxy variables, nothing
	// through the bridge.
	none, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(none.ID)
	if env := string(mustExec(t, d, none.ID, client.ExecRequest{Command: "env"}).Stdout); strings.Contains(strings.ToLower(env), "_proxy=") {
		t.Errorf("mode none sets proxy variables:\n%s", env)
	}
	res = mustExec(t, d, none.ID, client.ExecRequest{Command: "curl -sS --max-time 5 --noproxy '' -x http://127.0.0.1:3128 " + url})
	if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "hello-egress") {
		t.Errorf("mode none through the bridge: exit %d %q", res.ExitCode, res.Stdout)
	}
	if v, err := d.C.Network(ctx, none.ID); err != nil || v.Mode != client.NetworkNone || v.Stats != nil {
		t.Errorf("mode none view: %+v, %v", v, err)
	}

	// Create refuses a malformed list and an unsupported mode.
	for _, n := range []client.Network{
		{Mode: client.NetworkAllowlist, Allow: []string{"*"}},
		{Mode: client.NetworkNone, Allow: []string{allowed}},
		{Mode: "open"},
	} {
		if _, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Network: &n}); err == nil {
			t.Errorf("create with network %+v succeeded", n)
		}
	}
	for _, id := range []string{sb.ID, none.ID} {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.C.DeleteSandbox(dctx, id); err != nil {
			t.Error(err)
		}
		cancel()
	}
}

// TestEgressCaps checks that the daemon's egress limits
// (--egress-max-conns, --egress-bandwidth, --egress-idle-timeout) are the
// proxies' and the ceiling of a sandbox's own network.limits.
func TestEgressCaps(t *testing.T) {
	d := newEnv(t, "--egress-max-conns", "4", "--egress-bandwidth", "1000000", "--egress-idle-timeout", "90s").start()
	ctx := ctxT(t, 2*time.Minute)
	allow := []string{"127.0.0.1:9"}
	_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Network: &client.Network{
		Mode: client.NetworkAllowlist, Allow: allow, Limits: &client.NetworkLimits{MaxConnections: 5}}})
	if err == nil || !strings.Contains(err.Error(), "above this server's limit of 4") {
		t.Fatalf("a sandbox asking for more connections than the daemon allows: %v", err)
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Network: &client.Network{Mode: client.NetworkAllowlist, Allow: allow}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	v, err := d.C.Network(ctx, sb.ID)
	if err != nil || v.Limits == nil || v.Limits.MaxConnections != 4 || v.Limits.BandwidthBytesPerS != 1000000 || v.Limits.IdleTimeoutS != 90 {
		t.Errorf("limits in force of a sandbox that asked for none: %+v %v; want the daemon's", v.Limits, err)
	}
}
