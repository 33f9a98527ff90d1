package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pure are the packages whose code must be deterministic: the machines
// decide and fold the same way on every replay, so time, ids and results
// arrive as fields of their inputs (internal/fsm/doc.go).
var pure = []string{"../fsm", "../workflow", "../machine"}

// forbiddenImports are packages a machine may not import at all: the
// environment, I/O, randomness, logging and the transport.
var forbiddenImports = []string{
	"os", "os/", "net", "net/", "math/rand", "math/rand/v2", "crypto/rand", "syscall", "io/fs", "log", "log/",
	"runtime", "runtime/", "unsafe", "github.com/nats-io/",
}

// forbiddenTime are the functions of package time that read the clock or
// wait; time's types and arithmetic (Time, Duration, Add, Sub) stay allowed.
var forbiddenTime = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"Tick": true, "NewTimer": true, "NewTicker": true,
}

// TestMachinesArePure fails when the code of internal/fsm or
// internal/workflow (tests aside) reads the clock, waits, draws random
// numbers, or touches the environment or the network, the way Temporal's
// workflowcheck holds workflow code to determinism.
func TestMachinesArePure(t *testing.T) {
	for _, dir := range pure {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("%s: no Go files", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, v := range impurities(t, f) {
				t.Errorf("%s: the machines are pure (see internal/fsm/doc.go)", v)
			}
		}
	}
}

// impurities lists what file does that a machine may not.
func impurities(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	timeNames := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, bad := range forbiddenImports {
			if path == bad || strings.HasSuffix(bad, "/") && strings.HasPrefix(path, bad) {
				out = append(out, fset.Position(imp.Pos()).String()+": imports "+path)
			}
		}
		if path == "time" {
			name := "time"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			if name == "." {
				out = append(out, fset.Position(imp.Pos()).String()+": imports time with a dot, which hides its calls")
			}
			timeNames[name] = true
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && timeNames[x.Name] && forbiddenTime[sel.Sel.Name] {
			out = append(out, fset.Position(sel.Pos()).String()+": calls time."+sel.Sel.Name)
		}
		return true
	})
	return out
}
