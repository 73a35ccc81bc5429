package airfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recipesDir holds the ready-made Airfiles shipped in the repository.
const recipesDir = "../../../recipes"

// TestRecipes parses every recipe and checks that its header says how to
// build it with one command.
func TestRecipes(t *testing.T) {
	ents, err := os.ReadDir(recipesDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) {
			name, ok := strings.CutSuffix(e.Name(), ".Airfile")
			if !ok {
				t.Fatalf("recipes/ should only hold NAME.Airfile files")
			}
			b, err := os.ReadFile(filepath.Join(recipesDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(strings.NewReader(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			want := "airlock template build " + name + " -f recipes/" + e.Name()
			if !strings.Contains(string(b), want) {
				t.Errorf("header lacks the build command %q", want)
			}
			if !templateNameRe.MatchString(name) {
				t.Errorf("%q is not a valid template name", name)
			}
			if len(f.Steps) == 0 {
				t.Error("no steps")
			}
		})
	}
	if n < 2 {
		t.Fatalf("found %d recipes, want at least python-data and node", n)
	}
}

func TestRecipePythonData(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(recipesDir, "python-data.Airfile"))
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, string(b))
	base := f.Base()
	if base.Kind != BaseDebian || base.Suite != "bookworm" {
		t.Fatalf("base = %+v", base)
	}
	for _, p := range []string{"python3", "python3-pandas", "python3-numpy", "python3-matplotlib"} {
		found := false
		for _, q := range base.Packages {
			found = found || q == p
		}
		if !found {
			t.Errorf("python-data lacks %s", p)
		}
	}
}
