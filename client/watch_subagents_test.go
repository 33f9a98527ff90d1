package client_test

import (
	"testing"

	"github.com/jetloop/jetloop/client"
)

// TestWatchWithSubagents watches a turn whose call runs a child (Boss) whose
// step runs two more at once (Greeter): the sequence holds every event of
// the three generations, each turn's in order, each child's named by its
// parent's call and all before that call's result; it ends with the top
// turn's end.
func TestWatchWithSubagents(t *testing.T) {
	c, ctx := newClient(t)
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Top", Input: client.Text("go")})
	if err != nil {
		t.Fatal(err)
	}
	var live []client.Event
	for ev, err := range c.Watch(ctx, id, client.WithSubagents()) {
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, ev)
	}
	checkTree(t, id, live)
	// Once it has all finished, the logs are read at once, and a parent's
	// log races ahead of its children's: the order still holds.
	var again []client.Event
	for ev, err := range c.Watch(ctx, id, client.WithSubagents()) {
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ev)
	}
	checkTree(t, id, again)
	if len(again) != len(live) {
		t.Errorf("%d events watched live, %d after the end", len(live), len(again))
	}
}

// checkTree checks the events a watch of the top turn id yielded
// WithSubagents.
func checkTree(t *testing.T, id string, seen []client.Event) {
	t.Helper()
	if len(seen) == 0 || seen[len(seen)-1].Info().TurnID != id || seen[len(seen)-1].Info().Type != client.TypeTurnFinished {
		t.Fatalf("the sequence does not end with the top turn's end")
	}
	type turn struct {
		parent *client.ParentRef
		seqs   []int
		agent  string
		end    int // index of its TurnFinished in seen
	}
	turns := map[string]*turn{}
	completed := map[string]int{} // child turn: index of its call's ToolCompleted
	for i, ev := range seen {
		info := ev.Info()
		tr := turns[info.TurnID]
		if tr == nil {
			tr = &turn{parent: info.ParentCall}
			turns[info.TurnID] = tr
		}
		if (tr.parent == nil) != (info.ParentCall == nil) || tr.parent != nil && *tr.parent != *info.ParentCall {
			t.Errorf("turn %s: event %d names parent %+v, an earlier one %+v", info.TurnID, info.Seq, info.ParentCall, tr.parent)
		}
		tr.seqs = append(tr.seqs, info.Seq)
		switch e := ev.(type) {
		case client.TurnStarted:
			tr.agent = e.Agent
			if (e.Parent == nil) != (info.ParentCall == nil) || e.Parent != nil && *e.Parent != *info.ParentCall {
				t.Errorf("turn %s started by %+v, yielded with parent %+v", info.TurnID, e.Parent, info.ParentCall)
			}
		case client.ToolCompleted:
			if e.ChildTurnID != "" {
				completed[e.ChildTurnID] = i
			}
		case client.TurnFinished:
			tr.end = i
			if !e.Succeeded() {
				t.Errorf("turn %s: %s %s", info.TurnID, e.StopReason, e.Error)
			}
		}
	}
	if len(turns) != 4 {
		t.Fatalf("%d turns yielded, want Top, Boss and two Greeters", len(turns))
	}
	agents := map[string]int{}
	for tid, tr := range turns {
		agents[tr.agent]++
		for i, s := range tr.seqs {
			if s != i+1 {
				t.Fatalf("turn %s: events %v, want 1, 2, 3 … in order", tid, tr.seqs)
			}
		}
		if tid == id {
			continue
		}
		want := map[string]int{"Boss": 1, "Greeter": 2}[tr.agent]
		if tr.parent == nil || tr.parent.Depth != want || turns[tr.parent.TurnID] == nil {
			t.Errorf("turn %s (%s): parent %+v", tid, tr.agent, tr.parent)
		}
		if at, ok := completed[tid]; !ok || tr.end > at {
			t.Errorf("turn %s (%s) ended at %d, after its call's result at %d (%v)", tid, tr.agent, tr.end, at, ok)
		}
	}
	if agents["Top"] != 1 || agents["Boss"] != 1 || agents["Greeter"] != 2 {
		t.Errorf("agents %v", agents)
	}
}

// TestWatchWithSubagentsDenied: a call whose child waits for an approval
// and is denied never runs the child, and the watch ends with the turn.
func TestWatchWithSubagentsDenied(t *testing.T) {
	c, ctx := newClient(t)
	id, wait := paused(t, c, ctx, "Careful")
	if err := c.Deny(ctx, id, wait.CallID, "no"); err != nil {
		t.Fatal(err)
	}
	var last client.Event
	for ev, err := range c.Watch(ctx, id, client.WithSubagents()) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Info().TurnID != id {
			t.Fatalf("an event of another turn: %+v", ev.Info())
		}
		last = ev
	}
	if fin, ok := last.(client.TurnFinished); !ok || fin.Output != "Not allowed, then." {
		t.Fatalf("ended with %+v", last)
	}
}
