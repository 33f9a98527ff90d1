package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkflowResult is how a workflow ended, as OpenBotStack's WorkflowResult
// has it: workflow.finished's StopReason with its detail in Error (the
// seed's StopCondition; empty only for StopCompleted), Output (the last
// task's), Metrics (DurationMs the wall clock, the seed's TotalRuntime;
// BusyMs the tasks' own time) and Tasks (each task's outcome), and
// TaskResults: each finished task's Output, Error, StopReason and Metrics,
// in order, from its task.finished (the seed's TaskResults). A task the
// workflow stopped under it is in Tasks (as aborted) but has no TaskResult.
type WorkflowResult struct {
	WorkflowFinishedData
	TaskResults []TaskFinishedData
}

// The event types of a workflow's log.
const (
	TypeWorkflowStarted      = events.WorkflowStarted
	TypeTaskStarted          = events.TaskStarted
	TypeTaskFinished         = events.TaskFinished
	TypeWorkflowCheckpointed = events.WorkflowCheckpointed
	TypeWorkflowGated        = events.WorkflowGated
	TypeWorkflowResumed      = events.WorkflowResumed
	TypeWorkflowFinished     = events.WorkflowFinished
)

// The stop reasons only a workflow has; it also ends with StopCompleted,
// StopTimeout, StopBudget, StopAborted, StopError and StopRejected.
const (
	StopMaxTasks   = events.StopMaxTasks   // its max_tasks ran
	StopTokens     = events.StopTokens     // its token budget was spent
	StopTaskFailed = events.StopTaskFailed // a task failed under on_task_failure: stop
	StopDenied     = events.StopDenied     // an approval between tasks was denied
)

// The data of each workflow event type, as the log holds it.

// WorkflowStartedData is workflow.started's: the number of Tasks, Agent,
// Limits, Policy, Metadata and the TaskList itself.
type WorkflowStartedData = events.WorkflowStartedData

// TaskStartedData is task.started's: Task (from 1), the TurnID that runs it
// and its Agent.
type TaskStartedData = events.TaskStartedData

// TaskFinishedData is task.finished's: Task, TurnID, and its turn's
// StopReason, Output, Error and Metrics.
type TaskFinishedData = events.TaskFinishedData

// WorkflowCheckpointedData is workflow.checkpointed's, and what the
// JETLOOP_CHECKPOINTS bucket holds: the Task just done and the Metrics
// summed so far.
type WorkflowCheckpointedData = events.WorkflowCheckpointedData

// WorkflowGatedData is workflow.gated's: after Task, the gate's Decision
// (continue, stop or wait for approval) and its Reason.
type WorkflowGatedData = events.WorkflowGatedData

// WorkflowResumedData is workflow.resumed's: Approved and Note.
type WorkflowResumedData = events.WorkflowResumedData

// WorkflowFinishedData is workflow.finished's: StopReason, Output, Error,
// Metrics and every task's outcome.
type WorkflowFinishedData = events.WorkflowFinishedData

// WorkflowMetrics sum a workflow's tasks: Tasks, Steps, ToolCalls,
// ModelCalls, InputTokens, OutputTokens and BusyMs (the tasks' own
// durations); DurationMs is the wall clock since the workflow started.
type WorkflowMetrics = events.WorkflowMetrics

// WorkflowStarted opens a workflow's log.
type WorkflowStarted struct {
	EventInfo
	WorkflowStartedData
}

// TaskStarted says a task's turn was submitted; Watch its TurnID to follow
// its steps.
type TaskStarted struct {
	EventInfo
	TaskStartedData
	// TurnID is the task's turn, TaskStartedData's; it hides EventInfo's,
	// which is the workflow's id (Info().TurnID).
	TurnID string
}

// TaskFinished says a task's turn finished.
type TaskFinished struct {
	EventInfo
	TaskFinishedData
	// TurnID is the task's turn, as in TaskStarted.
	TurnID string
}

// WorkflowCheckpointed is the checkpoint after a task.
type WorkflowCheckpointed struct {
	EventInfo
	WorkflowCheckpointedData
}

// WorkflowGated is the gate's decision before the next task; a Decision of
// wait pauses the workflow until ApproveWorkflow.
type WorkflowGated struct {
	EventInfo
	WorkflowGatedData
}

// WorkflowResumed says a paused workflow got its approval (or denial).
type WorkflowResumed struct {
	EventInfo
	WorkflowResumedData
}

// WorkflowFinished is a workflow's last event.
type WorkflowFinished struct {
	EventInfo
	WorkflowFinishedData
}

// Succeeded reports whether every task ran: the workflow stopped with
// StopCompleted.
func (f WorkflowFinished) Succeeded() bool { return f.StopReason == StopCompleted }

// RunWorkflow submits a workflow and returns its id (a new UUIDv7 when
// WorkflowID is empty). The orchestrator checks it again: a rejection is
// reported by WaitWorkflow.
func (c *Client) RunWorkflow(ctx context.Context, w Workflow) (string, error) {
	if w.WorkflowID == "" {
		w.WorkflowID = NewID()
	}
	data, err := json.Marshal(w.submit())
	if err != nil {
		return "", fmt.Errorf("client: run workflow: %w", err)
	}
	if err := schemas.Validate("workflow_submit", data); err != nil {
		return "", fmt.Errorf("client: run workflow: %w", err)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	if _, err := c.js.Publish(ctx, events.SubjectWorkflow, data, jetstream.WithMsgID(w.WorkflowID)); err != nil {
		return "", fmt.Errorf("client: run workflow %s: %w", w.WorkflowID, err)
	}
	return w.WorkflowID, nil
}

// WatchWorkflow yields a workflow's own events from its first one (or, with
// FromNow, from the next one), as they are written, and ends after
// WorkflowFinished: WorkflowStarted, then per task TaskStarted and
// TaskFinished, WorkflowCheckpointed and WorkflowGated (with
// WorkflowResumed after an approval), and WorkflowFinished. A task's own
// steps are in its turn's log: Watch(ctx, e.TurnID) of a TaskStarted e
// follows them. A workflow not submitted yet is waited for; a failure is
// yielded once with a nil event and ends the sequence, as does ctx ending.
func (c *Client) WatchWorkflow(ctx context.Context, workflowID string, opts ...WatchOption) iter.Seq2[Event, error] {
	from := watchOptions(opts).from
	return func(yield func(Event, error) bool) {
		if !events.ValidID(workflowID) {
			yield(nil, fmt.Errorf("client: invalid workflow id %q", workflowID))
			return
		}
		for ev, err := range c.follow(ctx, workflowID, from) {
			if err == nil && (ev.Info().Type == TypeTurnStarted || ev.Info().Type == TypeTurnFinished) {
				err = fmt.Errorf("client: %s is a turn, not a workflow", workflowID)
			}
			if !yield(ev, err) || err != nil {
				return
			}
			if ev.Info().Type == TypeWorkflowFinished {
				return
			}
		}
	}
}

// WaitWorkflow returns how a workflow ended, waiting for it until ctx ends.
// A rejected workflow is a *RejectedError with the orchestrator's reason.
func (c *Client) WaitWorkflow(ctx context.Context, workflowID string) (WorkflowResult, error) {
	if !events.ValidID(workflowID) {
		return WorkflowResult{}, fmt.Errorf("client: invalid workflow id %q", workflowID)
	}
	// The last event first: a finished workflow is one read.
	for ev, err := range c.follow(ctx, workflowID, turnlog.FromLast) {
		if err != nil {
			return WorkflowResult{}, err
		}
		switch e := ev.(type) {
		case TurnStarted, TurnFinished:
			return WorkflowResult{}, fmt.Errorf("client: %s is a turn, not a workflow", workflowID)
		case WorkflowFinished:
			res := WorkflowResult{WorkflowFinishedData: e.WorkflowFinishedData}
			if e.StopReason == StopRejected {
				return res, &RejectedError{TurnID: workflowID, Reason: e.Error}
			}
			// Each task's output and error are in its task.finished: one
			// read of the whole log, once the workflow has ended.
			log, err := c.Events(ctx, workflowID)
			if err != nil {
				return res, err
			}
			for _, ev := range log {
				if tf, ok := ev.(TaskFinished); ok {
					res.TaskResults = append(res.TaskResults, tf.TaskFinishedData)
				}
			}
			return res, nil
		}
	}
	return WorkflowResult{}, fmt.Errorf("client: wait %s: %w", workflowID, ctx.Err())
}

// ApproveWorkflow answers a workflow that waits between tasks (policy
// approve_between): approved runs the next task, otherwise the workflow
// stops with stop reason denied. A workflow that waits for no approval is
// ErrNotWaiting; one that has finished, ErrTurnFinished.
func (c *Client) ApproveWorkflow(ctx context.Context, workflowID string, approved bool, note string) error {
	return c.workflowControl(ctx, workflowID, events.Control{Action: events.ActionApprove, Approved: &approved, Note: note})
}

// AbortWorkflow stops a workflow and the turn of its running task; a
// workflow that has finished is ErrTurnFinished.
func (c *Client) AbortWorkflow(ctx context.Context, workflowID, reason string) error {
	return c.workflowControl(ctx, workflowID, events.Control{Action: events.ActionAbort, Reason: reason})
}

// workflowControl checks that a control message can move the workflow as
// it is now, then publishes it; the orchestrator judges it again when it
// arrives.
func (c *Client) workflowControl(ctx context.Context, id string, ctl events.Control) error {
	if !events.ValidID(id) {
		return fmt.Errorf("client: invalid workflow id %q", id)
	}
	data, err := json.Marshal(ctl)
	if err != nil {
		return fmt.Errorf("client: %s workflow: %w", ctl.Action, err)
	}
	if err := schemas.Validate("control", data); err != nil {
		return fmt.Errorf("client: %s workflow: %w", ctl.Action, err)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	if err := c.workflowApplies(ctx, id, ctl); err != nil {
		return err
	}
	if _, err := c.js.Publish(ctx, events.ControlSubject(id), data, jetstream.WithMsgID(events.ControlID(id, NewID()))); err != nil {
		return fmt.Errorf("client: %s workflow %s: %w", ctl.Action, id, err)
	}
	return nil
}

// workflowApplies says at once when a control message cannot move the
// workflow (no such workflow, finished, no approval awaited), rather than
// let the orchestrator ignore it.
func (c *Client) workflowApplies(ctx context.Context, id string, ctl events.Control) error {
	store, err := c.events(ctx)
	if err != nil {
		return err
	}
	st, _, err := store.LoadWorkflow(ctx, id)
	switch {
	case errors.Is(err, logstore.ErrIsTurn):
		return fmt.Errorf("client: %s is a turn, not a workflow", id)
	case err != nil:
		return fmt.Errorf("client: %w", err)
	case !st.Exists():
		return &turnError{fmt.Sprintf("no workflow %q", id), ErrTurnNotFound}
	case st.Done():
		return &turnError{fmt.Sprintf("workflow %s has finished (%s): nothing to %s", id, st.Finished.StopReason, ctl.Action), ErrTurnFinished}
	case ctl.Action == events.ActionApprove && st.Phase != workflow.PhasePaused:
		return &turnError{fmt.Sprintf("workflow %s waits for no approval (it is at %s)", id, st.Phase), ErrNotWaiting}
	}
	return nil
}
