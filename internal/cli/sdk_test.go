package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsSubmitThroughTheClient: no command publishes a submission, a
// workflow or a control message itself; each goes through client, whose
// checks users get too. The one use of those subjects left is the UI's
// probe of what its credentials may publish, which stores nothing.
func TestCommandsSubmitThroughTheClient(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		probed := map[ast.Node]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "probe" {
					for _, a := range call.Args {
						ast.Inspect(a, func(m ast.Node) bool { probed[m] = true; return true })
					}
				}
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || probed[n] {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "events" {
				switch sel.Sel.Name {
				case "SubjectSubmit", "SubjectWorkflow", "ControlSubject":
					t.Errorf("%s: events.%s: submit and steer through client", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
