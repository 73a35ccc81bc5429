package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// testTLSServer is an HTTPS server on the host's loopback with a
// certificate for localhost and 127.0.0.1 from a CA made for the test;
// it records the Authorization header of each request. rootsFile is the
// CA's PEM, for --egress-roots.
type testTLSServer struct {
	port      int
	rootsFile string
	mu        sync.Mutex
	auth      []string
}

func (s *testTLSServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

func newTestTLSServer(t *testing.T) *testTLSServer {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	s := &testTLSServer{rootsFile: filepath.Join(t.TempDir(), "roots.pem")}
	if err := os.WriteFile(s.rootsFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.auth = append(s.auth, strings.Join(r.Header.Values("Authorization"), "|"))
			s.mu.Unlock()
			fmt.Fprintf(w, "hello-credential %s", r.Proto)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return s
}

// TestEgressCanary: a canary secret named as a credential of
// an allowlisted HTTPS destination reaches the test server's request
// headers (replacing the sandbox's own), through the sandbox's proxy with
// curl and the CA variables the manager sets; and it appears nowhere in
// the sandbox (files under / but /proc and /sys, the environment, the
// process list, the outputs), the daemon's log or the audit records,
// which name the credential. A destination without a credential is
// tunnelled untouched: the sandbox sees the test CA's certificate, not
// the egress CA's.
func TestEgressCanary(t *testing.T) {
	ts := newTestTLSServer(t)
	e := newEnv(t, "--egress-roots", ts.rootsFile)
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)
	rnd := make([]byte, 12)
	_, _ = rand.Read(rnd)
	canary := "canary-" + hex.EncodeToString(rnd)
	// Shell code that builds the canary without naming it whole, so that
	// the commands below do not carry it themselves.
	half := len(canary) / 2
	build := fmt.Sprintf("C1=%s; C2=%s; ", canary[:half], canary[half:])

	if _, err := d.C.PutSecret(ctx, "CANARY", client.PutSecretRequest{Value: []byte(canary)}); err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(ts.port)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Network: &client.Network{
		Mode:  client.NetworkAllowlist,
		Allow: []string{"localhost:" + port, "127.0.0.1:" + port},
		Credentials: []client.NetworkCredential{{
			Host: "localhost", Header: "Authorization", Secret: "CANARY", Format: "Bearer {secret}",
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	var outputs []string
	run := func(cmd string) *client.ExecResult {
		t.Helper()
		res := mustExec(t, d, sb.ID, client.ExecRequest{Command: cmd, Timeout: 3 * time.Minute, User: "root"})
		outputs = append(outputs, string(res.Stdout), string(res.Stderr))
		return res
	}

	// curl trusts the egress CA through CURL_CA_BUNDLE / SSL_CERT_FILE.
	res := run("curl -sS --max-time 10 --noproxy '' -H 'Authorization: Bearer sandbox-own' https://localhost:" + port + "/a; echo; " +
		"curl -sS --max-time 10 --noproxy '' https://localhost:" + port + "/b")
	if res.ExitCode != 0 || strings.Count(string(res.Stdout), "hello-credential HTTP/1.1") != 2 {
		t.Fatalf("HTTPS with a credential: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := ts.seen(); len(got) != 2 || got[0] != "Bearer "+canary || got[1] != "Bearer "+canary {
		t.Errorf("the server saw Authorization %q, want the credential alone on both requests", got)
	}
	// Without a credential (the address, not the name) the tunnel is
	// untouched: the server's own certificate, which the sandbox does
	// not trust, and no header.
	res = run("curl -sS --max-time 10 --noproxy '' -o /dev/null https://127.0.0.1:" + port + "/c; echo \" rc=$?\"")
	if !strings.Contains(string(res.Stdout), " rc=60") {
		t.Errorf("the untouched tunnel verified against the sandbox's bundle: %q %q", res.Stdout, res.Stderr)
	}
	if got := ts.seen(); len(got) != 2 {
		t.Errorf("the server saw %d requests; the one that did not trust its certificate must not reach it", len(got))
	}
	res = run("curl -sS --max-time 10 --noproxy '' -k https://127.0.0.1:" + port + "/d")
	if got := ts.seen(); res.ExitCode != 0 || len(got) != 3 || got[2] != "" {
		t.Errorf("untouched tunnel: exit %d, server saw %q; want no header without a credential", res.ExitCode, got)
	}

	// The canary is nowhere in the sandbox.
	res = run(build + `grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e "$C1$C2" / ; echo " rc=$?"`)
	// rc 1: nothing found; 2: nothing found, and some file unreadable.
	if out := strings.TrimSpace(string(res.Stdout)); out != "rc=1" && out != "rc=2" {
		t.Errorf("grep over the sandbox's files found the canary: %q %q", res.Stdout, res.Stderr)
	}
	// The same search finds the canary where it is (a control).
	if res := run(build + `echo "$C1$C2" > /tmp/probe; grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e "$C1$C2" /; rm /tmp/probe`); !strings.Contains(string(res.Stdout), "/tmp/probe") {
		t.Errorf("the search misses a file holding the canary: %q", res.Stdout)
	}
	env := run("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
	run("ps auxwwe")
	for _, kv := range []string{"SSL_CERT_FILE=/.airlock/trust/ca-bundle.pem", "NODE_EXTRA_CA_CERTS=/.airlock/trust/ca.pem", "REQUESTS_CA_BUNDLE=/.airlock/trust/ca-bundle.pem"} {
		if !strings.Contains(string(env.Stdout), kv) {
			t.Errorf("env lacks %s", kv)
		}
	}
	if res := run("test -w /.airlock/trust/ca.pem || echo ro; touch /.airlock/trust/x 2>&1; grep -c 'BEGIN CERTIFICATE' /.airlock/trust/ca.pem"); !strings.Contains(string(res.Stdout), "ro") || !strings.Contains(string(res.Stdout), "1") {
		t.Errorf("/.airlock/trust: %q %q; want a read-only CA file", res.Stdout, res.Stderr)
	}

	// The evidence names the credential, never its value.
	var recs []client.AuditRecord
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, _, err = d.C.NetworkLog(ctx, sb.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range recs {
			var det struct {
				Credential string `json:"credential"`
			}
			if json.Unmarshal(r.Details, &det) == nil && det.Credential == "CANARY" {
				n++
			}
		}
		if n >= 2 || time.Now().After(deadline) {
			if n < 2 {
				t.Errorf("network log: %d records with credential CANARY, want 2", n)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	all, _, err := d.C.AuditList(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	audit, _ := json.Marshal(append(recs, all...))
	nv, err := d.C.Network(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	view, _ := json.Marshal(nv)
	if len(nv.Credentials) != 1 || nv.Credentials[0].Secret != "CANARY" {
		t.Errorf("network view credentials %+v", nv.Credentials)
	}
	for what, s := range map[string]string{
		"outputs": strings.Join(outputs, "\n"), "audit records": string(audit), "network view": string(view),
		"daemon log": readLog(e, 1),
	} {
		if strings.Contains(s, canary) {
			t.Errorf("the canary is in the %s", what)
		}
	}
}
