package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/internal/events"
)

// Divergence is the first place where a recorded log and today's machine
// disagree: the event the log holds and the one Decide writes there (nil
// when it writes nothing).
type Divergence struct {
	Seq      int
	Recorded events.Envelope
	Derived  *events.Envelope
	Reason   string
}

func (d *Divergence) Error() string {
	if d.Derived == nil {
		return fmt.Sprintf("fsm: seq %d (%s): %s", d.Seq, d.Recorded.Type, d.Reason)
	}
	return fmt.Sprintf("fsm: seq %d: %s\n  recorded: %s %s\n  derived:  %s %s", d.Seq, d.Reason,
		d.Recorded.Type, d.Recorded.Data, d.Derived.Type, d.Derived.Data)
}

// Verify replays a turn's log through Decide and reports the first event
// today's machine would not write. Every input the log records is
// recovered from the event it caused (a model answer from model.completed, a
// tool result from tool.completed, a control message from turn.resumed, a
// deadline from its turn.finished or error result) and decided again from
// the state before it; everything the machine wrote on its own (step
// starts, checks, pauses, sentinels, finishes, refusals) must come out the
// same, data and all. It returns the number of decisions re-derived.
//
// A decision whose events were appended in two goes (a crash between them,
// repaired when the input came again) is recognised by the later events'
// time, and decided again from where the first go stopped.
//
// A log names the earlier turns of its session but does not hold their
// messages. Everything the machine decides depends only on how many there
// are, except the counts of a compacting turn's model.completed (messages,
// compacted), which depend on what they are: without WithHistory, Verify
// takes those two counts as the log records them when the turn has a history
// and compacts; given the history, it re-derives them too.
func Verify(log []events.Envelope, opts ...VerifyOption) (int, error) {
	if len(log) == 0 {
		return 0, nil
	}
	var cfg verifyConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := New(log[0].TurnID)
	decisions := 0
	var in Input
	for i := 0; i < len(log); {
		first := log[i]
		if next, ok := inputOf(s, first); ok {
			in = next
			if st, ok := in.(Start); ok && cfg.history != nil {
				if len(cfg.history) != len(st.History) {
					return decisions, &Divergence{Seq: first.Seq, Recorded: first,
						Reason: fmt.Sprintf("the history given has %d messages, the log counts %d", len(cfg.history), len(st.History))}
				}
				st.History = cfg.history
				in = st
			}
		} else if in == nil || !first.Time.After(log[i-1].Time) {
			return decisions, &Divergence{Seq: first.Seq, Recorded: first,
				Reason: "no input explains this event, and the decision before it was complete"}
		}
		// else: the rest of a decision cut short, decided again.
		k := 0
		env := Env{Now: first.Time, NewID: func() string {
			if i+k < len(log) {
				k++
				return log[i+k-1].ID
			}
			return "extra"
		}}
		d, err := Decide(s, in, env)
		if err != nil {
			return decisions, &Divergence{Seq: first.Seq, Recorded: first, Reason: "today's machine refuses it: " + err.Error()}
		}
		if len(d.Events) == 0 {
			return decisions, &Divergence{Seq: first.Seq, Recorded: first, Reason: "today's machine writes nothing here"}
		}
		n := 0
		for _, de := range d.Events {
			if i+n >= len(log) {
				return decisions, &Divergence{Seq: de.Seq, Recorded: events.Envelope{Seq: de.Seq, Type: "(end of log)"},
					Derived: &de, Reason: "the log ends where today's machine writes more"}
			}
			re := log[i+n]
			if n > 0 && !re.Time.Equal(first.Time) {
				break // appended in a second go: decide the rest again
			}
			if de.Type == events.ModelCompleted && cfg.history == nil && s.HistoryLen > 0 && s.KeepSteps > 0 {
				de = recordedCounts(de, re)
			}
			if why := differ(re, de); why != "" {
				return decisions, &Divergence{Seq: re.Seq, Recorded: re, Derived: &de, Reason: why}
			}
			n++
		}
		if n < len(d.Events) {
			// Fold what was appended and let the input come again.
			st, err := Fold(log[:i+n])
			if err != nil {
				return decisions, &Divergence{Seq: log[i+n-1].Seq, Recorded: log[i+n-1], Reason: err.Error()}
			}
			st.History = s.History
			s = st
		} else {
			s = d.State
		}
		decisions++
		i += n
	}
	return decisions, nil
}

// VerifyOption changes what Verify knows beyond the log.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	history []events.Message
}

// WithHistory gives Verify the conversation of the earlier turns the log's
// turn.started names (their transcripts, oldest first), so that it re-derives
// what depends on their content. A history whose length differs from the
// log's count is a divergence at turn.started.
func WithHistory(msgs []events.Message) VerifyOption {
	return func(c *verifyConfig) {
		c.history = msgs
		if c.history == nil {
			c.history = []events.Message{}
		}
	}
}

// recordedCounts returns the derived model.completed de with the messages
// and compacted counts of the recorded re, which Verify cannot re-derive
// without the history's messages.
func recordedCounts(de, re events.Envelope) events.Envelope {
	var r, d events.ModelCompletedData
	if json.Unmarshal(re.Data, &r) != nil || json.Unmarshal(de.Data, &d) != nil || r.Messages == nil || r.Compacted == nil {
		return de // a record without the counts differs, as it should
	}
	d.Messages, d.Compacted = r.Messages, r.Compacted
	if raw, err := json.Marshal(d); err == nil {
		de.Data = raw
	}
	return de
}

// differ says how a recorded event differs from a derived one, "" when it
// does not.
func differ(re, de events.Envelope) string {
	switch {
	case re.Type != de.Type:
		return fmt.Sprintf("the log has %s where today's machine writes %s", re.Type, de.Type)
	case re.Seq != de.Seq || re.Step != de.Step:
		return fmt.Sprintf("seq/step %d/%d recorded, %d/%d derived", re.Seq, re.Step, de.Seq, de.Step)
	case re.TurnID != de.TurnID || re.SessionID != de.SessionID:
		return "the event names another turn or session"
	case !sameJSON(re.Data, de.Data):
		return fmt.Sprintf("%s differs", re.Type)
	}
	return ""
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

func keepSteps(c *events.Compaction) int {
	if c == nil {
		return 0
	}
	return c.KeepSteps
}

// inputOf recovers the input that made the orchestrator write e, for the
// events that begin a decision; ok is false for events the machine writes
// on its own.
func inputOf(s *State, e events.Envelope) (Input, bool) {
	switch e.Type {
	case events.TurnStarted:
		var d events.TurnStartedData
		if json.Unmarshal(e.Data, &d) != nil || d.Limits.Steps == nil {
			return nil, false
		}
		setup := setupOf(d)
		// The tools as the log names them: a log without specs was
		// decided without them.
		setup.Tools = d.ToolSpecs
		// Only the history's length is in the log; it is all the machine's
		// events depend on.
		return Start{TurnID: e.TurnID, SessionID: e.SessionID, Input: d.Input, History: make([]events.Message, d.History),
			Setup: setup}, true
	case events.TurnCompacted:
		var d events.TurnCompactedData
		if json.Unmarshal(e.Data, &d) != nil {
			return nil, false
		}
		// The summary as recorded: replay never runs the child again.
		return CompactAnswer{TurnID: e.TurnID, ThroughStep: d.ThroughStep, ChildTurnID: d.ChildTurnID,
			Summary: d.Summary, Error: d.Error}, true
	case events.ModelCompleted:
		var d events.ModelCompletedData
		if json.Unmarshal(e.Data, &d) != nil {
			return nil, false
		}
		return ModelAnswer{TurnID: e.TurnID, Step: e.Step, Kind: events.ModelStep, Text: d.Text,
			ToolCalls: d.ToolCalls, FinishReason: d.FinishReason, Usage: d.Usage, DurationMs: d.DurationMs,
			Attempts: d.Attempts, Error: d.Error}, true
	case events.TurnSentinel:
		var d events.TurnSentinelData
		if json.Unmarshal(e.Data, &d) != nil || s.Checked == nil {
			return nil, false
		}
		summary, _ := strings.CutPrefix(d.Text, s.causeLine()+"\n\n")
		if summary == d.Text {
			summary = "" // the summary call failed: the cause line alone
		}
		a := ModelAnswer{TurnID: e.TurnID, Step: e.Step, Kind: events.ModelSummary, Text: summary, Attempts: 1}
		if d.Usage != nil {
			a.Usage = *d.Usage
		}
		return a, true
	case events.ToolCompleted:
		var d events.ToolCompletedData
		if json.Unmarshal(e.Data, &d) != nil {
			return nil, false
		}
		if d.ChildTurnID != "" {
			// A child's end, recorded: replay never runs the child again.
			return ChildAnswer{TurnID: e.TurnID, CallID: d.CallID, ChildTurnID: d.ChildTurnID,
				Output: d.Output, IsError: d.IsError, DurationMs: d.DurationMs, Metrics: d.ChildMetrics}, true
		}
		if d.Worker == Orchestrator {
			// The results the orchestrator writes at the start of a
			// decision are those of a call whose deadline passed.
			return Tick{TurnID: e.TurnID, Kind: events.TimerCall, CallID: d.CallID, At: e.Time}, true
		}
		return ToolAnswer{TurnID: e.TurnID, CallID: d.CallID, Tool: d.Name, Output: d.Output, IsError: d.IsError,
			Final: d.Final, DurationMs: d.DurationMs, Worker: d.Worker, Attempt: d.Attempts}, true
	case events.TurnResumed:
		var d events.TurnResumedData
		if json.Unmarshal(e.Data, &d) != nil {
			return nil, false
		}
		if d.Approved != nil {
			return Command{Action: events.ActionApprove, CallID: d.CallID, Approved: d.Approved, Note: d.Note}, true
		}
		return Command{Action: events.ActionReply, CallID: d.CallID, Answer: d.Answer}, true
	case events.TurnFinished:
		var d events.TurnFinishedData
		if json.Unmarshal(e.Data, &d) != nil {
			return nil, false
		}
		switch {
		case d.StopReason == events.StopRejected && !s.Exists():
			return Reject{TurnID: e.TurnID, SessionID: e.SessionID, Reason: d.Error}, true
		case d.StopReason == events.StopAborted:
			return Command{Action: events.ActionAbort, Reason: d.Error}, true
		case d.StopReason == events.StopTimeout:
			return Tick{TurnID: e.TurnID, Kind: events.TimerTurn, At: e.Time}, true
		case d.StopReason == events.StopError && s.Exists() && (s.Checked == nil || s.Checked.StopReason != events.StopError):
			// Not the machine's own finish of a failed model call: the
			// runtime could not store what the turn did.
			return Fail{TurnID: e.TurnID, Reason: d.Error}, true
		}
	}
	return nil, false
}
