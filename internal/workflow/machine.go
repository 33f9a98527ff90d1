package workflow

import (
	"github.com/jetloop/jetloop/internal/machine"
	lfsm "github.com/looplab/fsm"
)

// Phase is where a workflow stands between two events.
type Phase string

// The phases of a workflow, as docs/protocol.md names them.
const (
	PhaseInit        Phase = "init"
	PhaseTaskSelect  Phase = "task_select"
	PhaseTaskExecute Phase = "task_execute"
	PhaseCheckpoint  Phase = "checkpoint"
	PhaseGate        Phase = "gate"
	PhaseNextTask    Phase = "next_task"
	PhasePaused      Phase = "paused"
	PhaseDone        Phase = "done"
)

func (p Phase) String() string { return string(p) }

// Transitions, named after what happens.
const (
	tStart      = "start"      // workflow.started
	tRun        = "run"        // task.started
	tTaskDone   = "task_done"  // task.finished
	tCheckpoint = "checkpoint" // workflow.checkpointed
	tPass       = "pass"       // workflow.gated: continue
	tHold       = "hold"       // workflow.gated: stop (the finish follows)
	tWait       = "wait"       // workflow.gated: wait for a person
	tHook       = "hook"       // workflow.gated: a hook answered continue
	tResume     = "resume"     // workflow.resumed
	tReturn     = "return"     // workflow.resumed after a hook's wait: the gate goes on
	tFinish     = "finish"     // workflow.finished
)

var live = []string{string(PhaseInit), string(PhaseTaskSelect), string(PhaseTaskExecute), string(PhaseCheckpoint),
	string(PhaseGate), string(PhaseNextTask), string(PhasePaused)}

// table is the workflow machine's transition table.
var table = lfsm.Events{
	{Name: tStart, Src: []string{string(PhaseInit)}, Dst: string(PhaseTaskSelect)},
	{Name: tRun, Src: []string{string(PhaseTaskSelect), string(PhaseNextTask)}, Dst: string(PhaseTaskExecute)},
	{Name: tTaskDone, Src: []string{string(PhaseTaskExecute)}, Dst: string(PhaseCheckpoint)},
	{Name: tCheckpoint, Src: []string{string(PhaseCheckpoint)}, Dst: string(PhaseGate)},
	{Name: tPass, Src: []string{string(PhaseGate)}, Dst: string(PhaseNextTask)},
	{Name: tHold, Src: []string{string(PhaseGate)}, Dst: string(PhaseGate)},
	{Name: tWait, Src: []string{string(PhaseGate)}, Dst: string(PhasePaused)},
	{Name: tHook, Src: []string{string(PhaseGate)}, Dst: string(PhaseGate)},
	{Name: tResume, Src: []string{string(PhasePaused)}, Dst: string(PhaseNextTask)},
	{Name: tReturn, Src: []string{string(PhasePaused)}, Dst: string(PhaseGate)},
	{Name: tFinish, Src: live, Dst: string(PhaseDone)},
}

// index is the table indexed once, as internal/fsm's is; a test proves it
// agrees with looplab/fsm's machine.
var index = machine.NewTable[Phase]("workflow", table)

// TransitionError is an event the machine cannot take in its phase: a
// corrupt or foreign log.
type TransitionError = machine.TransitionError[Phase]

func (s *State) step(name, ev string) error {
	return index.Step(&s.Phase, name, ev, s.Seq+1)
}

// Diagram renders the transition table as a Mermaid state diagram.
func Diagram() (string, error) { return index.Diagram(PhaseInit) }
