package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// defaultsTemplate is a template with default toolsets and a default
// command policy.
type defaultsTemplate struct {
	staticSource
	toolsets []string
	policy   *cmdpolicy.Policy
}

func (t defaultsTemplate) Toolsets() []string               { return slices.Clone(t.toolsets) }
func (t defaultsTemplate) CommandPolicy() *cmdpolicy.Policy { return t.policy }

// A build's default toolsets and command policy reach the builder, the
// build's audit record and GET /v1/templates/{name}, from a JSON body
// and from a build context's query; invalid ones are 400 and build
// nothing.
func TestTemplateBuildDefaults(t *testing.T) {
	e := newTplEnv(t)
	hdr := map[string]string{"Authorization": "Bearer " + tkAdminA}
	resp, b := e.raw("POST", "/v1/templates", hdr, strings.NewReader(
		`{"name":"gov","from":"template:x","toolsets":["web","db"],"command_policy":{"default":"ask","rules":[{"action":"deny","prefix":["git","push"]}]}}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("build: %d %s", resp.StatusCode, b)
	}
	wantPolicy := &cmdpolicy.Policy{Default: "ask", Rules: []cmdpolicy.Rule{{Action: "deny", Prefix: []string{"git", "push"}}}}
	wantWire := &wire.CommandPolicy{Default: "ask", Rules: []wire.CommandRule{{Action: "deny", Prefix: []string{"git", "push"}}}}
	r := e.builder.requests()[0]
	if !slices.Equal(r.Toolsets, []string{"web", "db"}) || !reflect.DeepEqual(r.CommandPolicy, wantPolicy) {
		t.Errorf("build request toolsets %q policy %+v", r.Toolsets, r.CommandPolicy)
	}
	var built wire.TemplateDetail
	if err := json.Unmarshal(b, &built); err != nil || !slices.Equal(built.Config.Toolsets, []string{"web", "db"}) || !reflect.DeepEqual(built.Config.CommandPolicy, wantWire) {
		t.Errorf("built template %s (%v)", b, err)
	}
	got, err := e.client(tkAdminA).GetTemplate(context.Background(), "gov")
	if err != nil || !slices.Equal(got.Config.Toolsets, []string{"web", "db"}) || !reflect.DeepEqual(got.Config.CommandPolicy, wantWire) {
		t.Errorf("GET template config %+v, %v", got.Config, err)
	}
	var rec map[string]any
	for _, ev := range e.audit.take() {
		if ev.Action == ActionTemplateBuild && ev.Outcome == audit.OutcomeOK {
			rec = ev.Details
		}
	}
	if fmt.Sprint(rec["toolsets"]) != "[web db]" || !reflect.DeepEqual(rec["command_policy"], wantWire) {
		t.Errorf("the build's audit details: %v", rec)
	}

	// A build context takes them as query parameters.
	q := url.Values{"name": {"ctx"}, "toolsets": {"web,db"}, "command_policy": {`{"default":"deny"}`}}
	tarHdr := map[string]string{"Authorization": "Bearer " + tkAdminA, "Content-Type": "application/x-tar"}
	air := testutil.Entry{Name: "Airfile", Body: "FROM template:x\n"}
	resp, b = e.raw("POST", "/v1/templates?"+q.Encode(), tarHdr, bytes.NewReader(testutil.Tar(t, air)))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("context build: %d %s", resp.StatusCode, b)
	}
	if r := e.builder.requests()[1]; !slices.Equal(r.Toolsets, []string{"web", "db"}) || r.CommandPolicy == nil || r.CommandPolicy.Default != "deny" {
		t.Errorf("context build request toolsets %q policy %+v", r.Toolsets, r.CommandPolicy)
	}

	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf(`"s%d"`, i)
	}
	for _, tt := range []struct{ body, msg string }{
		{`{"name":"a","from":"template:x","toolsets":["Web"]}`, "toolsets[0]: toolset name"},
		{`{"name":"a","from":"template:x","toolsets":["web","class"]}`, "is a reserved word"},
		{`{"name":"a","from":"template:x","toolsets":["web","web"]}`, "names toolset web twice"},
		{`{"name":"a","from":"template:x","toolsets":[` + strings.Join(many, ",") + `]}`, "at most 64"},
		{`{"name":"a","from":"template:x","command_policy":{"default":"block"}}`, "command policy: default"},
		{`{"name":"a","from":"template:x","command_policy":{"rules":[{"action":"deny","prefix":["*"]}]}}`, "must name a command"},
	} {
		resp, b := e.raw("POST", "/v1/templates", hdr, strings.NewReader(tt.body))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.msg) {
			t.Errorf("%s: %d %s, want 400 with %q", tt.body, resp.StatusCode, b, tt.msg)
		}
	}
	for _, tt := range []struct{ query, msg string }{
		{"name=a&toolsets=web,,db", "toolsets[1]"},
		{"name=a&command_policy=%7Bnot", "command_policy must be a JSON object"},
		{"name=a&command_policy=" + url.QueryEscape(`{"default":"block"}`), "command policy: default"},
	} {
		resp, b := e.raw("POST", "/v1/templates?"+tt.query, tarHdr, bytes.NewReader(testutil.Tar(t, air)))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.msg) {
			t.Errorf("%s: %d %s, want 400 with %q", tt.query, resp.StatusCode, b, tt.msg)
		}
	}
	if n := len(e.builder.requests()); n != 2 {
		t.Errorf("the builder ran %d times, want 2", n)
	}
}

// denyTouch is a command policy that denies touch.
var denyTouch = &cmdpolicy.Policy{Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny, Prefix: []string{"touch"}}}}

// newDefaultsEnv is a test server whose registry holds templates with
// defaults: tenant A's gov (toolset web) over a shared gov (toolset
// other), a shared broken (web and missing) and a shared locked (the
// policy denyTouch).
func newDefaultsEnv(t *testing.T) *testEnv {
	t.Helper()
	tc := newFakeToolCalls(t)
	e := newTestEnv(t, func(c *Config) { c.ToolResolver = &fakeResolver{}; c.ToolCalls = tc })
	for _, src := range []template.Source{
		defaultsTemplate{staticSource: staticSource{template.StoreName(tenantA, "gov")}, toolsets: []string{"web"}},
		defaultsTemplate{staticSource: staticSource{"gov"}, toolsets: []string{"other"}},
		defaultsTemplate{staticSource: staticSource{"broken"}, toolsets: []string{"web", "missing"}},
		defaultsTemplate{staticSource: staticSource{"locked"}, policy: denyTouch},
	} {
		if err := e.reg.Add(src); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// createRecord returns the details of the last sandbox.create outcome
// in e's audit log.
func createRecord(e *testEnv) map[string]any {
	var d map[string]any
	for _, ev := range e.audit.take() {
		if ev.Action == ActionSandboxCreate && ev.Outcome != audit.OutcomeIntent {
			d = ev.Details
		}
	}
	return d
}

// A create without tools and toolsets is granted its template's default
// toolsets, resolved for the creating tenant in its namespace (its own
// template of the name first); one that names tools replaces them; a
// default toolset the tenant lacks is 404 naming it and the template.
func TestCreateTemplateToolsets(t *testing.T) {
	ctx := context.Background()
	e := newDefaultsEnv(t)
	c := e.client(keyA)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "gov"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fetch", "search"}; !slices.Equal(sb.Tools, want) {
		t.Errorf("tools %q, want the template's toolset web: %q", sb.Tools, want)
	}
	if d := createRecord(e); fmt.Sprint(d["toolsets"]) != "map[from_template:true names:[web]]" || fmt.Sprint(d["tools"]) != "[fetch search]" {
		t.Errorf("the create's audit details: %v", d)
	}
	own, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "gov", Tools: []string{"echo"}})
	if err != nil || !slices.Equal(own.Tools, []string{"echo"}) {
		t.Errorf("a create naming tools: %q, %v; want only echo", own.Tools, err)
	}
	if d := createRecord(e); d["toolsets"] != nil {
		t.Errorf("a create naming its tools records toolsets from the template: %v", d)
	}
	plain, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil || len(plain.Tools) != 0 {
		t.Errorf("a create from a template without toolsets: %q, %v", plain.Tools, err)
	}

	for _, tt := range []struct {
		key, template string
		want          []string
	}{
		{keyA, "broken", []string{"template broken", "toolset missing"}},
		{keyB, "gov", []string{"template gov", "toolset other"}}, // tenant B sees the shared gov
	} {
		_, err := e.client(tt.key).CreateSandbox(ctx, client.CreateSandboxRequest{Template: tt.template})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			t.Errorf("%s: %v, want 404", tt.template, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(ae.Message, w) {
				t.Errorf("%s: %q does not say %q", tt.template, ae.Message, w)
			}
		}
	}
	if n := len(e.mgr.List(sandbox.Filter{Live: true})); n != 3 {
		t.Errorf("%d live sandboxes, want the 3 created", n)
	}

	// A run is granted them too.
	if _, err := c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "true", Template: "gov"}, nil); err != nil {
		t.Fatal(err)
	}
	var run map[string]any
	for _, ev := range e.audit.take() {
		if ev.Action == ActionRun && ev.Outcome != audit.OutcomeIntent {
			run = ev.Details
		}
	}
	if fmt.Sprint(run["tools"]) != "[fetch search]" || fmt.Sprint(run["toolsets"]) != "map[from_template:true names:[web]]" {
		t.Errorf("the run's audit details: %v", run)
	}
	_, err = c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "true", Template: "broken"}, nil)
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "template broken") {
		t.Errorf("a run from a template with a missing toolset: %v", err)
	}
}

// A sandbox created without a command policy gets its template's, which
// denies an exec, and the create's record says it came from the
// template; a create's own policy replaces it. A run from the template
// is judged by it.
func TestCreateTemplateCommandPolicy(t *testing.T) {
	ctx := context.Background()
	e := newDefaultsEnv(t)
	c := e.client(keyA)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "locked"})
	if err != nil {
		t.Fatal(err)
	}
	wantWire := &client.CommandPolicy{Rules: []client.CommandRule{{Action: "deny", Prefix: []string{"touch"}}}}
	if !reflect.DeepEqual(sb.CommandPolicy, wantWire) {
		t.Errorf("the sandbox's policy %+v, want the template's", sb.CommandPolicy)
	}
	d := createRecord(e)
	if cp, _ := d["command_policy"].(map[string]any); cp["from_template"] != true || !reflect.DeepEqual(cp["policy"], wantWire) {
		t.Errorf("the create's audit details: %v", d)
	}
	mark := filepath.Join(t.TempDir(), "ran")
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "touch " + mark}); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "command policy denies") {
		t.Errorf("exec of a denied command: %v, want 403", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a denied exec ran")
	}

	own, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "locked", CommandPolicy: &client.CommandPolicy{Default: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := createRecord(e); d["command_policy"] == nil || fmt.Sprint(d["command_policy"]) == "" {
		t.Errorf("a create with its own policy does not record it: %v", d)
	} else if m, ok := d["command_policy"].(map[string]any); ok && m["from_template"] == true {
		t.Errorf("a create's own policy is recorded as the template's: %v", d)
	}
	if _, err := c.Exec(ctx, own.ID, client.ExecRequest{Command: "touch " + mark}); err != nil {
		t.Errorf("exec under the create's own policy: %v", err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the allowed exec did not run: %v", err)
	}

	// POST /v1/run from the template: its program is judged by the
	// template's policy, and nothing is left behind.
	mark2 := filepath.Join(t.TempDir(), "ran")
	_, err = c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "touch " + mark2, Template: "locked"}, nil)
	if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "command policy denies") {
		t.Errorf("a run denied by the template's policy: %v", err)
	}
	if _, err := os.Stat(mark2); err == nil {
		t.Error("a denied run ran")
	}
	var run map[string]any
	for _, ev := range e.audit.take() {
		if ev.Action == ActionRun && ev.Outcome != audit.OutcomeIntent {
			run = ev.Details
		}
	}
	if cp, _ := run["command_policy"].(map[string]any); cp["action"] != "deny" || cp["from_template"] != true {
		t.Errorf("the denied run's audit details: %v", run)
	}
	if res, err := c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "echo ok", Template: "locked"}, nil); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("an allowed run: %+v, %v", res, err)
	}
	if n := len(e.mgr.List(sandbox.Filter{Live: true})); n != 2 {
		t.Errorf("%d live sandboxes, want the 2 created (runs leave none)", n)
	}
}
