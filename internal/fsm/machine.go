package fsm

import (
	"github.com/jetloop/jetloop/internal/machine"
	lfsm "github.com/looplab/fsm"
)

// Phase is where a turn stands between two events.
type Phase string

// The phases of a turn, as in DESIGN.md's diagram.
const (
	PhaseNew         Phase = "new"
	PhaseStepStart   Phase = "step_start"
	PhaseStream      Phase = "stream"
	PhaseToolPhase   Phase = "tool_phase"
	PhasePaused      Phase = "paused"
	PhaseCheckStop   Phase = "check_stop"
	PhaseSummarizing Phase = "summarizing"
	PhaseDone        Phase = "done"
)

func (p Phase) String() string { return string(p) }

// Transitions are named after what happens; one event type can take several
// transitions depending on its data and the state (a model answer with calls
// to run leads to tool_phase, one without to check_stop).
const (
	tStart     = "start"     // turn.started
	tBegin     = "begin"     // step.started
	tCall      = "call"      // model.completed with calls to run
	tAnswer    = "answer"    // model.completed with nothing to run
	tRequest   = "request"   // tool.requested
	tPause     = "pause"     // turn.paused
	tResume    = "resume"    // turn.resumed
	tComplete  = "complete"  // tool.completed, more calls outstanding
	tSettle    = "settle"    // tool.completed, the step's last call
	tContinue  = "continue"  // step.checked: continue
	tStop      = "stop"      // step.checked: stop without a sentinel
	tSummarize = "summarize" // step.checked: stop with a sentinel
	tSentinel  = "sentinel"  // turn.sentinel
	tCompact   = "compact"   // turn.compacted, before a step starts
	tFinish    = "finish"    // turn.finished
)

var live = []string{string(PhaseNew), string(PhaseStepStart), string(PhaseStream), string(PhaseToolPhase),
	string(PhasePaused), string(PhaseCheckStop), string(PhaseSummarizing)}

// table is the turn machine's transition table.
var table = lfsm.Events{
	{Name: tStart, Src: []string{string(PhaseNew)}, Dst: string(PhaseStepStart)},
	{Name: tBegin, Src: []string{string(PhaseStepStart)}, Dst: string(PhaseStream)},
	{Name: tCompact, Src: []string{string(PhaseStepStart)}, Dst: string(PhaseStepStart)},
	{Name: tCall, Src: []string{string(PhaseStream)}, Dst: string(PhaseToolPhase)},
	{Name: tAnswer, Src: []string{string(PhaseStream)}, Dst: string(PhaseCheckStop)},
	{Name: tRequest, Src: []string{string(PhaseToolPhase)}, Dst: string(PhaseToolPhase)},
	{Name: tPause, Src: []string{string(PhaseToolPhase)}, Dst: string(PhasePaused)},
	{Name: tResume, Src: []string{string(PhasePaused)}, Dst: string(PhaseToolPhase)},
	{Name: tComplete, Src: []string{string(PhaseToolPhase)}, Dst: string(PhaseToolPhase)},
	{Name: tComplete, Src: []string{string(PhasePaused)}, Dst: string(PhasePaused)},
	{Name: tSettle, Src: []string{string(PhaseToolPhase)}, Dst: string(PhaseCheckStop)},
	{Name: tContinue, Src: []string{string(PhaseCheckStop)}, Dst: string(PhaseStepStart)},
	{Name: tStop, Src: []string{string(PhaseCheckStop)}, Dst: string(PhaseCheckStop)},
	{Name: tSummarize, Src: []string{string(PhaseCheckStop)}, Dst: string(PhaseSummarizing)},
	{Name: tSentinel, Src: []string{string(PhaseSummarizing)}, Dst: string(PhaseSummarizing)},
	{Name: tFinish, Src: live, Dst: string(PhaseDone)},
}

// index is the table indexed once (see machine.Table).
var index = machine.NewTable[Phase]("fsm", table)

func newMachine(p Phase) *lfsm.FSM { return index.Looplab(p) }

// TransitionError is an event that the machine cannot take in its phase: a
// corrupt or foreign log.
type TransitionError = machine.TransitionError[Phase]

// step moves the machine along one transition of the table, or refuses it.
func (s *State) step(name string, ev string) error {
	return index.Step(&s.Phase, name, ev, s.Seq+1)
}

// Diagram renders the transition table as a Mermaid state diagram.
func Diagram() (string, error) { return index.Diagram(PhaseNew) }
