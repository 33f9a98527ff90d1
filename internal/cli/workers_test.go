package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestWorkersLists: jetloop workers lists the tools the test's worker
// serves, that worker with what it serves, and the jobs waiting on each
// tool; as the viewer too, which sees the names and counts.
func TestWorkersLists(t *testing.T) {
	e := newEnv(t)
	var w Workers
	e.waitFor("the worker's tools", func() bool {
		w = Workers{}
		out := e.mustRun(ExitOK, "workers", "--json")
		if err := json.Unmarshal([]byte(out), &w); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return slices.ContainsFunc(w.Served, func(s Served) bool { return s.Name == "echo" && s.Kind == "tool" && s.Workers == 1 && s.TimeoutMs > 0 })
	})
	if len(w.Workers) != 1 || !slices.Contains(w.Workers[0].Serves, "echo") || w.Workers[0].Seen.IsZero() {
		t.Fatalf("workers: %+v", w.Workers)
	}
	out := e.mustRun(ExitOK, "workers")
	for _, want := range []string{"SERVED", "echo", "tool", w.Workers[0].Name, "ago"} {
		if !strings.Contains(out, want) {
			t.Errorf("workers does not show %q:\n%s", want, out)
		}
	}
}
