package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// Subagents (docs/protocol.md, Subagents): a call of an agent tool is no job for
// a worker. The parent's log names the child turn (tool.requested's
// child_turn_id), and the child's submission is a job the parent's state
// derives like any other (fsm.Jobs), published by this process with
// Nats-Msg-Id subagent:<child_id>: a crash before or after it publishes the
// same message again, which the inbox drops or the child's digest makes
// nothing. The child's end comes back to the parent as a notice on the
// parent's result inbox; the parent reads the child's turn.finished from
// the child's log, never from the notice, so no worker can forge a child's
// result.

// subagentSpecs are the agent tools an agent offers: <Name>, with the
// agent's description and {"task": string}.
func (sr *starter) subagentSpecs(a *agents.Agent) []events.ToolSpec {
	out := make([]events.ToolSpec, 0, len(a.Subagents))
	for _, name := range a.Subagents {
		child, ok := sr.agents.Get(name)
		if !ok {
			continue // the load checked it; a reload may not have
		}
		desc := child.Description
		if desc == "" {
			desc = "Runs the agent " + name + " on a task and returns its answer."
		}
		budget := child.Budget
		if budget <= 0 {
			budget = fsm.DefaultBudget
		}
		out = append(out, events.ToolSpec{Name: name, Description: desc, Parameters: fsm.SubagentParameters,
			Agent: name, SharedSession: a.SharedSession, Budget: budget})
	}
	return out
}

// checkChild accepts a submission of a subagent's turn only when it is the
// very one the parent's log calls for: a turn id of the sub- form, a
// parent, or any content other than the parent's call derives, is someone
// else's, and the turn is rejected. It also refuses a child whose agent is
// one of its ancestors'; genuine says the submission is the parent's own,
// whose end the parent waits for, refused or not.
func (sr *starter) checkChild(ctx context.Context, sub *events.Submit) (genuine bool, err error) {
	p := sub.Parent
	notOurs := func(why string) error {
		return &deadLetter{fmt.Sprintf("turn %q is not a subagent's turn the orchestrator submitted: %s", sub.TurnID, why)}
	}
	if p == nil {
		return false, notOurs("turn ids that start with " + fsm.ChildPrefix + " are kept for subagents")
	}
	if through, ok := fsm.CompactThrough(p.CallID); ok && fsm.CompactChildID(p.TurnID, through) == sub.TurnID {
		return sr.checkCompaction(ctx, sub, through, notOurs)
	}
	if want := fsm.ChildTurnID(p.TurnID, p.CallID); want != sub.TurnID {
		return false, notOurs(fmt.Sprintf("call %q of turn %q runs turn %q", p.CallID, p.TurnID, want))
	}
	parent, _, err := sr.store.Load(ctx, p.TurnID)
	if err != nil {
		return false, &retry{err: err}
	}
	c := parent.Call(p.CallID)
	if c == nil || c.Child != sub.TurnID {
		return false, notOurs(fmt.Sprintf("the log of turn %q shows no call %q that runs it", p.TurnID, p.CallID))
	}
	spec, _ := specOf(parent, c.Name)
	want, err1 := events.Marshal(parent.ChildSubmit(c, c.Agent, spec.SharedSession))
	got, err2 := events.Marshal(*sub)
	if err1 != nil || err2 != nil || !bytes.Equal(want, got) {
		return false, notOurs(fmt.Sprintf("it differs from what call %q of turn %q submits", p.CallID, p.TurnID))
	}
	// An agent never starts itself or an ancestor: walk up the chain (at
	// most MaxDepth turns, each a read of its log).
	chain := []string{parent.Agent}
	for up := parent; up.Parent != nil && len(chain) <= fsm.MaxDepth; {
		next, _, err := sr.store.Load(ctx, up.Parent.TurnID)
		if err != nil {
			return false, &retry{err: err}
		}
		chain = append(chain, next.Agent)
		up = next
	}
	if slices.Contains(chain, sub.Agent) {
		slices.Reverse(chain)
		return true, &deadLetter{fmt.Sprintf("agent %s cannot start itself or an ancestor (this call's chain: %s)", sub.Agent, strings.Join(chain, " > "))}
	}
	return true, nil
}

// checkCompaction accepts the submission of a summarizing compaction's
// child only when the parent's log waits for that very summary.
func (sr *starter) checkCompaction(ctx context.Context, sub *events.Submit, through int, notOurs func(string) error) (bool, error) {
	p := sub.Parent
	parent, _, err := sr.store.Load(ctx, p.TurnID)
	if err != nil {
		return false, &retry{err: err}
	}
	if parent.CompactionDue() != through {
		return false, notOurs(fmt.Sprintf("the log of turn %q waits for no summary of its steps through %d", p.TurnID, through))
	}
	want, err1 := events.Marshal(parent.CompactSubmit(through))
	got, err2 := events.Marshal(*sub)
	if err1 != nil || err2 != nil || !bytes.Equal(want, got) {
		return false, notOurs(fmt.Sprintf("it differs from the summary turn %q asks for", p.TurnID))
	}
	return true, nil
}

func specOf(st *fsm.State, name string) (events.ToolSpec, bool) {
	for _, t := range st.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return events.ToolSpec{}, false
}

// notifyParent tells a subagent's parent that its child's turn finished,
// when its log says so. The notice's id makes it one; the parent reads the
// result from the child's log.
func (ef *effects) notifyParent(ctx context.Context, p *events.ParentRef, child, agent string) error {
	last, _, ok, err := ef.store.Last(ctx, child)
	if err != nil {
		return err
	}
	if !ok || last.Type != events.TurnFinished {
		return nil
	}
	var fin events.TurnFinishedData
	if err := json.Unmarshal(last.Data, &fin); err != nil {
		return fmt.Errorf("orchestrator: the end of subagent turn %s: %w", child, err)
	}
	out, isErr := fsm.ChildResult(agent, child, fin)
	data, err := events.Marshal(events.ToolResult{TurnID: p.TurnID, CallID: p.CallID, Tool: agent, Output: out,
		IsError: isErr, DurationMs: fin.Metrics.DurationMs, Worker: fsm.SubagentWorker + agent, Attempt: 1})
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: events.ResultSubject(p.TurnID), Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, events.ResultID(p.TurnID, p.CallID))
	if _, err := ef.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("orchestrator: tell turn %s its subagent finished: %w", p.TurnID, err)
	}
	return nil
}

// childAnswer turns a subagent's notice into the parent's input, read from
// the child's log.
func (ef *effects) childAnswer(ctx context.Context, turn, callID string) (fsm.Input, error) {
	child := fsm.ChildTurnID(turn, callID)
	through, compaction := fsm.CompactThrough(callID)
	if compaction {
		child = fsm.CompactChildID(turn, through)
	}
	last, _, ok, err := ef.store.Last(ctx, child)
	if err != nil {
		return nil, &retry{err: err}
	}
	if !ok || last.Type != events.TurnFinished {
		return nil, &deadLetter{fmt.Sprintf("a subagent's result for call %q of turn %q, whose turn %s has not finished", callID, turn, child)}
	}
	var fin events.TurnFinishedData
	if err := json.Unmarshal(last.Data, &fin); err != nil {
		return nil, &deadLetter{fmt.Sprintf("the end of subagent turn %s: %v", child, err)}
	}
	if compaction {
		return fsm.CompactAnswer{TurnID: turn, ThroughStep: through, ChildTurnID: child, Finished: &fin}, nil
	}
	return fsm.ChildAnswer{TurnID: turn, CallID: callID, ChildTurnID: child, Finished: &fin}, nil
}

// ended does what a turn's end owes its relatives: its parent's call gets
// its result, and its children still running are aborted. Both are
// idempotent, so it runs again whenever it may not have run.
func (ef *effects) ended(ctx context.Context, log *slog.Logger, st *fsm.State) error {
	if st.Finished == nil {
		return nil
	}
	if p := st.Parent; p != nil {
		if err := ef.notifyParent(ctx, p, st.TurnID, st.Agent); err != nil {
			// A child's clock is what was left of its parent's: past it,
			// the parent has ended on its own clock and waits for no
			// notice, so the child may leave the index without one.
			if dl := st.Deadline(); dl.IsZero() || time.Now().Before(dl) {
				return err
			}
			log.Warn("cannot tell a subagent's parent that it finished; the parent's clock has passed", "parent", p.TurnID, "err", err)
		}
	}
	for _, child := range st.Children() {
		data, err := events.Marshal(events.Control{Action: events.ActionAbort,
			Reason: fmt.Sprintf("its parent turn %s ended %s", st.TurnID, st.Finished.StopReason)})
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: events.ControlSubject(child), Data: data, Header: nats.Header{}}
		msg.Header.Set(nats.MsgIdHdr, "parent-ended:"+child)
		if _, err := ef.js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("orchestrator: abort subagent turn %s: %w", child, err)
		}
		log.Info("aborting a subagent's turn: its parent ended", "child", child)
	}
	return nil
}
