package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
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

// TestCommandsReadThroughTheClient: no command, nor the web view, reads a
// turn's or a workflow's log itself; watch, replay, export, show, turns,
// top, fork and the rest read through client (Log, Last, FollowLog,
// OpenFeed, Turns, Workflows), which decides in one place where a log is
// stored.
func TestCommandsReadThroughTheClient(t *testing.T) {
	// The readers of logs the client wraps.
	readers := map[string][]string{
		"turnlog":  {"Follow", "NewLister", "Lister"},
		"logstore": {"New", "Store"},
		"bus":      {"NewStore", "Store"},
		// bus.Follow and bus.NewTail read any stream: of the events
		// stream, by its name or its subjects.
		"events": {"StreamEvents", "TurnEventsFilter", "SessionEventsFilter"},
	}
	// The web view jetloop ui serves too, but for its turns page, which
	// lists every log by subject, whatever its kind: the client lists turns
	// and workflows only.
	excused := map[string]bool{"../ui/ui.go Server": true, "../ui/ui.go Start": true, "../ui/turns.go row": true,
		"../ui/turns.go turnsLive": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	ui, err := filepath.Glob("../ui/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range append(files, ui...) {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			name := declName(decl)
			ast.Inspect(decl, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok || !slices.Contains(readers[x.Name], sel.Sel.Name) || excused[path+" "+name] {
					return true
				}
				t.Errorf("%s: %s uses %s.%s: read logs through client", fset.Position(sel.Pos()), name, x.Name, sel.Sel.Name)
				return true
			})
		}
	}
}

// declName names a top-level declaration: a function's or method's name,
// or the first name a type, var or const declaration declares.
func declName(d ast.Decl) string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return d.Name.Name
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				return s.Name.Name
			case *ast.ValueSpec:
				return s.Names[0].Name
			}
		}
	}
	return ""
}
