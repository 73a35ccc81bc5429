package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestCLIPort: airlock port prints the proxy URL of a sandbox's port,
// which answers with the key; --sign prints a URL that answers without
// it. The fake runtime's agent runs in the test process, so the sandbox's
// loopback is the host's here.
func TestCLIPort(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s auth=%q", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	get := func(u, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	u := strings.TrimSpace(e.ok("", "port", id, port).stdout)
	if want := e.srv.URL + "/v1/sandboxes/" + id + "/ports/" + port + "/"; u != want {
		t.Fatalf("airlock port: %q, want %q", u, want)
	}
	if code, body := get(u+"x?y=1", e.admin); code != 200 || body != `GET /x?y=1 auth=""` {
		t.Fatalf("with the key: %d %q", code, body)
	}
	if code, _ := get(u, ""); code != 401 {
		t.Fatalf("without the key: %d, want 401", code)
	}

	signed := strings.TrimSpace(e.ok("", "port", "--sign", "--ttl", "1m", id, port).stdout)
	if !strings.HasPrefix(signed, u+"?airlock_token=alp_") {
		t.Fatalf("airlock port --sign: %q", signed)
	}
	if code, body := get(signed, ""); code != 200 || body != `GET / auth=""` {
		t.Fatalf("the signed URL: %d %q", code, body)
	}
	var su client.PortURL
	if err := json.Unmarshal([]byte(e.ok("", "port", "--sign", "--json", id, port).stdout), &su); err != nil ||
		time.Until(su.ExpiresAt) < 9*time.Minute || time.Until(su.ExpiresAt) > 10*time.Minute {
		t.Fatalf("--json: %+v, %v (want the default 10 minutes)", su, err)
	}

	for _, args := range [][]string{{"port", id}, {"port", id, "0"}, {"port", id, "65536"}, {"port", id, "x"},
		{"port", "--ttl", "1m", id, port}, {"port", "--sign", "--ttl", "1ms", id, port}} {
		if r := e.run("", args...); r.code != 2 {
			t.Errorf("airlock %v: code %d, err %v; want a usage error", args, r.code, r.err)
		}
	}
	if r := e.run("", "port", "--sign", "sb-aaaaaaaaaaaaaaaa", port); r.code != 1 {
		t.Errorf("a missing sandbox: %+v", r)
	}
}
