package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// secretsEnv is a realEnv whose handler serves /v1/secrets from a real
// secret store over the env's database, with its log in a buffer. The
// reader lets tests check what was stored (tests may hold one; the API
// code may not).
type secretsEnv struct {
	*realEnv
	store  *secrets.Store
	reader *secrets.Reader
	logs   *lockedBuffer
}

func newSecretsEnv(t *testing.T, opts secrets.Options) *secretsEnv {
	t.Helper()
	e := &secretsEnv{realEnv: newRealEnv(t), logs: &lockedBuffer{}}
	key, text, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	clear(text)
	opts.Key = key
	if e.store, err = secrets.New(e.st, opts); err != nil {
		t.Fatal(err)
	}
	e.reader = secrets.NewReader(e.store)
	e.h.secrets = e.store
	e.h.log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return e
}

// put sends PUT /v1/secrets/{name} with body and returns the status and
// the body of the answer.
func (e *secretsEnv) put(token, name, contentType, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest("PUT", e.srv.URL+"/v1/secrets/"+name, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// revealed is the stored value of tenant's secret name.
func (e *secretsEnv) revealed(tenant, name string) string {
	e.t.Helper()
	v, err := e.reader.Reveal(context.Background(), tenant, name)
	if err != nil {
		e.t.Fatalf("reveal %s/%s: %v", tenant, name, err)
	}
	defer v.Wipe()
	return string(v.Bytes())
}

// auditRecords returns every audit record of tenant A and B, as JSON.
func (e *secretsEnv) auditRecords(t *testing.T) string {
	t.Helper()
	var all []string
	for _, key := range []string{e.adminA, e.adminB} {
		recs, _, err := e.client(key).AuditList(context.Background(), client.AuditQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(recs)
		all = append(all, string(b))
	}
	return strings.Join(all, "\n")
}

// metadataKeys are the only fields a secret's JSON may have.
var metadataKeys = []string{"created_at", "description", "name", "updated_at", "version"}

// checkMetadata fails unless body is one secret's metadata (or a list
// of them) with exactly metadataKeys.
func checkMetadata(t *testing.T, body string) {
	t.Helper()
	var one map[string]any
	if err := json.Unmarshal([]byte(body), &one); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	objs := []map[string]any{one}
	if list, ok := one["secrets"].([]any); ok && len(one) == 1 {
		objs = nil
		for _, o := range list {
			objs = append(objs, o.(map[string]any))
		}
	}
	for _, o := range objs {
		var keys []string
		for k := range o {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, metadataKeys) {
			t.Errorf("secret fields %v, want %v: %s", keys, metadataKeys, body)
		}
	}
}

// TestSecrets: put as text (JSON escapes decoded exactly) creates (201),
// put as base64 replaces (200, version 2), get and list show metadata
// only, delete removes; each mutation is audited with the name only.
func TestSecrets(t *testing.T) {
	e := newSecretsEnv(t, secrets.Options{})
	ctx := context.Background()
	status, body := e.put(e.adminA, "api_token", "application/json",
		`{"value":"line\n\"q\" \\ \/ \u00e9 \ud83d\ude00 τ","description":"the CI token"}`)
	if status != 201 {
		t.Fatalf("put = %d %s", status, body)
	}
	checkMetadata(t, body)
	s := decode[wire.Secret](t, body)
	if s.Name != "api_token" || s.Description != "the CI token" || s.Version != 1 || s.CreatedAt.IsZero() || !s.UpdatedAt.Equal(s.CreatedAt) {
		t.Errorf("created %+v", s)
	}
	if got := e.revealed(tenantA, "api_token"); got != "line\n\"q\" \\ / é 😀 τ" {
		t.Errorf("stored %q", got)
	}

	bin := []byte{0, 1, 0xff, 0xfe, '\n'}
	status, body = e.put(e.adminA, "api_token", "", `{"value_b64":"`+base64.StdEncoding.EncodeToString(bin)+`"}`)
	if status != 200 {
		t.Fatalf("replace = %d %s", status, body)
	}
	s = decode[wire.Secret](t, body)
	if s.Version != 2 || s.Description != "" || !s.UpdatedAt.After(s.CreatedAt) {
		t.Errorf("replaced %+v", s)
	}
	if got := e.revealed(tenantA, "api_token"); got != string(bin) {
		t.Errorf("stored %q after replace", got)
	}

	a := e.client(e.adminA)
	got, err := a.GetSecret(ctx, "api_token")
	if err != nil || got.Version != 2 || got.Name != "api_token" {
		t.Errorf("GetSecret = %+v, %v", got, err)
	}
	status, body = e.doBody("GET", "/v1/secrets/api_token", e.adminA, "")
	if status != 200 {
		t.Errorf("GET = %d %s", status, body)
	}
	checkMetadata(t, body)
	if _, err := a.PutSecret(ctx, "b.second-1", client.PutSecretRequest{Value: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	status, body = e.doBody("GET", "/v1/secrets", e.adminA, "")
	if status != 200 {
		t.Fatalf("list = %d %s", status, body)
	}
	checkMetadata(t, body)
	list := decode[wire.SecretList](t, body)
	if len(list.Secrets) != 2 || list.Secrets[0].Name != "api_token" || list.Secrets[1].Name != "b.second-1" {
		t.Errorf("list %+v", list)
	}

	if err := a.DeleteSecret(ctx, "api_token"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetSecret(ctx, "api_token"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("GetSecret after delete: %v", err)
	}
	if err := a.DeleteSecret(ctx, "api_token"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DeleteSecret again: %v", err)
	}

	// Audited: intent and outcome of each put and delete, the name as
	// target, no details.
	recs, _, err := a.AuditList(ctx, client.AuditQuery{Target: "api_token", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range recs {
		seen = append(seen, r.Action+":"+r.Outcome)
		var details map[string]any
		if len(r.Details) != 0 {
			if err := json.Unmarshal(r.Details, &details); err != nil {
				t.Fatal(err)
			}
		}
		delete(details, "intent_seq") // an outcome's link to its intent
		if len(details) != 0 {
			t.Errorf("record %s has details %s", r.Action, r.Details)
		}
	}
	slices.Sort(seen)
	want := []string{"secret.delete:intent", "secret.delete:intent", "secret.delete:not_found", "secret.delete:ok",
		"secret.put:intent", "secret.put:intent", "secret.put:ok", "secret.put:ok"}
	if !slices.Equal(seen, want) {
		t.Errorf("records %v, want %v", seen, want)
	}
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

// TestSecretsCanary: a canary value, put well and badly in every way,
// is in no answer, audit record or log line, and what was put is stored
// as given.
func TestSecretsCanary(t *testing.T) {
	e := newSecretsEnv(t, secrets.Options{MaxPerTenant: 2})
	const canary = "CANARY-7f3a9c-do-not-leak"
	b64 := base64.StdEncoding.EncodeToString([]byte(canary))
	var answers []string
	put := func(name, body string, wantStatus int) {
		t.Helper()
		status, answer := e.put(e.adminA, name, "", body)
		if status != wantStatus {
			t.Errorf("put %s %s = %d %s, want %d", name, body, status, answer, wantStatus)
		}
		answers = append(answers, answer)
	}
	put("one", `{"value":"`+canary+`","description":"d"}`, 201)
	put("two", `{"value_b64":"`+b64+`"}`, 201)
	// Refused, each with the canary in the body.
	put("one", `{"value":"`+canary+`","value_b64":"`+b64+`"}`, 400)                      // both
	put("one", `{"value":"`+canary+`","description":"\u0001"}`, 400)                     // bad description
	put("one", `{"value":"`+canary+`\q"}`, 400)                                          // bad escape
	put("one", `{"value":"`+canary+`",`, 400)                                            // cut
	put("one", `{"value":"`+canary+`"} {"value":"`+canary+`"}`, 400)                     // trailing data
	put("one", `{"`+canary+`":"`+canary+`"}`, 400)                                       // unknown field
	put("one", `{"value_b64":"`+canary+`"}`, 400)                                        // not base64
	put("one", `{"value":"`+canary+`","description":["`+canary+`"]}`, 400)               // wrong type
	put("one", `["`+canary+`"]`, 400)                                                    // not an object
	put("one", `{"value":"`+canary+"\xff"+`"}`, 400)                                     // not UTF-8
	put("one", `{"value":"`+canary+strings.Repeat("x", secrets.MaxValueBytes)+`"}`, 400) // too long
	put("bad!name", `{"value":"`+canary+`"}`, 400)                                       // bad name
	put("three", `{"value":"`+canary+`"}`, 429)                                          // the count cap
	for _, path := range []string{"/v1/secrets", "/v1/secrets/one", "/v1/secrets/two"} {
		status, answer := e.doBody("GET", path, e.adminA, "")
		if status != 200 {
			t.Errorf("GET %s = %d %s", path, status, answer)
		}
		answers = append(answers, answer)
	}
	for i, a := range answers {
		if strings.Contains(a, canary) || strings.Contains(a, b64) || strings.Contains(a, "CANARY") {
			t.Errorf("answer %d holds the canary: %s", i, a)
		}
	}
	if recs := e.auditRecords(t); strings.Contains(recs, canary) || strings.Contains(recs, b64) || strings.Contains(recs, "CANARY") {
		t.Errorf("the audit records hold the canary: %s", recs)
	}
	if logs := e.logs.String(); strings.Contains(logs, canary) || strings.Contains(logs, b64) || strings.Contains(logs, "CANARY") {
		t.Errorf("the log holds the canary: %s", logs)
	}
	for _, name := range []string{"one", "two"} {
		if got := e.revealed(tenantA, name); got != canary {
			t.Errorf("%s stored %q", name, got)
		}
	}
}

// TestSecretsValidation: each malformed request is a 400 (413, 415)
// with a clear message, and nothing is stored or begun.
func TestSecretsValidation(t *testing.T) {
	e := newSecretsEnv(t, secrets.Options{})
	long := strings.Repeat("v", secrets.MaxValueBytes+1)
	for _, tt := range []struct {
		name, contentType, body string
		status                  int
		msg                     string
	}{
		{"s", "", ``, 400, "request body is empty"},
		{"s", "", `{}`, 400, "exactly one of value (text) and value_b64"},
		{"s", "", `{"value":null}`, 400, "exactly one of value"},
		{"s", "", `{"value":"a","value_b64":"YQ=="}`, 400, "exactly one of value"},
		{"s", "", `{"value":""}`, 400, "the value must be 1-65536 bytes, not 0"},
		{"s", "", `{"value_b64":""}`, 400, "the value must be 1-65536 bytes, not 0"},
		{"s", "", `{"value":"` + long + `"}`, 400, "the value must be 1-65536 bytes, not 65537"},
		{"s", "", `{"value_b64":"` + base64.StdEncoding.EncodeToString([]byte(long)) + `"}`, 400, "the value must be 1-65536 bytes"},
		{"s", "", `{"value_b64":"YQ"}`, 400, "value_b64 is not valid base64"},
		{"s", "", `{"value":1}`, 400, "must be JSON strings of valid UTF-8 text"},
		{"s", "", `{"value":"\ud800"}`, 400, "must be JSON strings of valid UTF-8 text"},
		{"s", "", `{"value":"a","description":"` + strings.Repeat("d", secrets.MaxDescriptionBytes+1) + `"}`, 400, "description must be at most 1024 bytes"},
		{"s", "", `{"value":"a","description":"a\nb"}`, 400, "description must be at most 1024 bytes of printable text"},
		{"s", "", `{"value":"a","description":7}`, 400, `field "description" must be a string`},
		{"s", "", `{"value":"a","extra":1}`, 400, "unknown field in the body"},
		{"s", "", `{"value":"a"`, 400, "unexpected end of input"},
		{"s", "", `{"value":"a"}x`, 400, "malformed JSON body"},
		{"s", "", `"a"`, 400, "must be a JSON object"},
		{"1s", "", `{"value":"a"}`, 400, "secret name"},
		{strings.Repeat("n", 129), "", `{"value":"a"}`, 400, "secret name"},
		{"s?x=1", "", `{"value":"a"}`, 400, "no query parameters"},
		{"s", "text/plain", `{"value":"a"}`, 415, "application/json"},
		{"s", "", `{"value":"` + strings.Repeat(`\u0000`, secrets.MaxValueBytes+secrets.MaxDescriptionBytes+200) + `"}`, 413, "larger than the limit"},
	} {
		status, body := e.put(e.adminA, tt.name, tt.contentType, tt.body)
		var eb wire.Error
		_ = json.Unmarshal([]byte(body), &eb)
		if status != tt.status || !strings.Contains(eb.Error.Message, tt.msg) {
			t.Errorf("put %.40s %.60s = %d %s, want %d %q", tt.name, tt.body, status, body, tt.status, tt.msg)
		}
	}
	if ss, err := e.store.List(context.Background(), tenantA); err != nil || len(ss) != 0 {
		t.Errorf("stored %+v, %v", ss, err)
	}
	recs, _, err := e.client(e.adminA).AuditList(context.Background(), client.AuditQuery{Action: ActionSecretPut, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Outcome != CodeInvalidArgument && r.Outcome != CodeRequestTooLarge && r.Outcome != CodeUnsupportedMediaType {
			t.Errorf("a refused put recorded %s", r.Outcome)
		}
	}
	for _, path := range []string{"/v1/secrets/1bad", "/v1/secrets?x=1", "/v1/secrets/ok?x=1"} {
		if status, body := e.doBody("GET", path, e.adminA, ""); status != 400 {
			t.Errorf("GET %s = %d %s", path, status, body)
		}
	}
	if status, body := e.doBody("DELETE", "/v1/secrets/1bad", e.adminA, ""); status != 400 {
		t.Errorf("DELETE of a bad name = %d %s", status, body)
	}
}

// TestSecretsTenantIsolation: another tenant's key gets 404 for A's
// secret, cannot delete it, and putting the same name makes its own
// secret without touching A's; the operator's key manages its own
// tenant's secrets; a key without admin is refused.
func TestSecretsTenantIsolation(t *testing.T) {
	e := newSecretsEnv(t, secrets.Options{})
	ctx := context.Background()
	a, b := e.client(e.adminA), e.client(e.adminB)
	if _, err := a.PutSecret(ctx, "tok", client.PutSecretRequest{Value: []byte("A's"), Description: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetSecret(ctx, "tok"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B gets A's secret: %v", err)
	}
	statusOther, bodyOther := e.doBody("GET", "/v1/secrets/tok", e.adminB, "")
	statusMissing, bodyMissing := e.doBody("GET", "/v1/secrets/tok", e.key(tenantB, auth.ScopeAdmin), "")
	if statusOther != 404 || statusMissing != 404 || bodyOther != bodyMissing {
		t.Errorf("another tenant's secret answers %d %s, a missing one %d %s", statusOther, bodyOther, statusMissing, bodyMissing)
	}
	if err := b.DeleteSecret(ctx, "tok"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B deletes A's secret: %v", err)
	}
	s, err := b.PutSecret(ctx, "tok", client.PutSecretRequest{Value: []byte("B's")})
	if err != nil || s.Version != 1 {
		t.Errorf("B puts its own tok: %+v, %v", s, err)
	}
	if got, err := a.GetSecret(ctx, "tok"); err != nil || got.Version != 1 || got.Description != "a" {
		t.Errorf("A's secret after B's requests: %+v, %v", got, err)
	}
	if got := e.revealed(tenantA, "tok"); got != "A's" {
		t.Errorf("A's value is %q after B's put", got)
	}
	if got := e.revealed(tenantB, "tok"); got != "B's" {
		t.Errorf("B's value is %q", got)
	}
	if ls, err := b.ListSecrets(ctx); err != nil || len(ls) != 1 || ls[0].Description != "" {
		t.Errorf("B lists %+v, %v", ls, err)
	}
	// The operator's key works on its own tenant's secrets.
	op := e.client(e.key(tenantA, auth.ScopeOperator))
	if ls, err := op.ListSecrets(ctx); err != nil || len(ls) != 1 || ls[0].Description != "a" {
		t.Errorf("the operator (tenant A) lists %+v, %v", ls, err)
	}
	// Scopes below admin are refused.
	limited := e.client(e.key(tenantA, auth.ScopeSandboxesWrite, auth.ScopeExec, auth.ScopeFiles, auth.ScopeTemplatesWrite))
	if _, err := limited.ListSecrets(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a key without admin lists: %v", err)
	}
	if _, err := limited.PutSecret(ctx, "tok", client.PutSecretRequest{Value: []byte("x")}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a key without admin puts: %v", err)
	}
}

// fakeSecrets is a SecretStore that keeps the Value it was given, to
// check that the handler wipes it, and fails with err.
type fakeSecrets struct {
	got secrets.Value
	err error
}

func (f *fakeSecrets) Put(ctx context.Context, tenantID, name, description string, value secrets.Value) (secrets.Metadata, error) {
	f.got = value
	if f.err != nil {
		return secrets.Metadata{}, f.err
	}
	return secrets.Metadata{TenantID: tenantID, Name: name, Version: 1}, nil
}

func (f *fakeSecrets) Get(context.Context, string, string) (secrets.Metadata, error) {
	return secrets.Metadata{}, f.err
}

func (f *fakeSecrets) List(context.Context, string) ([]secrets.Metadata, error) { return nil, f.err }

func (f *fakeSecrets) Delete(context.Context, string, string) error { return f.err }

// TestPutSecretWipesValue: once the store has taken the value, the
// handler zeroes it, on success and on failure; the store's error
// classes map to their statuses (a key the store cannot use is 409 or
// 500, never with the value).
func TestPutSecretWipesValue(t *testing.T) {
	e := newRealEnv(t)
	for _, tt := range []struct {
		err    error
		status int
	}{
		{nil, 201},
		{fmt.Errorf("secret x was sealed by key k1, which is not loaded: %w", errdefs.ErrFailedPrecondition), 409},
		{fmt.Errorf("seal: %w", errdefs.ErrInternal), 500},
		{fmt.Errorf("tenant t already has 200 of its 200 secrets: %w", errdefs.ErrResourceExhausted), 429},
	} {
		f := &fakeSecrets{err: tt.err}
		e.h.secrets = f
		status, body := e.doBody("PUT", "/v1/secrets/x", e.adminA, `{"value":"wipe-me"}`)
		if status != tt.status {
			t.Errorf("store error %v: %d %s, want %d", tt.err, status, body, tt.status)
		}
		if b := f.got.Bytes(); len(b) != len("wipe-me") || !bytes.Equal(b, make([]byte, len(b))) {
			t.Errorf("store error %v: the value the store got is %q after the request, want zeros", tt.err, b)
		}
	}
}

// TestSecretsNotServed: without Config.Secrets the routes answer 501.
func TestSecretsNotServed(t *testing.T) {
	e := newRealEnv(t)
	for _, r := range [][2]string{{"GET", "/v1/secrets"}, {"GET", "/v1/secrets/x"}, {"PUT", "/v1/secrets/x"}, {"DELETE", "/v1/secrets/x"}} {
		if status, body := e.doBody(r[0], r[1], e.adminA, `{"value":"v"}`); status != 501 || !strings.Contains(body, "not_supported") {
			t.Errorf("%s %s = %d %s", r[0], r[1], status, body)
		}
	}
}

// TestPutSecretBodyMatchesWire: the handler's body type has the JSON
// fields of api.PutSecretRequest, the one the client and openapi.yaml
// describe.
func TestPutSecretBodyMatchesWire(t *testing.T) {
	fields := func(t reflect.Type) []string {
		var out []string
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	got, want := fields(reflect.TypeFor[putSecretBody]()), fields(reflect.TypeFor[wire.PutSecretRequest]())
	if !slices.Equal(got, want) {
		t.Errorf("putSecretBody fields %v, api.PutSecretRequest's %v", got, want)
	}
}

// TestUnquoteJSON: escapes decode as encoding/json decodes them; what
// encoding/json would silently replace is refused.
func TestUnquoteJSON(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`""`, "", true},
		{`"abc"`, "abc", true},
		{`"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t", true},
		{`"\u0041\u00e9\u20ac\ud83d\ude00"`, "Aé€😀", true},
		{`"\u0000"`, "\x00", true},
		{`"τ😀"`, "τ😀", true},
		{`"\ud83d"`, "", false},       // a lone high surrogate
		{`"\ude00"`, "", false},       // a lone low surrogate
		{`"\ud83d\u0041"`, "", false}, // a broken pair
		{`"\x"`, "", false},
		{`"\u12"`, "", false},
		{`"\u12g4"`, "", false},
		{`"\"`, "", false},
		{`"a"b"`, "", false},
		{"\"a\nb\"", "", false},
		{"\"\xff\"", "", false},
		{"\"\xed\xa0\x80\"", "", false}, // a surrogate in UTF-8
		{`abc`, "", false},
		{`"`, "", false},
		{`1`, "", false},
	} {
		got, ok := unquoteJSON([]byte(tt.in))
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("unquoteJSON(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzUnquoteJSON: whatever unquoteJSON accepts, encoding/json decodes
// to the same bytes; whatever encoding/json refuses, unquoteJSON
// refuses; what it accepts and unquoteJSON refuses is only what
// encoding/json would have changed (invalid UTF-8, lone surrogates).
func FuzzUnquoteJSON(f *testing.F) {
	for _, s := range []string{`""`, `"a\u00e9\ud83d\ude00"`, `"\ud83d"`, "\"\xff\"", `"\n\t\/"`, `"x\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := unquoteJSON(raw)
		var want string
		err := json.Unmarshal(raw, &want)
		isString := len(raw) > 1 && raw[0] == '"' && raw[len(raw)-1] == '"'
		switch {
		case ok && (err != nil || string(got) != want):
			t.Errorf("unquoteJSON(%q) = %q; encoding/json: %q, %v", raw, got, want, err)
		case !ok && err == nil && isString && utf8.Valid(raw) && !strings.Contains(want, "\uFFFD"):
			t.Errorf("unquoteJSON(%q) refused what encoding/json decodes to %q", raw, want)
		}
	})
}
