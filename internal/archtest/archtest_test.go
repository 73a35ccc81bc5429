package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/airlock-sandbox/airlock"

// pkg is one package of the module, from its non-test files.
type pkg struct {
	path    string // import path
	imports []string
	hasDoc  bool
}

// forbidden are the edges no package may have, directly or through
// others: each key must never reach any of its values.
var forbidden = map[string][]string{
	// What runs inside the sandbox, or confines it, knows nothing of the
	// daemon's state.
	// The agent and its client share only internal/agentwire.
	module + "/internal/agent":   append(daemonSide, module+"/internal/agentclient"),
	module + "/internal/confine": daemonSide,
	module + "/internal/cgroups": daemonSide,
	// A runtime backend serves the sandbox manager, never the reverse.
	module + "/internal/runtime":       {module + "/internal/sandbox", module + "/internal/api", module + "/internal/daemon"},
	module + "/internal/runtime/linux": {module + "/internal/sandbox", module + "/internal/api", module + "/internal/daemon"},
	// The public Go client and the wire types it shares with the server
	// stand alone: a program that imports them pulls in nothing of the
	// daemon.
	module + "/api":    {module + "/internal", module + "/client"},
	module + "/client": {module + "/internal"},
	// The E2B edge translates onto the public API through the client:
	// it reaches no service, store or agent itself, so E2B callers have
	// no door the API does not have.
	module + "/internal/mcp": {
		module + "/internal/api", module + "/internal/sandbox", module + "/internal/agentclient",
		module + "/internal/runtime", module + "/internal/store", module + "/internal/audit",
		module + "/internal/auth", module + "/internal/gateway", module + "/internal/daemon",
	},
	module + "/internal/toolexec/openai": {
		module + "/internal/api", module + "/internal/sandbox", module + "/internal/agentclient",
		module + "/internal/runtime", module + "/internal/store", module + "/internal/audit",
		module + "/internal/auth", module + "/internal/gateway", module + "/internal/daemon",
	},
	module + "/internal/toolexec/anthropic": {
		module + "/internal/api", module + "/internal/sandbox", module + "/internal/agentclient",
		module + "/internal/runtime", module + "/internal/store", module + "/internal/audit",
		module + "/internal/auth", module + "/internal/gateway", module + "/internal/daemon",
	},
	module + "/internal/e2b": {
		module + "/internal/api", module + "/internal/sandbox", module + "/internal/agentclient",
		module + "/internal/runtime", module + "/internal/store", module + "/internal/audit",
		module + "/internal/auth", module + "/internal/gateway", module + "/internal/daemon",
	},
}

var daemonSide = []string{
	module + "/internal/api", module + "/internal/sandbox", module + "/internal/daemon",
	module + "/internal/store", module + "/internal/store/sqlitestore", module + "/internal/audit",
	"modernc.org/sqlite", "database/sql",
}

func TestForbiddenImports(t *testing.T) {
	pkgs := loadModule(t)
	for from, banned := range forbidden {
		if _, ok := pkgs[from]; !ok {
			t.Errorf("rule for %s: no such package (update the rules)", from)
			continue
		}
		for _, to := range banned {
			if chain := path(pkgs, from, to); chain != nil {
				t.Errorf("%s reaches %s: %s", short(from), short(to), strings.Join(mapShort(chain), " -> "))
			}
		}
	}
}

// notDirect are the packages each key may reach through others but must
// not import itself: the API is HTTP over the services (the sandbox
// manager, the template registry, the interpreter), never over what those
// services are built from.
var notDirect = map[string][]string{
	module + "/internal/api": {
		module + "/internal/agentwire", module + "/internal/cgroups", module + "/internal/confine",
		module + "/internal/runtime/linux", module + "/internal/store/sqlitestore",
		module + "/internal/template/layers", module + "/internal/template/airfile",
		module + "/internal/template/debian", module + "/internal/template/build",
		module + "/internal/template/oci",
	},
}

func TestNoDirectImports(t *testing.T) {
	pkgs := loadModule(t)
	for from, banned := range notDirect {
		p, ok := pkgs[from]
		if !ok {
			t.Errorf("rule for %s: no such package (update the rules)", from)
			continue
		}
		for _, to := range banned {
			if _, ok := pkgs[to]; !ok {
				t.Errorf("rule for %s: no such package %s (update the rules)", short(from), short(to))
			}
			if slices.Contains(p.imports, to) {
				t.Errorf("%s imports %s itself: go through the service that owns it", short(from), short(to))
			}
		}
	}
}

func TestPackageDocs(t *testing.T) {
	for _, p := range sorted(loadModule(t)) {
		if strings.HasPrefix(p.path, module+"/gen/") {
			continue // generated
		}
		if !p.hasDoc {
			t.Errorf("package %s has no doc comment (// Package %s ... before its package clause)", short(p.path), filepath.Base(p.path))
		}
	}
}

// TestRulesCatchABreak checks the checker on a made-up graph: the agent
// reaching SQLite through two hops is found, with its chain.
func TestRulesCatchABreak(t *testing.T) {
	pkgs := map[string]*pkg{
		module + "/internal/agent": {path: module + "/internal/agent", imports: []string{module + "/internal/x"}},
		module + "/internal/x":     {path: module + "/internal/x", imports: []string{"fmt", module + "/internal/y"}},
		module + "/internal/y":     {path: module + "/internal/y", imports: []string{"modernc.org/sqlite"}},
	}
	chain := path(pkgs, module+"/internal/agent", "modernc.org/sqlite")
	want := []string{module + "/internal/agent", module + "/internal/x", module + "/internal/y", "modernc.org/sqlite"}
	if !slices.Equal(chain, want) {
		t.Errorf("path = %v, want %v", chain, want)
	}
	if chain := path(pkgs, module+"/internal/y", module+"/internal/agent"); chain != nil {
		t.Errorf("path y -> agent = %v, want none", chain)
	}
}

// path returns a chain of imports from from to to, or nil.
func path(pkgs map[string]*pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		p := pkgs[cur]
		if p == nil {
			continue // outside the module: its imports are not followed
		}
		for _, imp := range p.imports {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = cur
			if imp == to || strings.HasPrefix(imp, to+"/") {
				var chain []string
				for n := imp; n != ""; n = prev[n] {
					chain = append([]string{n}, chain...)
				}
				return chain
			}
			queue = append(queue, imp)
		}
	}
	return nil
}

// loadModule parses the imports and package docs of every package of the
// module (non-test files, every build tag: the rules hold on every
// platform).
func loadModule(t *testing.T) map[string]*pkg {
	t.Helper()
	root := moduleRoot(t)
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tools" || name == "node_modules") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		ip := module
		if rel != "." {
			ip += "/" + filepath.ToSlash(rel)
		}
		pk := pkgs[ip]
		if pk == nil {
			pk = &pkg{path: ip}
			pkgs[ip] = pk
		}
		if f.Doc != nil && strings.HasPrefix(strings.TrimSpace(f.Doc.Text()), "Package "+f.Name.Name) ||
			f.Doc != nil && f.Name.Name == "main" && strings.HasPrefix(strings.TrimSpace(f.Doc.Text()), "Command ") {
			pk.hasDoc = true
		}
		for _, is := range f.Imports {
			v, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return err
			}
			if !slices.Contains(pk.imports, v) {
				pk.imports = append(pk.imports, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages under %s", len(pkgs), root)
	}
	return pkgs
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+module+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("module root not found")
		}
		dir = parent
	}
}

func sorted(m map[string]*pkg) []*pkg {
	out := make([]*pkg, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func short(p string) string { return strings.TrimPrefix(p, module+"/") }

func mapShort(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = short(p)
	}
	return out
}
