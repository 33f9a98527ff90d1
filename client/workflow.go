package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// Workflow is a workflow request: tasks run one after another, each as a
// turn <WorkflowID>-<i> in one session (CONTRACT.md, "Workflows"). Its
// fields are WorkflowID, SessionID, Agent, Tasks, Limits, Policy and
// Metadata.
type Workflow = events.WorkflowSubmit

// Task is one task of a Workflow: Input (a JSON text or list of messages),
// Agent, Model, Script and Limits.
type Task = events.Task

// WorkflowResult is how a workflow ended: StopReason, Output (the last
// task's), Error, Metrics summed over its tasks, and each task's outcome.
type WorkflowResult = events.WorkflowFinishedData

// RunWorkflow submits a workflow and returns its id (a new UUIDv7 when
// WorkflowID is empty). The orchestrator checks it again: a rejection is
// reported by WaitWorkflow.
func (c *Client) RunWorkflow(ctx context.Context, w Workflow) (string, error) {
	if w.WorkflowID == "" {
		w.WorkflowID = NewID()
	}
	data, err := json.Marshal(w)
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

// WaitWorkflow returns how a workflow ended, waiting for it until ctx ends.
// A rejected workflow is a *RejectedError with the orchestrator's reason.
func (c *Client) WaitWorkflow(ctx context.Context, workflowID string) (WorkflowResult, error) {
	if !events.ValidID(workflowID) {
		return WorkflowResult{}, fmt.Errorf("client: invalid workflow id %q", workflowID)
	}
	for e, err := range turnlog.Follow(ctx, c.js, workflowID, turnlog.FromLast) {
		if err != nil {
			return WorkflowResult{}, fmt.Errorf("client: %w", err)
		}
		if e.Type == events.TurnStarted || e.Type == events.TurnFinished {
			return WorkflowResult{}, fmt.Errorf("client: %s is a turn, not a workflow", workflowID)
		}
		if e.Type != events.WorkflowFinished {
			continue
		}
		var r WorkflowResult
		if err := json.Unmarshal(e.Data, &r); err != nil {
			return WorkflowResult{}, fmt.Errorf("client: workflow %s: %w", workflowID, err)
		}
		if r.StopReason == StopRejected {
			return r, &RejectedError{TurnID: workflowID, Reason: r.Error}
		}
		return r, nil
	}
	return WorkflowResult{}, fmt.Errorf("client: wait %s: %w", workflowID, ctx.Err())
}

// ApproveWorkflow answers a workflow that waits between tasks (policy
// approve_between): approved runs the next task, otherwise the workflow
// stops with stop reason denied.
func (c *Client) ApproveWorkflow(ctx context.Context, workflowID string, approved bool, note string) error {
	return c.workflowControl(ctx, workflowID, events.Control{Action: events.ActionApprove, Approved: &approved, Note: note})
}

// AbortWorkflow stops a workflow and the turn of its running task.
func (c *Client) AbortWorkflow(ctx context.Context, workflowID, reason string) error {
	return c.workflowControl(ctx, workflowID, events.Control{Action: events.ActionAbort, Reason: reason})
}

func (c *Client) workflowControl(ctx context.Context, id string, ctl events.Control) error {
	if !events.ValidID(id) {
		return fmt.Errorf("client: invalid workflow id %q", id)
	}
	data, err := json.Marshal(ctl)
	if err != nil {
		return err
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	if _, err := c.js.Publish(ctx, events.ControlSubject(id), data, jetstream.WithMsgID("control:"+id+":"+NewID())); err != nil {
		return fmt.Errorf("client: %s workflow %s: %w", ctl.Action, id, err)
	}
	return nil
}
