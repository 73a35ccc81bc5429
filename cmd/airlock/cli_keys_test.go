package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
)

// TestKeysHelpScopes: keys --help lists exactly the scopes some route
// checks (api.CheckedScopes, from the route table), each described, and
// none that grants nothing.
func TestKeysHelpScopes(t *testing.T) {
	var out strings.Builder
	c := &cli{stdout: &out}
	if code, err := c.main(t.Context(), []string{"keys", "--help"}); code != 0 || err != nil {
		t.Fatalf("keys --help: %d %v", code, err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^ {8}(\S+) +\S`).FindAllStringSubmatch(out.String(), -1) {
		listed[m[1]] = true
	}
	checked := api.CheckedScopes()
	if len(listed) != len(checked) || len(scopeHelp) != len(checked) {
		t.Errorf("help lists %v, scopeHelp has %d, routes check %v", listed, len(scopeHelp), checked)
	}
	for _, s := range checked {
		if !listed[string(s)] || scopeHelp[s] == "" {
			t.Errorf("scope %s: listed %v, described %q", s, listed[string(s)], scopeHelp[s])
		}
	}
	for _, s := range auth.AllScopes {
		if !listed[string(s)] && strings.Contains(out.String(), string(s)) {
			t.Errorf("help mentions %s, which no route checks", s)
		}
	}
}
