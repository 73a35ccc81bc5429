package api

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// openAPIPath is the API description, written as JSON (which is YAML 1.2)
// so that encoding/json reads it.
const openAPIPath = "../../api/openapi.yaml"

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOp struct {
	Scope  string `json:"x-airlock-scope"`
	Action string `json:"x-airlock-audit-action"`
	// Edge names the package that serves the operation beside the API
	// (a client of it with the caller's key), which checks it itself.
	Edge string `json:"x-airlock-edge"`
}

// TestOpenAPIMatchesRoutes keeps api/openapi.yaml and the route table in
// step: the same (method, path) pairs, with the same scopes and audit
// actions, and the error codes the server can send. Package api's
// TestOpenAPISchemasMatchTypes keeps its schemas equal to the wire types
// the handlers encode and decode.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s is not JSON-compatible YAML: %v", openAPIPath, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi version %q, want 3.1.x", doc.OpenAPI)
	}
	documented := map[string]openAPIOp{}
	for path, item := range doc.Paths {
		for method, rawOp := range item {
			if method == "parameters" {
				continue
			}
			var op openAPIOp
			if err := json.Unmarshal(rawOp, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if op.Edge != "" {
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = op
		}
	}
	served := map[string]route{}
	for _, rt := range (&Handler{}).routes() {
		served[rt.method+" "+rt.path] = rt
	}
	for key, rt := range served {
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s is served but not documented", key)
			continue
		}
		if op.Scope != string(rt.scope) || op.Action != rt.action {
			t.Errorf("%s: documented scope %q action %q, served %q %q", key, op.Scope, op.Action, rt.scope, rt.action)
		}
	}
	for key := range documented {
		if _, ok := served[key]; !ok {
			t.Errorf("route %s is documented but not served", key)
		}
	}

	codes := doc.Components.Schemas["Error"].Properties["error"].Properties["code"].Enum
	want := []string{CodeInvalidArgument, CodeUnauthenticated, CodePermissionDenied, CodeNotFound, CodeMethodNotAllowed,
		CodeAlreadyExists, CodeFailedPrecondition, CodeRequestTooLarge, CodeUnsupportedMediaType, CodeUpgradeRequired, CodeRateLimited,
		CodeResourceExhausted, CodeCanceled, CodeInternal, CodeNotSupported, CodeBadGateway, CodeUnavailable, CodeTimeout}
	slices.Sort(codes)
	slices.Sort(want)
	if !slices.Equal(codes, want) {
		t.Errorf("documented error codes %v, want %v", codes, want)
	}
}

// TestCheckedScopes: the scopes routes check, each once, in a stable
// order.
func TestCheckedScopes(t *testing.T) {
	got := CheckedScopes()
	want := []string{"sandboxes:read", "sandboxes:write", "exec", "files", "audit:read", "templates:read", "templates:write", "tools:read", "tools:write", "tools:call", "approvals", "admin", "operator"}
	var names []string
	for _, s := range got {
		names = append(names, string(s))
	}
	if !slices.Equal(names, want) {
		t.Errorf("CheckedScopes() = %v, want %v", names, want)
	}
}
