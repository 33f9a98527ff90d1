package fsm

import (
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
)

// Job is an effect a state waits on: a model call or a tool call. ID is its
// deterministic Nats-Msg-Id, so publishing a job twice runs it once.
type Job struct {
	ID      string
	Subject string
	Model   *events.ModelJob
	Tool    *events.ToolJob
	// Submit starts a subagent call's child turn, published by the
	// orchestrator itself with Nats-Msg-Id subagent:<child_id>.
	Submit *events.Submit
	// Root is the turn at the top of the turn's chain of subagent calls:
	// a tool job's traceparent names a span of its trace.
	Root string
}

// SummaryInstruction asks for the sentinel's summary. Models ignore a missing
// tool list alone, so the instruction says it outright.
const SummaryInstruction = "You cannot call tools any more: the turn has stopped (%s). " +
	"Summarize for the user, in a few sentences, what has been done so far and what remains to be done."

// Jobs derives the jobs the state waits on. Publishing all of them again is
// harmless within the dedup window; the runtime publishes those a decision
// added.
func Jobs(s *State) []Job {
	switch s.Phase {
	case PhaseStream:
		j := s.modelJob(events.ModelStep)
		if s.Limits.Steps > 0 {
			j.Tools = s.Tools
		}
		return []Job{{ID: events.ModelJobID(s.TurnID, s.Step), Subject: events.SubjectModel, Model: j}}
	case PhaseSummarizing:
		j := s.modelJob(events.ModelSummary)
		j.Instruction = fmt.Sprintf(SummaryInstruction, s.causeLine())
		return []Job{{ID: events.SummaryJobID(s.TurnID), Subject: events.SubjectModel, Model: j}}
	case PhaseStepStart:
		if through := s.CompactionDue(); through > 0 {
			sub := s.CompactSubmit(through)
			return []Job{{ID: events.SubagentID(sub.TurnID), Subject: events.SubjectSubmit, Submit: &sub}}
		}
	case PhaseToolPhase, PhasePaused:
		var jobs []Job
		for i := range s.Calls {
			c := &s.Calls[i]
			if c.Delegated() {
				spec, _ := s.spec(c.Name)
				sub := s.ChildSubmit(c, c.Agent, spec.SharedSession)
				jobs = append(jobs, Job{ID: events.SubagentID(c.Child), Subject: events.SubjectSubmit, Submit: &sub})
				continue
			}
			if !c.Runnable() {
				continue
			}
			// The turn is in the id: call ids are the provider's, and
			// some reuse them across turns (docs/protocol.md, "Dedup ids").
			jobs = append(jobs, Job{ID: events.ToolJobID(s.TurnID, c.CallID), Subject: events.ToolSubject(c.Name), Root: s.Root(), Tool: &events.ToolJob{
				TurnID: s.TurnID, SessionID: s.SessionID, Step: s.Step, CallID: c.CallID, Tool: c.Name,
				Arguments: c.Arguments, Deadline: c.Deadline,
			}})
		}
		return jobs
	}
	return nil
}

func (s *State) modelJob(kind events.ModelKind) *events.ModelJob {
	msgs, _ := s.conversation()
	return &events.ModelJob{TurnID: s.TurnID, SessionID: s.SessionID, Step: s.Step, Kind: kind,
		Model: s.Model, System: s.System, Messages: msgs, Script: s.Script, ScriptIndex: s.ScriptIndex, Root: s.Root()}
}

// conversation is what the state's model call sends: the session's history
// and the turn's messages, compacted when the turn compacts (see Compact),
// and how many messages compaction left out.
func (s *State) conversation() ([]events.Message, int) {
	msgs := make([]events.Message, 0, len(s.History)+len(s.Messages))
	msgs = append(append(msgs, s.History...), s.Messages...)
	if s.Summarizer != "" {
		// Summaries replace steps; keep_steps only says which to keep.
		if s.Summary == nil {
			return msgs, 0
		}
		return s.summarized(msgs)
	}
	if s.KeepSteps <= 0 {
		return msgs, 0
	}
	return Compact(msgs, s.KeepSteps, len(s.History))
}

// Timer is a deadline the state waits on.
type Timer = machine.Timer

// Timers derives the state's deadlines: the turn's timeout and each running
// call's deadline.
func Timers(s *State) []Timer {
	if s.Done() || !s.Exists() {
		return nil
	}
	var ts []Timer
	if dl := s.Deadline(); !dl.IsZero() {
		ts = append(ts, Timer{At: dl, Timer: events.Timer{TurnID: s.TurnID, Kind: events.TimerTurn, At: dl}})
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Runnable() {
			ts = append(ts, Timer{At: c.Deadline, Timer: events.Timer{TurnID: s.TurnID, Kind: events.TimerCall, CallID: c.CallID, At: c.Deadline}})
		}
	}
	return ts
}

// Transcript is the turn's conversation as a later turn of its session sees
// it. A call left without a result (the turn was aborted or timed out while it
// ran) gets one, because providers refuse a tool call without its result.
func (s *State) Transcript() []events.Message {
	out := make([]events.Message, 0, len(s.Messages))
	for i, m := range s.Messages {
		out = append(out, m)
		if m.Role != events.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		answered := map[string]bool{}
		for _, r := range s.Messages[i+1:] {
			if r.Role == events.RoleTool {
				answered[r.CallID] = true
			}
		}
		for _, c := range m.ToolCalls {
			if !answered[c.CallID] {
				out = append(out, events.Message{Role: events.RoleTool, CallID: c.CallID, Name: c.Name,
					Content: "error: the turn ended before this call completed", IsError: true})
			}
		}
	}
	return out
}
