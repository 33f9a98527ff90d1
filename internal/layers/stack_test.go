package layers_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// constructors are the processes that run inside another only through
// internal/stack: a change to how one starts in-process is made there.
var constructors = map[string]string{
	module + "internal/orchestrator": "New",
	module + "worker":                "New",
}

// ownProcess are the files, by path from the module's root, that build the
// one process they are the main of: the binaries, the benchmark's child
// orchestrator (jetloop bench --orchestrator) and the examples, which show
// a user's own worker.
var ownProcess = []string{"cmd/orchestrator/", "cmd/toolworker/", "internal/bench/load.go", "examples/", "internal/stack/"}

// TestStacksStartInOnePlace fails when code outside internal/stack (tests
// aside) constructs an orchestrator or a tool worker to run in its process:
// jetloop demo and dev, the in-process benchmark and jetlooptest all start
// them through it.
func TestStacksStartInOnePlace(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		for _, own := range ownProcess {
			if strings.HasPrefix(rel, own) {
				return nil
			}
		}
		for _, c := range constructs(t, path, rel) {
			t.Errorf("%s: start it through internal/stack", c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// constructs lists the calls of constructors in file, named rel.
func constructs(t *testing.T, file, rel string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // local name → the constructor it has
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		fn, ok := constructors[path]
		if !ok {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = fn
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && names[x.Name] == sel.Sel.Name {
			pos := fset.Position(call.Pos())
			out = append(out, fmt.Sprintf("%s:%d calls %s.%s", rel, pos.Line, x.Name, sel.Sel.Name))
		}
		return true
	})
	return out
}
