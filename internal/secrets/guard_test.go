package secrets

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const importPath = "github.com/airlock-sandbox/airlock/internal/secrets"

// revealers are the module directories whose code may hold a Reader: the
// daemon that builds one and the two users of values.
var revealers = []string{"internal/secrets", "internal/daemon", "internal/egress", "internal/gateway"}

// readerUses walks the Go files under root (tests and testdata left out)
// and returns "file: what" for each reference to Reader or NewReader
// outside revealers, and for each dot import of this package (which would
// hide such a reference).
func readerUses(root string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if n := d.Name(); rel != "." && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if slices.ContainsFunc(revealers, func(r string) bool { return dir == r || strings.HasPrefix(dir, r+"/") }) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path != importPath {
				continue
			}
			name := "secrets"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			if name == "." {
				found = append(found, rel+": dot import")
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && (sel.Sel.Name == "Reader" || sel.Sel.Name == "NewReader") {
					found = append(found, rel+": "+name+"."+sel.Sel.Name)
				}
				return true
			})
		}
		return nil
	})
	slices.Sort(found)
	return slices.Compact(found), err
}

// TestOnlyRevealersHoldAReader: no package but the daemon, the egress
// edge and the gateway names Reader or NewReader, so that nothing that
// answers an API caller can reveal a value.
func TestOnlyRevealersHoldAReader(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	found, err := readerUses(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: only %v may hold a secrets.Reader (values never go back to a caller)", f, revealers)
	}
}

// TestReaderUsesCatchesABreak checks the checker on testdata: a handler
// in internal/api holding a Reader, a renamed import and a dot import are
// reported, the gateway is not.
func TestReaderUsesCatchesABreak(t *testing.T) {
	found, err := readerUses("testdata/revealguard")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"internal/api/secrets.go: secrets.Reader",
		"internal/other/dot.go: dot import",
		"internal/other/renamed.go: s2.NewReader",
	}
	if !slices.Equal(found, want) {
		t.Errorf("found %q, want %q", found, want)
	}
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
