package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
)

// TestCLINetSet: net set sends the --credential and limit flags in the
// wire shape, and prints the credentials (names only) and the limits the
// server answers; a malformed --credential is a usage error.
func TestCLINetSet(t *testing.T) {
	var got wire.Network
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa/network" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(wire.NetworkView{Mode: got.Mode, Allow: got.Allow, Credentials: got.Credentials,
			Limits: &wire.NetworkLimits{MaxConnections: 3, BandwidthBytesPerS: 4096, IdleTimeoutS: 90},
			Stats:  &wire.NetworkStats{Conns: 5, Active: 1, Allowed: 4, Refused: 1}})
	}))
	defer srv.Close()
	env := map[string]string{envURL: srv.URL, envAPIKey: "k"}
	run := func(args ...string) (int, string, error) {
		var out, errb bytes.Buffer
		c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, hc: srv.Client()}
		code, err := c.main(context.Background(), args)
		return code, out.String(), err
	}
	code, out, err := run("net", "set", "sb-aaaaaaaaaaaaaaaa", "allowlist", "--allow", "api.test", "--allow", "*.pypi.test:443",
		"--credential", "api.test:443:Authorization=API_KEY:Bearer {secret}", "--credential", "api.test:X-Team=TEAM",
		"--max-conns", "3", "--bandwidth", "4096", "--conn-idle-timeout", "90s")
	if code != 0 || err != nil {
		t.Fatalf("net set: %d %v", code, err)
	}
	wantCreds := []wire.NetworkCredential{
		{Host: "api.test", Port: 443, Header: "Authorization", Secret: "API_KEY", Format: "Bearer {secret}"},
		{Host: "api.test", Header: "X-Team", Secret: "TEAM"},
	}
	if got.Mode != "allowlist" || strings.Join(got.Allow, " ") != "api.test *.pypi.test:443" || len(got.Credentials) != 2 ||
		got.Credentials[0] != wantCreds[0] || got.Credentials[1] != wantCreds[1] ||
		got.Limits == nil || *got.Limits != (wire.NetworkLimits{MaxConnections: 3, BandwidthBytesPerS: 4096, IdleTimeoutS: 90}) {
		t.Errorf("request %+v (limits %+v)", got, got.Limits)
	}
	for _, want := range []string{
		"credential: api.test:443 Authorization: \"Bearer {secret}\" with secret API_KEY\n",
		"credential: api.test X-Team: secret TEAM\n",
		"limits: 3 connections, bandwidth 4096 bytes/s each way, idle timeout 1m30s\n",
		"connections: 5 (1 open), allowed 4, refused 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	got = wire.Network{}
	if code, _, err := run("net", "set", "sb-aaaaaaaaaaaaaaaa", "allowlist", "--allow", "a.test"); code != 0 || err != nil || got.Limits != nil || got.Credentials != nil {
		t.Errorf("net set without limits: %d %v, sent %+v", code, err, got)
	}
	for _, bad := range []string{"api.test=K", "api.test:Authorization", ":H=K", "api.test:0:H=K", "api.test:H="} {
		if code, _, err := run("net", "set", "sb-aaaaaaaaaaaaaaaa", "allowlist", "--credential", bad); code != 2 || err == nil {
			t.Errorf("--credential %q: %d %v, want a usage error", bad, code, err)
		}
	}
	if code, _, err := run("net", "set", "sb-aaaaaaaaaaaaaaaa", "allowlist", "--conn-idle-timeout", "1500ms"); code != 2 || err == nil {
		t.Errorf("a fractional idle timeout: %d %v", code, err)
	}
}
