package events

import (
	"encoding/json"
	"strconv"
	"time"
)

// The event types of a workflow's log (docs/protocol.md, "Workflows — the outer
// loop"). A workflow's log is on jetloop.events.<session_id>.<workflow_id>,
// in the same envelope as a turn's: turn_id holds the workflow id and step
// the task number.
const (
	WorkflowStarted      Type = "workflow.started"
	TaskStarted          Type = "task.started"
	TaskFinished         Type = "task.finished"
	WorkflowCheckpointed Type = "workflow.checkpointed"
	WorkflowGated        Type = "workflow.gated"
	WorkflowResumed      Type = "workflow.resumed"
	WorkflowFinished     Type = "workflow.finished"
)

// WorkflowTypes lists every workflow event type.
var WorkflowTypes = []Type{WorkflowStarted, TaskStarted, TaskFinished, WorkflowCheckpointed,
	WorkflowGated, WorkflowResumed, WorkflowFinished}

// The workflow stop reasons that a turn does not have; completed, timeout,
// budget, aborted, error and rejected are shared with turns.
const (
	StopMaxTasks   StopReason = "max_tasks"
	StopTokens     StopReason = "tokens"
	StopTaskFailed StopReason = "task_failed"
	StopDenied     StopReason = "denied"
)

// WorkflowStopReasons lists every workflow stop reason, a closed set.
var WorkflowStopReasons = []StopReason{StopCompleted, StopMaxTasks, StopTimeout, StopBudget, StopTokens,
	StopTaskFailed, StopDenied, StopAborted, StopError, StopRejected}

// Workflow limits: the default and the hard ceiling of max_tasks, and the
// longest workflow id (a task's turn id is <workflow_id>-<i>, i ≤ 1000).
const (
	DefaultMaxTasks = 50
	MaxTasksCeiling = 1000
	MaxWorkflowID   = 56
)

// SubjectWorkflow is where workflows are submitted.
const SubjectWorkflow = "jetloop.inbox.workflow"

// TaskSubject is where a workflow hears that one of its tasks' turns finished.
func TaskSubject(workflow string) string { return "jetloop.inbox.task." + workflow }

// WorkflowSubmit is a workflow request, published on jetloop.inbox.workflow
// with Nats-Msg-Id <workflow_id>.
type WorkflowSubmit struct {
	WorkflowID string            `json:"workflow_id"`
	SessionID  string            `json:"session_id,omitempty"`
	Agent      string            `json:"agent,omitempty"`
	Tasks      []Task            `json:"tasks"`
	Limits     *WorkflowLimits   `json:"limits,omitempty"`
	Policy     *Policy           `json:"policy,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// Task is one task of a workflow: what its turn is submitted with. Input is
// a text or a list of messages.
type Task struct {
	Input  json.RawMessage `json:"input"`
	Agent  string          `json:"agent,omitempty"`
	Model  string          `json:"model,omitempty"`
	Script json.RawMessage `json:"script,omitempty"`
	Limits *Limits         `json:"limits,omitempty"`
}

// Messages is the task's input as messages: a text is one user message.
func (t Task) Messages() ([]Message, error) {
	var text string
	if err := json.Unmarshal(t.Input, &text); err == nil {
		return []Message{{Role: RoleUser, Content: text}}, nil
	}
	var msgs []Message
	if err := json.Unmarshal(t.Input, &msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

// WorkflowLimits bound a whole workflow. Zero means no bound, except
// MaxTasks, which defaults to DefaultMaxTasks.
type WorkflowLimits struct {
	MaxTasks  int   `json:"max_tasks,omitempty"`
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	Budget    int   `json:"budget,omitempty"`
	Tokens    int   `json:"tokens,omitempty"`
}

// Policy is what the gate does between tasks. Hooks are asked in order
// after every task's checkpoint (gate rule 4); HookTimeoutMs bounds each
// one's answer (DefaultHookTimeoutMs when 0) and OnHookTimeout says what a
// silent hook does (stop with error unless HookTimeoutContinue).
type Policy struct {
	ApproveBetween bool          `json:"approve_between"`
	OnTaskFailure  FailurePolicy `json:"on_task_failure,omitempty"`
	KeepTasks      int           `json:"keep_tasks"`
	Hooks          []string      `json:"hooks,omitempty"`
	HookTimeoutMs  int64         `json:"hook_timeout_ms,omitempty"`
	OnHookTimeout  string        `json:"on_hook_timeout,omitempty"`
}

// What a hook that does not answer in time does to its workflow.
const (
	HookTimeoutStop     = "stop"
	HookTimeoutContinue = "continue"
)

// DefaultHookTimeoutMs is how long a workflow waits for a hook's answer
// unless policy.hook_timeout_ms says otherwise.
const DefaultHookTimeoutMs = 30_000

// HookSubject is the jobs subject of a hook: jetloop.jobs.hook.<name>.
func HookSubject(hook string) string { return "jetloop.jobs.hook." + hook }

// HookConsumer is the durable consumer every worker of a hook shares.
func HookConsumer(hook string) string { return "hook_" + hook }

// HookAnswerSubject is the subject of a workflow's hook answers that names
// no hook; no worker deployment is granted it.
func HookAnswerSubject(workflow string) string { return "jetloop.inbox.hook." + workflow }

// HookAnswerSubjectOf is where hook answers about workflow:
// jetloop.inbox.hook@<hook>.<workflow_id>, bound to the hook as a tool's
// results are (ToolResultSubject).
func HookAnswerSubjectOf(hook, workflow string) string {
	return "jetloop.inbox.hook" + answerMark + hook + "." + workflow
}

// HookKey is a hook's key in KV JETLOOP_TOOLS: hook.<name>.
func HookKey(hook string) string { return "hook." + hook }

// HookJobID and HookAnswerID are the Nats-Msg-Ids of the job asking hook
// about task and of its answer: one of each per hook and task.
func HookJobID(workflow string, task int, hook string) string {
	return "hook:" + workflow + ":" + strconv.Itoa(task) + ":" + hook
}

// HookAnswerID: see HookJobID.
func HookAnswerID(workflow string, task int, hook string) string {
	return "hook-answer:" + workflow + ":" + strconv.Itoa(task) + ":" + hook
}

// HookFinalJobID is the Nats-Msg-Id of the job that hands hook a
// workflow's last checkpoint after the workflow ended before it decided:
// not HookJobID, which a job asked before the end may hold already.
func HookFinalJobID(workflow string, task int, hook string) string {
	return "hook-final:" + workflow + ":" + strconv.Itoa(task) + ":" + hook
}

// HookJob asks a hook about a workflow after one of its tasks, on
// jetloop.jobs.hook.<name>: the task's checkpoint (what KV
// JETLOOP_CHECKPOINTS holds) and result; Last is set after the last task
// of the list. Deadline is when the workflow stops waiting for the answer.
// Ended is set on a final job: the workflow ended at this checkpoint
// before this hook decided, so the job only hands it the checkpoint and
// its answer changes nothing.
type HookJob struct {
	WorkflowID string                   `json:"workflow_id"`
	SessionID  string                   `json:"session_id"`
	Task       int                      `json:"task"`
	TurnID     string                   `json:"turn_id"`
	Last       bool                     `json:"last"`
	Checkpoint WorkflowCheckpointedData `json:"checkpoint"`
	TaskResult HookTaskResult           `json:"task_result"`
	Deadline   time.Time                `json:"deadline"`
	Ended      *HookEnded               `json:"ended,omitempty"`
}

// HookTaskResult is the task's result in a HookJob, as task.finished has
// it: Metrics are the task's own (its turn's steps, calls, tokens and
// duration), where the checkpoint's sum the workflow's tasks so far.
type HookTaskResult struct {
	StopReason StopReason `json:"stop_reason"`
	Output     string     `json:"output"`
	Error      string     `json:"error,omitempty"`
	Metrics    Metrics    `json:"metrics"`
}

// HookEnded is how a workflow ended, in a final HookJob: its
// workflow.finished's stop reason and error.
type HookEnded struct {
	StopReason StopReason `json:"stop_reason"`
	Error      string     `json:"error,omitempty"`
}

// HookAnswer is a hook's decision, on jetloop.inbox.hook@<hook>.<workflow_id>
// with Nats-Msg-Id hook-answer:<workflow_id>:<task>:<hook>.
type HookAnswer struct {
	WorkflowID string       `json:"workflow_id"`
	Task       int          `json:"task"`
	Hook       string       `json:"hook"`
	Decision   GateDecision `json:"decision"`
	Reason     string       `json:"reason"`
}

// FailurePolicy says what a task that did not complete does to its workflow.
type FailurePolicy string

// The failure policies; stop is the default.
const (
	FailureStop     FailurePolicy = "stop"
	FailureContinue FailurePolicy = "continue"
)

// WorkflowRef ties a turn to the workflow task it runs. In a submission it
// is accepted only from the workflow that started that task (the
// orchestrator checks the workflow's log); KeepTasks carries the workflow's
// policy to the history the turn is given.
type WorkflowRef struct {
	WorkflowID string `json:"workflow_id"`
	Task       int    `json:"task"`
	KeepTasks  int    `json:"keep_tasks,omitempty"`
}

// TaskDone tells a workflow that the turn of one of its tasks finished, on
// jetloop.inbox.task.<workflow_id> with Nats-Msg-Id task:<turn_id>.
type TaskDone struct {
	WorkflowID string           `json:"workflow_id"`
	Task       int              `json:"task"`
	TurnID     string           `json:"turn_id"`
	Finished   TurnFinishedData `json:"finished"`
}

// WorkflowStartedData is the data of workflow.started.
type WorkflowStartedData struct {
	Tasks    int               `json:"tasks"`
	Agent    string            `json:"agent,omitempty"`
	Limits   WorkflowLimits    `json:"limits"`
	Policy   Policy            `json:"policy"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// TaskList is the submission's tasks, kept in the log so the workflow
	// is resumed, replayed and verified without its submission.
	TaskList []Task `json:"task_list"`
}

// TaskStartedData is the data of task.started.
type TaskStartedData struct {
	Task   int    `json:"task"`
	TurnID string `json:"turn_id"`
	Agent  string `json:"agent,omitempty"`
}

// TaskFinishedData is the data of task.finished: the task's turn's end.
type TaskFinishedData struct {
	Task       int        `json:"task"`
	TurnID     string     `json:"turn_id"`
	StopReason StopReason `json:"stop_reason"`
	Output     string     `json:"output"`
	Error      string     `json:"error,omitempty"`
	Metrics    Metrics    `json:"metrics"`
}

// WorkflowMetrics sum the tasks of a workflow so far: OpenBotStack's
// LoopMetrics (tasks are its workflow steps, steps its turns). DurationMs is
// the wall clock since workflow.started when the event was written (the
// seed's TotalRuntime: approval waits and hooks included), BusyMs the sum of
// the tasks' own durations.
type WorkflowMetrics struct {
	Tasks        int   `json:"tasks"`
	Steps        int   `json:"steps"`
	ToolCalls    int   `json:"tool_calls"`
	ModelCalls   int   `json:"model_calls"`
	InputTokens  int   `json:"input_tokens"`
	OutputTokens int   `json:"output_tokens"`
	DurationMs   int64 `json:"duration_ms"`
	BusyMs       int64 `json:"busy_ms"`
}

// Add counts one more task's turn, with every turn its subagents started.
// DurationMs is the workflow's clock, not a sum: the machine sets it when
// it writes the metrics.
func (m *WorkflowMetrics) Add(t Metrics) {
	tree := t.Tree()
	m.Tasks++
	m.Steps += tree.Steps
	m.ToolCalls += tree.ToolCalls
	m.ModelCalls += tree.ModelCalls
	m.InputTokens += tree.InputTokens
	m.OutputTokens += tree.OutputTokens
	m.BusyMs += t.DurationMs
}

// WorkflowCheckpointedData is the data of workflow.checkpointed, and what
// KV JETLOOP_CHECKPOINTS holds under the workflow id.
type WorkflowCheckpointedData struct {
	Task    int             `json:"task"`
	Metrics WorkflowMetrics `json:"metrics"`
}

// GateDecision is what the gate decided between two tasks.
type GateDecision string

// The gate's decisions.
const (
	GateContinue GateDecision = "continue"
	GateStop     GateDecision = "stop"
	GateWait     GateDecision = "wait"
)

// GateError is a hook's answer that it failed: the gate records it as a
// stop by that hook and the workflow ends error with the hook's message,
// not denied, which is a policy's veto. It is never a workflow.gated
// decision.
const GateError GateDecision = "error"

// WorkflowGatedData is the data of workflow.gated. By is who decided: the
// gate's own rules (GateByRules), a person's approve_between (GateByApproval)
// or a hook of policy.hooks by its name.
type WorkflowGatedData struct {
	Task     int          `json:"task"`
	Decision GateDecision `json:"decision"`
	Reason   string       `json:"reason"`
	By       string       `json:"by,omitempty"`
}

// Who decides at a gate besides the hooks; no hook may take these names.
const (
	GateByRules    = "rules"
	GateByApproval = "approval"
)

// WorkflowResumedData is the data of workflow.resumed.
type WorkflowResumedData struct {
	Approved bool   `json:"approved"`
	Note     string `json:"note,omitempty"`
}

// TaskOutcome is one task's line in workflow.finished.
type TaskOutcome struct {
	Task       int        `json:"task"`
	TurnID     string     `json:"turn_id"`
	StopReason StopReason `json:"stop_reason"`
}

// WorkflowFinishedData is the data of workflow.finished, its last event.
type WorkflowFinishedData struct {
	StopReason StopReason      `json:"stop_reason"`
	Output     string          `json:"output"`
	Error      string          `json:"error,omitempty"`
	Metrics    WorkflowMetrics `json:"metrics"`
	Tasks      []TaskOutcome   `json:"tasks"`
}
