package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
)

// subagentsExample is the agents file of make demo-subagents: a Lead that
// delegates to a Researcher and a Coder, on scripted models.
var subagentsExample = filepath.Join("..", "..", "examples", "subagents", "AGENTS.md")

// runSubagentsExample runs the example's Lead on the embedded server (the
// worker's tools reading the repository, as the demo's do) and returns the
// turn's id, its log and its children's logs.
func runSubagentsExample(t *testing.T) (*env, string, []events.Envelope, map[string][]events.Envelope) {
	t.Helper()
	e := newEnvServing(t, subagentsExample, filepath.Join("..", ".."))
	const id = "lead-html"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Submit(ctx, e.nc, events.Submit{TurnID: id, Agent: "Lead",
		Input: []events.Message{{Role: events.RoleUser, Content: "Document the hard step cap"}}}); err != nil {
		t.Fatal(err)
	}
	e.waitType(id, events.TurnFinished)
	log := e.log(id)
	children := map[string][]events.Envelope{}
	for _, child := range timeline.ChildTurns(log) {
		children[child] = e.log(child)
	}
	if len(children) != 2 {
		t.Fatalf("the example's Lead ran %d subagents, want 2", len(children))
	}
	return e, id, log, children
}

// TestReplayHTMLSubagents: replay --html of a turn whose calls ran
// subagents draws each child's turn under its call, on the parent's axis
// and inside the call's span, with the child's steps and calls; the page
// from a file of concatenated exports is the same.
func TestReplayHTMLSubagents(t *testing.T) {
	e, id, log, children := runSubagentsExample(t)
	out := filepath.Join(t.TempDir(), "lead.html")
	stdout := e.mustRun(ExitOK, "replay", "--html", out, id)
	if want := fmt.Sprintf("wrote %s: %d events, 3 steps, 2 subagent turns\n", out, len(log)); stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	tl := checkSubagentPage(t, out, children)

	var all strings.Builder
	all.WriteString(e.mustRun(ExitOK, "export", id))
	for child := range children {
		all.WriteString(e.mustRun(ExitOK, "export", child))
	}
	fromFile := filepath.Join(t.TempDir(), "lead-file.html")
	e.mustRun(ExitOK, "replay", "--html", fromFile, "--file", e.script("lead.jsonl", all.String()))
	a, _ := json.Marshal(tl)
	b, _ := json.Marshal(checkSubagentPage(t, fromFile, children))
	if !bytes.Equal(a, b) {
		t.Error("the page from the file draws another timeline than the page from the server")
	}
}

// checkSubagentPage reads a page of the example's Lead and checks that each
// subagent call holds its child's timeline.
func checkSubagentPage(t *testing.T, path string, children map[string][]events.Envelope) *timeline.Timeline {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	checkSelfContained(t, page)
	m := regexp.MustCompile(`(?s)<script type="application/json" id="timeline-data">(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no timeline-data")
	}
	var tl timeline.Timeline
	if err := json.Unmarshal([]byte(m[1]), &tl); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range tl.Steps {
		for _, c := range s.Tools {
			if c.ChildTurnID == "" {
				continue
			}
			seen++
			clog := children[c.ChildTurnID]
			ch := c.Child
			if ch == nil || clog == nil || ch.TurnID != c.ChildTurnID || c.ChildMissing != "" {
				t.Fatalf("call %s (%s): child %v, missing %q", c.CallID, c.Name, ch, c.ChildMissing)
			}
			if ch.Agent != c.Name || ch.Parent == nil || ch.Parent.TurnID != tl.TurnID || ch.Parent.CallID != c.CallID {
				t.Errorf("child %s: agent %s parent %+v", ch.TurnID, ch.Agent, ch.Parent)
			}
			steps, calls := stepsAndCalls(clog)
			if len(ch.Steps) != len(steps) || ch.Finished == nil || ch.Finished.StopReason != events.StopCompleted {
				t.Errorf("child %s: %d steps drawn, its log has %d; finished %+v", ch.TurnID, len(ch.Steps), len(steps), ch.Finished)
			}
			for _, cs := range ch.Steps {
				// On the parent's axis, inside the call's span.
				if cs.StartMs < c.StartMs || cs.EndMs > c.EndMs {
					t.Errorf("child %s step %d at %v..%v, outside its call's %v..%v", ch.TurnID, cs.Step, cs.StartMs, cs.EndMs, c.StartMs, c.EndMs)
				}
				for _, cc := range cs.Tools {
					delete(calls, cc.CallID)
				}
			}
			if len(calls) > 0 {
				t.Errorf("child %s lacks the calls %v", ch.TurnID, calls)
			}
		}
	}
	if seen != 2 || len(tl.Children()) != 2 {
		t.Fatalf("%d subagent calls drawn with children, want 2", seen)
	}
	return &tl
}
