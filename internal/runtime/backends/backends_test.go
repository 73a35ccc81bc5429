package backends

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestTable(t *testing.T) {
	if Default().Name != "linux" || !slices.Equal(Names(), []string{"linux"}) {
		t.Errorf("default %q, names %v", Default().Name, Names())
	}
	seen := map[string]bool{}
	for _, b := range table {
		if b.Name == "" || b.New == nil || (b.AgentCommand == "") != (b.RunAgent == nil) {
			t.Errorf("incomplete row %+v", b)
		}
		if seen[b.AgentCommand] {
			t.Errorf("two backends run their agent with %q", b.AgentCommand)
		}
		seen[b.AgentCommand] = true
	}
	if b, err := Lookup("linux"); err != nil || b.Name != "linux" {
		t.Errorf("Lookup(linux) = %v, %v", b.Name, err)
	}
	if _, err := Lookup("kvm"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Lookup(kvm) = %v", err)
	}
	if run, ok := AgentEntry([]string{"agent", "x"}); !ok || run == nil {
		t.Error("the linux agent's entry is not found")
	}
	for _, args := range [][]string{nil, {"serve"}, {""}} {
		if _, ok := AgentEntry(args); ok {
			t.Errorf("AgentEntry(%q) found an agent", args)
		}
	}
}
