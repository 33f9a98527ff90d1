package fsm

import (
	"encoding/json"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// Setup is how a turn is set up when it starts: what Start asks for, what
// its turn.started records and what its State keeps, defined once here
// with the two functions that write it to the event and read it back.
type Setup struct {
	Agent  string
	Model  string
	System string
	Limits Limits
	// Tools are the tools offered: allowed by the agent and served when the
	// turn started, ask_user included where allowed.
	Tools      []events.ToolSpec
	Approval   []string
	FinalTools []string
	Script     json.RawMessage
	// Digest identifies the submission that started the turn.
	Digest     string
	Metadata   map[string]string
	ForkedFrom *events.ForkedFrom
	// Workflow is the workflow task the turn runs, if any: its end is
	// reported to the workflow.
	Workflow *events.WorkflowRef
	// Parent is the call of another turn that runs this one (a subagent's
	// turn): its end is that call's result.
	Parent *events.ParentRef
	// KeepSteps is the agent's compaction: each model call sends the first
	// user message and the last KeepSteps steps (see Compact); 0 sends the
	// whole conversation. With Summarizer, a child turn of that agent
	// summarizes the steps before the last KeepSteps once a model call's
	// input passes OverTokens (see CompactionDue).
	KeepSteps  int
	Summarizer string
	OverTokens int
	// ScriptIndex is where the scripted model starts answering: a fork that
	// keeps the original's script goes on from the fork's step.
	ScriptIndex int
	// HistoryTurns are the session's finished turns whose conversation is
	// the turn's history, oldest first.
	HistoryTurns []string
}

// started is the turn.started of a turn set up so, with its input and the
// length of its history.
func (c Setup) started(input []events.Message, history int) events.TurnStartedData {
	tools := c.Tools
	if c.Limits.Steps == 0 {
		tools = nil // a text-only turn offers no tools
	}
	steps := c.Limits.Steps
	var compaction *events.Compaction
	if c.KeepSteps > 0 {
		compaction = &events.Compaction{KeepSteps: c.KeepSteps}
		if c.Summarizer != "" && c.OverTokens > 0 {
			compaction.Agent, compaction.OverTokens = c.Summarizer, c.OverTokens
		}
	}
	return events.TurnStartedData{
		Agent: c.Agent, Model: c.Model, Input: input, History: history,
		Tools: names(tools),
		Limits: events.Limits{Steps: &steps, Budget: c.Limits.Budget,
			TimeoutMs: c.Limits.Timeout.Milliseconds(), DoomLoop: c.Limits.DoomLoop},
		Metadata: c.Metadata, ForkedFrom: c.ForkedFrom, Workflow: c.Workflow, HistoryTurns: c.HistoryTurns,
		Script: c.Script, System: c.System, Approval: c.Approval, FinalTools: c.FinalTools,
		ToolSpecs: tools, SubmitDigest: c.Digest, Compaction: compaction, ScriptIndex: c.ScriptIndex,
		Parent: c.Parent,
	}
}

// setupOf reads a turn's setup back from its turn.started: a log without a
// step cap has the machine's, and one without tool specs the names.
func setupOf(d events.TurnStartedData) Setup {
	c := Setup{Agent: d.Agent, Model: d.Model, System: d.System,
		Limits: Limits{Budget: d.Limits.Budget, Timeout: time.Duration(d.Limits.TimeoutMs) * time.Millisecond,
			DoomLoop: d.Limits.DoomLoop, Steps: MaxSteps},
		Tools: toolSpecs(d), Approval: d.Approval, FinalTools: d.FinalTools,
		Script: d.Script, Digest: d.SubmitDigest, Metadata: d.Metadata, ForkedFrom: d.ForkedFrom, Workflow: d.Workflow,
		Parent: d.Parent, KeepSteps: keepSteps(d.Compaction), ScriptIndex: d.ScriptIndex, HistoryTurns: d.HistoryTurns}
	if d.Limits.Steps != nil {
		c.Limits.Steps = *d.Limits.Steps
	}
	if d.Compaction != nil {
		c.Summarizer, c.OverTokens = d.Compaction.Agent, d.Compaction.OverTokens
	}
	return c
}
