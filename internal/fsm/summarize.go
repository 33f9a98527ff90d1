package fsm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jetloop/jetloop/internal/events"
)

// Summarizing compaction (docs/agents.md, Compaction): an agent's
// compaction may name an agent and a threshold, {agent, over_tokens}. When
// a step is checked to continue and its model call's input passed the
// threshold, the turn does not start its next step yet: it runs a child
// turn of that agent (a subagent with no call, id CompactChildID) whose
// task is the transcript of the steps before the last keep_steps, records
// the child's output as turn.compacted, and from then on every model call
// sends that summary in place of those steps. The summary is in the log, so
// replay and verify call no model; a step (a model answer, its calls and
// their results) is summarized or kept whole.

// CompactCallPrefix starts the call id that a compaction child's parent
// reference names: compact-<through_step>. Call ids never hold ':', so no
// model's call can be taken for one (the child's id hashes
// <turn_id>:compact:<step>, which no call's does).
const CompactCallPrefix = "compact-"

// CompactCallID is the call id a compaction child's parent reference names.
func CompactCallID(through int) string { return CompactCallPrefix + strconv.Itoa(through) }

// CompactThrough reads the step of a CompactCallID; ok is false for any
// other call id.
func CompactThrough(callID string) (int, bool) {
	rest, ok := strings.CutPrefix(callID, CompactCallPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// CompactChildID is the id of the child turn that summarizes a turn's steps
// through a step: ChildTurnID of "<turn_id>:compact:<step>".
func CompactChildID(turn string, through int) string {
	return ChildTurnID(turn, "compact:"+strconv.Itoa(through))
}

// CompactionDue returns the step through which the turn must be summarized
// before its next step starts, or 0: the turn is between steps, its agent
// compacts by an agent, its last model call's input passed the threshold,
// and there are steps before the last keep_steps that no summary covers. A
// turn at the deepest subagent depth cannot start a child, and one whose
// compaction failed does not try again.
func (s *State) CompactionDue() int {
	if s.Summarizer == "" || s.CompactFailed || s.Phase != PhaseStepStart || s.Step == 0 ||
		s.Depth() >= MaxDepth || s.LastInput <= s.OverTokens {
		return 0
	}
	through := s.Step - max(s.KeepSteps, 1)
	if through < 1 || (s.Summary != nil && through <= s.Summary.ThroughStep) || len(s.StepAt) < through+1 {
		return 0
	}
	return through
}

// CompactAnswer is the end of a compaction's child turn, read from its log;
// without Finished (a replay) Summary and Error are as recorded.
type CompactAnswer struct {
	TurnID      string
	ThroughStep int
	ChildTurnID string
	Finished    *events.TurnFinishedData
	Summary     string
	Error       string
}

func (CompactAnswer) input() {}

// compacted records a compaction's child's end.
func (d *decider) compacted(in CompactAnswer) {
	s := d.s
	if s.CompactionDue() != in.ThroughStep || in.ChildTurnID != CompactChildID(s.TurnID, in.ThroughStep) {
		return // late or duplicate
	}
	data := events.TurnCompactedData{ThroughStep: in.ThroughStep, ChildTurnID: in.ChildTurnID, Summary: in.Summary, Error: in.Error}
	if f := in.Finished; f != nil {
		data.Summary, data.Error = "", ""
		switch {
		case (f.StopReason == events.StopCompleted || f.StopReason == events.StopSynthesisDone) && strings.TrimSpace(f.Output) != "":
			data.Summary = f.Output
		default:
			data.Error, _ = ChildResult(s.Summarizer, in.ChildTurnID, *f)
			if data.Error == "" || !strings.HasPrefix(data.Error, "error:") {
				data.Error = fmt.Sprintf("error: compaction agent %s (turn %s) ended %s without a summary", s.Summarizer, in.ChildTurnID, f.StopReason)
			}
		}
	}
	d.emit(events.TurnCompacted, data)
}

// CompactSubmit is the submission of the child turn that summarizes the
// turn's steps through a step. It depends on the parent's log alone.
func (s *State) CompactSubmit(through int) events.Submit {
	child := CompactChildID(s.TurnID, through)
	sub := events.Submit{TurnID: child, SessionID: child, Agent: s.Summarizer,
		Input:  []events.Message{{Role: events.RoleUser, Content: s.transcript(through)}},
		Parent: &events.ParentRef{TurnID: s.TurnID, CallID: CompactCallID(through), Depth: s.Depth() + 1}}
	if s.Parent != nil {
		sub.Parent.RootTurnID = s.Root()
	}
	// A text-only turn: a summary needs no tools, and so the tree's
	// budget is never spent on one.
	zero := 0
	sub.Limits = &events.Limits{Steps: &zero}
	if dl := s.Deadline(); !dl.IsZero() {
		sub.Limits.TimeoutMs = max(dl.Sub(s.LastTime).Milliseconds(), 1)
	}
	return sub
}

// Transcript sizes: a compaction's task is one message of the inbox, which
// holds at most the server's max payload (1 MiB by default).
const (
	transcriptMessage = 8 << 10
	transcriptTotal   = 256 << 10
)

// SummarizeInstruction opens a compaction's task.
const SummarizeInstruction = "Summarize the conversation below for the assistant that is working on it: " +
	"what the task is, what has been done and found (files, facts, results), what was decided, and what remains. " +
	"The summary replaces these messages in its context, so keep every detail it needs to go on. Answer with the summary only."

// transcript is the task of a compaction's child: the instruction, the
// turn's input, the summary so far, and the steps after it through through,
// each message cut to a size, the oldest left out past a total.
func (s *State) transcript(through int) string {
	var parts []string
	clip := func(t string) string {
		if len(t) > transcriptMessage {
			return t[:transcriptMessage] + "…"
		}
		return t
	}
	from := 0
	if s.Summary != nil {
		from = s.Summary.ThroughStep
		parts = append(parts, fmt.Sprintf("[summary of steps 1-%d]\n%s", s.Summary.ThroughStep, clip(s.Summary.Summary)))
	}
	for i := s.StepAt[from]; i < s.StepAt[through]; i++ {
		m := s.Messages[i]
		switch m.Role {
		case events.RoleAssistant:
			line := "assistant: " + clip(m.Content)
			for _, c := range m.ToolCalls {
				line += fmt.Sprintf("\n  call %s %s", c.Name, clip(string(c.Arguments)))
			}
			parts = append(parts, line)
		case events.RoleTool:
			what := "result"
			if m.IsError {
				what = "error"
			}
			parts = append(parts, fmt.Sprintf("%s of %s: %s", what, m.Name, clip(m.Content)))
		default:
			parts = append(parts, string(m.Role)+": "+clip(m.Content))
		}
	}
	total := 0
	keep := len(parts)
	for keep > 0 && total+len(parts[keep-1]) <= transcriptTotal {
		total += len(parts[keep-1])
		keep--
	}
	body := strings.Join(parts[keep:], "\n\n")
	if keep > 0 {
		body = fmt.Sprintf("[%d older entries left out]\n\n", keep) + body
	}
	var input []string
	for _, m := range s.Messages[:s.StepAt[0]] {
		input = append(input, clip(m.Content))
	}
	return SummarizeInstruction + "\n\nThe task:\n" + strings.Join(input, "\n") +
		fmt.Sprintf("\n\nSteps 1-%d:\n\n", through) + body
}

// SummaryNote stands in a model call where a summary replaced steps.
const SummaryNote = "[Steps 1-%d of this turn were summarized:]\n%s"

// summarized is the turn's conversation with its summary in place of the
// steps it covers: history, the turn's input, the summary, the later steps.
func (s *State) summarized(msgs []events.Message) ([]events.Message, int) {
	sum := s.Summary
	turn := len(s.History)
	first, after := turn+s.StepAt[0], turn+s.StepAt[sum.ThroughStep]
	out := make([]events.Message, 0, len(msgs)-(after-first)+1)
	out = append(out, msgs[:first]...)
	out = append(out, events.Message{Role: events.RoleUser, Content: fmt.Sprintf(SummaryNote, sum.ThroughStep, sum.Summary)})
	return append(out, msgs[after:]...), after - first
}
