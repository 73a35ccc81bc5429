package layers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// testPolicy denies git push and asks for the rest.
func testPolicy() *cmdpolicy.Policy {
	return &cmdpolicy.Policy{Default: cmdpolicy.Ask, Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny, Prefix: []string{"git", "push"}}}}
}

// A template's default toolsets and command policy are checked with the
// rest of its config: a bounded list of distinct names, and a policy
// cmdpolicy accepts.
func TestConfigValidateDefaults(t *testing.T) {
	many := make([]string, MaxToolsets+1)
	for i := range many {
		many[i] = fmt.Sprintf("set%d", i)
	}
	tests := []struct {
		name string
		cfg  Config
		msg  string // "" for valid
	}{
		{"none", Config{}, ""},
		{"toolsets and policy", Config{Toolsets: []string{"web", "db"}, CommandPolicy: testPolicy()}, ""},
		{"most toolsets", Config{Toolsets: many[:MaxToolsets]}, ""},
		{"too many toolsets", Config{Toolsets: many}, "at most 64"},
		{"empty toolset", Config{Toolsets: []string{"web", ""}}, "toolsets[1]"},
		{"long toolset", Config{Toolsets: []string{strings.Repeat("a", 65)}}, "toolsets[0]"},
		{"control character", Config{Toolsets: []string{"we\nb"}}, "toolsets[0]"},
		{"space", Config{Toolsets: []string{"we b"}}, "toolsets[0]"},
		{"twice", Config{Toolsets: []string{"web", "db", "web"}}, "named twice"},
		{"bad default", Config{CommandPolicy: &cmdpolicy.Policy{Default: "block"}}, "template command policy: default"},
		{"rule without prefix", Config{CommandPolicy: &cmdpolicy.Policy{Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny}}}}, "rule 0"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.msg == "" && err != nil:
			t.Errorf("%s: %v, want valid", tt.name, err)
		case tt.msg != "" && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg)):
			t.Errorf("%s: %v, want invalid argument with %q", tt.name, err, tt.msg)
		}
	}
}

// The defaults survive the manifest's JSON form, and a manifest without
// them has none.
func TestManifestDefaultsRoundTrip(t *testing.T) {
	m := Manifest{Name: "t", Layers: []string{digestOf([]byte("x"))},
		Config: Config{Toolsets: []string{"web", "db"}, CommandPolicy: testPolicy(), Network: &Network{Mode: "allowlist", Allow: []string{"example.com"}}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"toolsets":["web","db"]`) || !strings.Contains(string(b), `"command_policy":{"rules":[{"action":"deny","prefix":["git","push"]}],"default":"ask"}`) {
		t.Errorf("manifest JSON %s", b)
	}
	var got Manifest
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Config, m.Config) || got.Validate() != nil {
		t.Errorf("round trip: %+v (%v), want %+v", got.Config, got.Validate(), m.Config)
	}
	b, _ = json.Marshal(Manifest{Name: "t"})
	if strings.Contains(string(b), "toolsets") || strings.Contains(string(b), "command_policy") {
		t.Errorf("a manifest without defaults names them: %s", b)
	}
}

// The store keeps the defaults across a restart, refuses invalid ones,
// and hands out copies that share nothing with what it keeps.
func TestStoreKeepsDefaults(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "store")
	s, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := s.NewLease()
	d := storeLayer(t, l, "f", "x")
	defer l.Release()
	bad := Manifest{Name: "bad", Layers: []string{d}, Config: Config{Toolsets: []string{"web", "web"}}}
	if _, err := s.Put(ctx, bad, PutOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Put with a toolset named twice: %v", err)
	}
	want := Config{Toolsets: []string{"web"}, CommandPolicy: testPolicy(), Network: &Network{Mode: "allowlist", Allow: []string{"example.com"}}}
	if _, err := s.Put(ctx, Manifest{Name: "t", Layers: []string{d}, Config: want}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("t")
	if err != nil {
		t.Fatal(err)
	}
	got.Config.Toolsets[0] = "changed"
	got.Config.CommandPolicy.Rules[0].Prefix[0] = "changed"
	got.Config.Network.Allow[0] = "changed"
	s2, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*Store{"the same store": s, "a reopened store": s2} {
		if m, err := st.Get("t"); err != nil || !reflect.DeepEqual(m.Config, want) {
			t.Errorf("%s: config %+v, %v; want %+v", name, m.Config, err, want)
		}
	}
}
