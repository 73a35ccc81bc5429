package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/store"
)

const permitAll = `permit(principal, action, resource);`

// newPolicyEnv is a realEnv whose handler serves /v1/policies from the
// env's database.
func newPolicyEnv(t *testing.T) *realEnv {
	t.Helper()
	e := newRealEnv(t)
	e.h.policies = e.st
	return e
}

func putPolicyBody(text string) string {
	b, _ := json.Marshal(wire.PutPolicyRequest{Cedar: text})
	return string(b)
}

// TestPolicyRoutes: set, read, replace and remove a tenant's policy; the
// tenants' policies are separate; the audit records carry a digest, not
// the text.
func TestPolicyRoutes(t *testing.T) {
	e := newPolicyEnv(t)
	if st, body := e.doBody("GET", "/v1/policies", e.adminA, ""); st != http.StatusNotFound {
		t.Errorf("get before set = %d %s, want 404", st, body)
	}
	if st, body := e.doBody("DELETE", "/v1/policies", e.adminA, ""); st != http.StatusNotFound {
		t.Errorf("delete before set = %d %s, want 404", st, body)
	}
	text := "@id(\"big\")\nforbid(principal, action, resource) when { context.args.amount > 100 };\n" + permitAll
	st, body := e.doBody("PUT", "/v1/policies", e.adminA, putPolicyBody(text))
	if st != http.StatusOK {
		t.Fatalf("put = %d %s", st, body)
	}
	var p wire.Policy
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Cedar != text || p.UpdatedAt.IsZero() {
		t.Errorf("put answered %+v, %v", p, err)
	}
	st, body = e.doBody("GET", "/v1/policies", e.adminA, "")
	var g wire.Policy
	if err := json.Unmarshal([]byte(body), &g); st != http.StatusOK || err != nil || g.Cedar != text || !g.UpdatedAt.Equal(p.UpdatedAt) {
		t.Errorf("get = %d %s", st, body)
	}
	if st, body := e.doBody("GET", "/v1/policies", e.adminB, ""); st != http.StatusNotFound {
		t.Errorf("tenant B reads = %d %s, want 404: a tenant sees only its own policy", st, body)
	}
	if st, body := e.doBody("PUT", "/v1/policies", e.adminB, putPolicyBody(permitAll)); st != http.StatusOK {
		t.Errorf("tenant B sets its own = %d %s", st, body)
	}
	if got, _, err := e.st.GetPolicy(context.Background(), tenantA); err != nil || got != text {
		t.Errorf("tenant A's policy after B's put = %q, %v", got, err)
	}
	if st, body := e.doBody("PUT", "/v1/policies", e.adminA, putPolicyBody(permitAll)); st != http.StatusOK || !strings.Contains(body, `"cedar":"permit(principal, action, resource);"`) {
		t.Errorf("replace = %d %s", st, body)
	}
	if st, body := e.doBody("DELETE", "/v1/policies", e.adminA, ""); st != http.StatusNoContent {
		t.Errorf("delete = %d %s", st, body)
	}
	if st, body := e.doBody("GET", "/v1/policies", e.adminA, ""); st != http.StatusNotFound {
		t.Errorf("get after delete = %d %s, want 404", st, body)
	}
	if _, _, err := e.st.GetPolicy(context.Background(), tenantB); err != nil {
		t.Errorf("tenant B's policy after A's delete: %v", err)
	}

	got := e.outcomes(t, ActionPolicyUpdate, ActionPolicyDelete)
	for _, want := range []string{"policy.update ok", "policy.delete ok", "policy.delete not_found"} {
		if !got[want] {
			t.Errorf("no audit outcome %q among %v", want, got)
		}
	}
	page, err := e.log.Select(context.Background(), audit.Query{Limit: 1000}, audit.PhaseIntent)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(text))
	var found bool
	for _, r := range page.Records {
		if r.Action != ActionPolicyUpdate {
			continue
		}
		if strings.Contains(string(r.Details), "amount") {
			t.Errorf("a policy.update record holds the text: %s", r.Details)
		}
		var d map[string]any
		_ = json.Unmarshal(r.Details, &d)
		if d["sha256"] == hex.EncodeToString(sum[:]) {
			found = true
			if r.Target != tenantA || d["bytes"] != float64(len(text)) {
				t.Errorf("policy.update intent = %+v %s", r, r.Details)
			}
		}
	}
	if !found {
		t.Error("no policy.update intent with the text's digest")
	}
}

// TestPolicyRefusals: a text that does not parse is 400 with the
// parser's message and position, and so are an empty, a too large and a
// malformed body; nothing is stored and nothing is audited as done.
func TestPolicyRefusals(t *testing.T) {
	e := newPolicyEnv(t)
	for _, c := range []struct{ name, body, want string }{
		{"syntax", putPolicyBody("permit(principal, action, resource);\nforbid(principal action);"), "at \\u003cinput\\u003e:2:24"},
		{"unknown keyword", putPolicyBody("allow(principal, action, resource);"), ":1:6 \\\"(\\\": unexpected effect: allow"},
		{"empty", putPolicyBody(""), "cedar is required"},
		{"too large", putPolicyBody(strings.Repeat(" ", store.MaxPolicyBytes) + permitAll), "more than the 262144 allowed"},
		{"unknown field", `{"cedar":"permit(principal, action, resource);","x":1}`, "unknown field"},
		{"no body", ``, "body is empty"},
	} {
		st, body := e.doBody("PUT", "/v1/policies", e.adminA, c.body)
		if st != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") || !strings.Contains(body, c.want) {
			t.Errorf("%s: put = %d %s, want 400 containing %q", c.name, st, body, c.want)
		}
	}
	if st, body := e.doBody("PUT", "/v1/policies?x=1", e.adminA, putPolicyBody(permitAll)); st != http.StatusBadRequest {
		t.Errorf("put with a query = %d %s, want 400", st, body)
	}
	if _, _, err := e.st.GetPolicy(context.Background(), tenantA); err == nil {
		t.Error("a refused put stored a policy")
	}
	if got := e.outcomes(t, ActionPolicyUpdate); got["policy.update ok"] {
		t.Errorf("a refused put is audited as done: %v", got)
	}
}

// TestPolicyScopes: tools:read reads, tools:write sets and removes, and
// neither does the other's part; a key with neither does nothing.
func TestPolicyScopes(t *testing.T) {
	e := newPolicyEnv(t)
	read := e.key(tenantA, auth.ScopeToolsRead)
	write := e.key(tenantA, auth.ScopeToolsWrite)
	other := e.key(tenantA, auth.ScopeSandboxesWrite, auth.ScopeExec)
	for _, c := range []struct {
		method, key, body string
		want              int
	}{
		{"PUT", read, putPolicyBody(permitAll), 403},
		{"PUT", other, putPolicyBody(permitAll), 403},
		{"PUT", write, putPolicyBody(permitAll), 200},
		{"GET", write, "", 403},
		{"GET", other, "", 403},
		{"GET", read, "", 200},
		{"DELETE", read, "", 403},
		{"DELETE", other, "", 403},
		{"DELETE", write, "", 204},
	} {
		if st, body := e.doBody(c.method, "/v1/policies", c.key, c.body); st != c.want {
			t.Errorf("%s /v1/policies = %d %s, want %d", c.method, st, body, c.want)
		}
	}
}

// TestPoliciesNotServed: without Config.Policies the routes answer 501.
func TestPoliciesNotServed(t *testing.T) {
	e := newRealEnv(t)
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		if st, body := e.doBody(m, "/v1/policies", e.adminA, putPolicyBody(permitAll)); st != http.StatusNotImplemented || !strings.Contains(body, "not_supported") {
			t.Errorf("%s /v1/policies = %d %s, want 501", m, st, body)
		}
	}
}
