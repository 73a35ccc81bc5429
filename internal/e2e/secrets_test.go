package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestSecrets drives /v1/secrets through a real daemon: the CLI (value on
// stdin), the Go client and raw requests put secrets; lists and inspects
// show metadata only; another tenant sees 404; the secrets survive a
// restart (the key file in the data dir); and a canary value is in no
// answer, CLI output, audit record, daemon log line, nor in plain text in
// the database files.
func TestSecrets(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)
	rnd := make([]byte, 8)
	_, _ = rand.Read(rnd)
	canary := "CANARY-e2e-" + hex.EncodeToString(rnd)
	b64 := base64.StdEncoding.EncodeToString([]byte(canary))
	var seen []string // every answer and output

	// The CLI, as a person would: the value on stdin.
	cli := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, binPath, args...)
		cmd.Env = append(daemonEnv(), "AIRLOCK_URL="+d.URL, "AIRLOCK_API_KEY="+d.Key)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		seen = append(seen, string(out), stderr.String())
		if err != nil {
			t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	if out := cli(canary+"\n", "secrets", "set", "e2e.token", "-d", "from the CLI"); !strings.Contains(out, "Created secret e2e.token (version 1)") {
		t.Errorf("secrets set printed %q", out)
	}
	// The client (base64 on the wire) and a raw text put.
	if s, err := d.C.PutSecret(ctx, "bin", client.PutSecretRequest{Value: []byte(canary + "\x00\xff")}); err != nil || s.Version != 1 {
		t.Fatalf("PutSecret: %+v, %v", s, err)
	}
	r := raw(t, d, "PUT", "/v1/secrets/raw", d.Key, `{"value":"`+canary+`","description":"raw"}`)
	if r.Status != 201 {
		t.Fatalf("raw put: %d %s", r.Status, r.Body)
	}
	seen = append(seen, string(r.Body))
	r = raw(t, d, "PUT", "/v1/secrets/raw", d.Key, `{"value_b64":"`+b64+`","description":"raw"}`)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"version":2`) {
		t.Fatalf("raw replace: %d %s", r.Status, r.Body)
	}
	seen = append(seen, string(r.Body))
	// Refused puts, the canary in each body.
	for _, body := range []string{
		`{"value":"` + canary + `","value_b64":"` + b64 + `"}`,
		`{"` + canary + `":"` + canary + `"}`,
		`{"value":"` + canary + `\x"}`,
		`{"value_b64":"` + canary + `"}`,
	} {
		r := raw(t, d, "PUT", "/v1/secrets/raw", d.Key, body)
		if r.Status != 400 || r.Code != "invalid_argument" {
			t.Errorf("bad put %s: %d %s", body, r.Status, r.Body)
		}
		seen = append(seen, string(r.Body))
	}

	// Metadata only.
	ss, err := d.C.ListSecrets(ctx)
	if err != nil || len(ss) != 3 || ss[0].Name != "bin" || ss[1].Name != "e2e.token" || ss[2].Name != "raw" || ss[2].Version != 2 {
		t.Fatalf("ListSecrets = %+v, %v", ss, err)
	}
	for _, path := range []string{"/v1/secrets", "/v1/secrets/e2e.token", "/v1/secrets/raw", "/v1/secrets/bin"} {
		r := raw(t, d, "GET", path, d.Key, "")
		if r.Status != 200 || strings.Contains(string(r.Body), "value") {
			t.Errorf("GET %s: %d %s", path, r.Status, r.Body)
		}
		seen = append(seen, string(r.Body))
	}
	seen = append(seen, cli("", "secrets", "ls"), cli("", "secrets", "ls", "--json"))

	// Another tenant.
	ten, err := d.C.CreateTenant(ctx, client.CreateTenantRequest{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.New(d.URL, ten.AdminKey.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetSecret(ctx, "e2e.token"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other tenant gets the secret: %v", err)
	}
	if err := other.DeleteSecret(ctx, "e2e.token"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other tenant deletes the secret: %v", err)
	}
	if ss, err := other.ListSecrets(ctx); err != nil || len(ss) != 0 {
		t.Errorf("the other tenant lists %+v, %v", ss, err)
	}

	// A restart keeps them (the same key, from the data dir).
	d.Stop()
	d = e.start()
	if s, err := d.C.GetSecret(ctx, "e2e.token"); err != nil || s.Version != 1 || s.Description != "from the CLI" {
		t.Errorf("after a restart: %+v, %v", s, err)
	}
	if out := cli("", "secrets", "rm", "e2e.token"); out != "e2e.token\n" {
		t.Errorf("secrets rm printed %q", out)
	}
	if _, err := d.C.GetSecret(ctx, "e2e.token"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("after rm: %v", err)
	}

	// Audited by name; the canary nowhere.
	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]int{}
	for _, rec := range recs {
		if strings.HasPrefix(rec.Action, "secret.") && rec.Phase == client.PhaseOutcome {
			actions[rec.Action+" "+rec.Target+" "+rec.Outcome]++
		}
	}
	for _, want := range []string{"secret.put e2e.token ok", "secret.put bin ok", "secret.put raw ok", "secret.put raw invalid_argument", "secret.delete e2e.token ok"} {
		if actions[want] == 0 {
			t.Errorf("no audit outcome %q in %v", want, actions)
		}
	}
	auditJSON, _ := json.Marshal(recs)
	seen = append(seen, string(auditJSON))
	for i := 1; i <= e.n; i++ {
		seen = append(seen, readLog(e, i))
	}
	seen = append(seen, d.Stdout())
	for i, s := range seen {
		if strings.Contains(s, canary) || strings.Contains(s, b64) {
			t.Errorf("output %d holds the canary: %.300s", i, s)
		}
	}
	files, _ := filepath.Glob(filepath.Join(e.dir, "airlock.db*"))
	if len(files) == 0 {
		t.Fatal("no database files in the data dir")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) || bytes.Contains(b, []byte(b64)) {
			t.Errorf("%s holds the canary in plain text", filepath.Base(f))
		}
	}
}
