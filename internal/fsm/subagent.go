package fsm

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/internal/events"
)

// MaxDepth is how deep subagents nest: a turn that is no subagent's has
// depth 0, its children 1, and a turn of depth MaxDepth starts none.
const MaxDepth = 3

// SubagentWorker is the worker of a subagent call's result: agent:<Name>.
const SubagentWorker = "agent:"

// FromSubagent reports whether a result's worker names a subagent: the
// result is then an orchestrator's notice that the call's child turn
// ended, and the answer is the child's log's, not the result's.
func FromSubagent(worker string) bool { return strings.HasPrefix(worker, SubagentWorker) }

// SubagentParameters is the argument schema of every subagent tool.
var SubagentParameters = json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","minLength":1,"description":"The task for the agent: everything it needs to know, since it sees nothing else of this conversation."}},"required":["task"],"additionalProperties":false}`)

// ChildTurnID is the id of the turn a subagent call runs: "sub-" and the
// first 26 characters of the lower-case, unpadded base32 of the SHA-256 of
// "<parent_turn_id>:<call_id>". Whoever knows the call knows the child, and
// a crash that makes the call's submission again names the same child.
func ChildTurnID(parent, callID string) string {
	sum := sha256.Sum256([]byte(parent + ":" + callID))
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
	return "sub-" + strings.ToLower(enc[:26])
}

// ChildPrefix starts every subagent's turn id; only the orchestrator may
// submit a turn of such an id.
const ChildPrefix = "sub-"

// ChildAnswer is the end of a subagent call's child turn, as the parent
// records it: the orchestrator reads it from the child's log (never from the
// message that announced it), so no worker can forge a child's result.
type ChildAnswer struct {
	TurnID      string
	CallID      string
	ChildTurnID string
	// Finished is the child's turn.finished as its log has it; without it
	// (a replay) Output and IsError are the result as recorded.
	Finished   *events.TurnFinishedData
	Output     string
	IsError    bool
	DurationMs int64
	Metrics    *events.TreeMetrics
}

func (ChildAnswer) input() {}

// ChildResult is what a child's turn.finished gives its parent's call: the
// output of a turn that answered, an error result the model can read for one
// that failed, was refused or was stopped.
func ChildResult(agent, child string, fin events.TurnFinishedData) (output string, isError bool) {
	switch fin.StopReason {
	case events.StopCompleted, events.StopSynthesisDone, events.StopStepCap, events.StopBudget, events.StopDoomLoop:
		return fin.Output, false
	case events.StopRejected:
		return fmt.Sprintf("error: subagent %s did not run: its turn %s was rejected: %s", agent, child, fin.Error), true
	}
	out := fmt.Sprintf("error: subagent %s (turn %s) ended %s", agent, child, fin.StopReason)
	if fin.Error != "" {
		out += ": " + fin.Error
	}
	return out, true
}

// Depth is the turn's subagent depth: 0 for a turn no call started.
func (s *State) Depth() int {
	if s.Parent == nil {
		return 0
	}
	return s.Parent.Depth
}

// Root is the turn at the top of the turn's chain of subagent calls: the
// turn itself when no call started it. Its id is the chain's trace id.
func (s *State) Root() string {
	switch {
	case s.Parent == nil:
		return s.TurnID
	case s.Parent.RootTurnID != "":
		return s.Parent.RootTurnID
	}
	return s.Parent.TurnID
}

// Delegated reports whether a subagent's turn should be running the call
// now: a call of an agent tool, ungated or approved, without a result.
func (c *Call) Delegated() bool {
	if c.Status != CallRequested || c.Child == "" {
		return false
	}
	return c.Gate == GateNone || (c.Gate == GateApproval && c.Resumed && c.Approved)
}

// Children lists the child turns of the step's subagent calls that have no
// result: those an end of this turn must abort.
func (s *State) Children() []string {
	var out []string
	for i := range s.Calls {
		if c := &s.Calls[i]; c.Delegated() {
			out = append(out, c.Child)
		}
	}
	if through := s.CompactionDue(); through > 0 {
		out = append(out, CompactChildID(s.TurnID, through))
	}
	if s.endedCompacting != "" {
		out = append(out, s.endedCompacting)
	}
	return out
}

// ChildSubmit is the submission that starts a subagent call's child turn. It
// depends on the parent's log alone, so every publish of it is the same
// message, and the orchestrator can check a submission against it.
func (s *State) ChildSubmit(c *Call, agent string, shared bool) events.Submit {
	var a struct {
		Task string `json:"task"`
	}
	_ = json.Unmarshal(c.Arguments, &a) // refuse() has checked the arguments
	sub := events.Submit{TurnID: c.Child, SessionID: c.Child, Agent: agent,
		Input:  []events.Message{{Role: events.RoleUser, Content: a.Task}},
		Parent: &events.ParentRef{TurnID: s.TurnID, CallID: c.CallID, Depth: s.Depth() + 1}}
	if s.Parent != nil {
		sub.Parent.RootTurnID = s.Root()
	}
	if shared {
		sub.SessionID = s.SessionID
	}
	if dl := s.Deadline(); !dl.IsZero() {
		// The child may not outlive its parent: it gets what was left of
		// the parent's wall clock when the call was made.
		sub.Limits = &events.Limits{TimeoutMs: max(dl.Sub(c.Requested).Milliseconds(), 1)}
	}
	if budget, ok := s.reserve(c); ok {
		if sub.Limits == nil {
			sub.Limits = &events.Limits{}
		}
		if budget > 0 {
			sub.Limits.Budget = budget
		} else {
			// Nothing left for tools: the child may only answer.
			zero := 0
			sub.Limits.Steps = &zero
		}
	}
	return sub
}

// reserve is the tool budget of a subagent call's child turn: the smaller
// of its agent's and what the parent's tree has left once the step's own
// calls and, in call order, the step's earlier children have theirs. A
// turn and everything below it so never complete more tool calls than its
// budget; what a child leaves unused comes back with its result
// (ChildMetrics). false: the call's tool names no budget, as in a log
// written before children reserved one.
func (s *State) reserve(c *Call) (int, bool) {
	left := s.Limits.Budget - s.stepSpent - len(s.planned)
	for i := range s.Calls {
		o := &s.Calls[i]
		if o.Child == "" {
			continue
		}
		spec, _ := s.spec(o.Name)
		budget := spec.Budget
		if budget <= 0 {
			if o.CallID == c.CallID {
				return 0, false
			}
			budget = DefaultBudget
		}
		r := min(budget, max(left, 0))
		if o.CallID == c.CallID {
			return r, true
		}
		left -= r
	}
	return 0, false
}

// Call returns the step's call of the given id, or nil.
func (s *State) Call(id string) *Call { return s.call(id) }
