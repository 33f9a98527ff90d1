package client

import (
	"context"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/internal/turnlog"
)

// WithSubagents makes Watch follow the turns the watched turn's subagent
// calls run (a tool named agent:<Name> in its agent's tools), and theirs:
// their events are yielded too, as they are written, each with
// Info().ParentCall naming the call that runs its turn (Info().TurnID is the
// child's own). A child's events all come before its call's ToolCompleted,
// and each turn's events come in their order. The sequence ends once the
// watched turn and every child it started have finished; a call that never
// started its child (denied, refused) is not waited for.
func WithSubagents() WatchOption {
	return func(c *watchConfig) { c.subagents = true }
}

// watched is a turn Watch follows WithSubagents.
type watched struct {
	parent   *ParentRef // nil for the turn Watch was asked for
	depth    int        // its depth of subagent calls
	root     string     // the turn at the top of its chain
	cancel   context.CancelFunc
	queue    []Event // read, not yet yielded
	blocked  string  // the child whose end the queue's first event waits for
	finished bool
	calls    map[string]*subagentCall // its calls that run children, by call id
}

// childOf is the parent of the child of call of turn id (w): what the
// child's TurnStarted says.
func (w *watched) childOf(id, call string) *ParentRef {
	p := &ParentRef{TurnID: id, CallID: call, Depth: w.depth + 1}
	if w.depth > 0 {
		p.RootTurnID = w.root
	}
	return p
}

// subagentCall is what the parent's log says of a call that runs a child.
type subagentCall struct {
	child                  string
	gated, approved, ended bool
}

// delegated reports whether the call's child was (or will be) submitted: a
// gated call's only once approved.
func (s *subagentCall) delegated() bool { return !s.gated || s.approved }

type watchItem struct {
	turn string
	ev   Event
	err  error
}

// watchTree is Watch WithSubagents: one reader per turn, whose events meet
// here and are yielded in an order that keeps a child's end before its
// call's result.
func (c *Client) watchTree(ctx context.Context, root string, from turnlog.From, yield func(Event, error) bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan watchItem)
	turns := map[string]*watched{}
	follow := func(turn string, from turnlog.From, parent *ParentRef) {
		if _, ok := turns[turn]; ok {
			return
		}
		tctx, tcancel := context.WithCancel(ctx)
		w := &watched{parent: parent, root: turn, cancel: tcancel, calls: map[string]*subagentCall{}}
		if parent != nil {
			w.depth, w.root = parent.Depth, parent.TurnID
			if parent.RootTurnID != "" {
				w.root = parent.RootTurnID
			}
		}
		turns[turn] = w
		go func() {
			for ev, err := range c.followOf(tctx, turn, from, parent) {
				select {
				case items <- watchItem{turn, ev, err}:
				case <-tctx.Done():
					return
				}
				if err != nil || ev.Info().Type == TypeTurnFinished {
					return
				}
			}
		}()
	}
	drop := func(turn string) {
		if w, ok := turns[turn]; ok && !w.finished {
			w.cancel()
			delete(turns, turn)
		}
	}
	// note keeps what turn id's event ev says of its subagent calls.
	note := func(id string, w *watched, ev Event) {
		switch e := ev.(type) {
		case TurnStarted:
			if p := e.Parent; w.parent == nil && p != nil {
				// The watched turn is a subagent's itself.
				w.depth, w.root = p.Depth, p.TurnID
				if p.RootTurnID != "" {
					w.root = p.RootTurnID
				}
			}
		case ToolRequested:
			if e.ChildTurnID != "" {
				w.calls[e.CallID] = &subagentCall{child: e.ChildTurnID}
				follow(e.ChildTurnID, turnlog.FromFirst, w.childOf(id, e.CallID))
			}
		case TurnPaused:
			if s := w.calls[e.CallID]; s != nil && e.Kind == PauseApproval {
				s.gated = true
			}
		case TurnResumed:
			if s := w.calls[e.CallID]; s != nil && e.Approved != nil {
				s.approved = *e.Approved
			}
		case ToolCompleted:
			if s := w.calls[e.CallID]; s != nil {
				s.ended = true
				if !strings.HasPrefix(e.Worker, subagentWorker) {
					drop(s.child) // answered without running it
				}
			}
		case TurnFinished:
			w.finished = true
			for _, s := range w.calls {
				if !s.ended && !s.delegated() {
					drop(s.child) // never submitted: nothing to wait for
				}
			}
		}
	}
	// drain yields what turn id can yield now, and what that unblocks; it
	// returns false when the caller stopped.
	var drain func(id string) bool
	drain = func(id string) bool {
		w := turns[id]
		for w != nil && len(w.queue) > 0 && w.blocked == "" {
			ev := w.queue[0]
			if done, ok := ev.(ToolCompleted); ok && done.ChildTurnID != "" && strings.HasPrefix(done.Worker, subagentWorker) {
				if ch, ok := turns[done.ChildTurnID]; !ok || !ch.finished {
					// The child's end first. Watched from now on, a call
					// requested earlier was not seen: follow its child now.
					follow(done.ChildTurnID, turnlog.FromFirst, w.childOf(id, done.CallID))
					w.blocked = done.ChildTurnID
					return true
				}
			}
			w.queue = w.queue[1:]
			note(id, w, ev)
			if !yield(ev, nil) {
				return false
			}
			if w.finished {
				for pid, p := range turns {
					if p.blocked == id {
						p.blocked = ""
						if !drain(pid) {
							return false
						}
					}
				}
			}
		}
		return true
	}
	follow(root, from, nil)
	for {
		open := false
		for _, w := range turns {
			open = open || !w.finished || len(w.queue) > 0
		}
		if !open {
			return
		}
		select {
		case it := <-items:
			w := turns[it.turn]
			if w == nil {
				continue // dropped: its reader's end is no failure
			}
			if it.err != nil {
				yield(nil, it.err)
				return
			}
			w.queue = append(w.queue, it.ev)
			if !drain(it.turn) {
				return
			}
		case <-ctx.Done():
			yield(nil, fmt.Errorf("client: watch %s: %w", root, ctx.Err()))
			return
		}
	}
}

// subagentWorker starts the worker of a subagent call's result: agent:<Name>.
const subagentWorker = "agent:"
