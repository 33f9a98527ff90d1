package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
)

// timeline is replay --html: it writes the page, then checks the log like a
// replay does. A log that does not fold gets no page and exits 1, as replay
// does; so does one that breaks the invariants, after its page is written.
func (c *command) timeline(path string, log []events.Envelope, children map[string][]events.Envelope) int {
	tl, err := timeline.BuildWithChildren(log, children)
	if err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: the log does not fold: %v\n", err)
		return ExitStopped
	}
	if err := timeline.WriteFile(path, tl, log); err != nil {
		return c.fail("%v", err)
	}
	problems := []error{events.CheckLog(log)}
	for id := range tl.Children() {
		if err := events.CheckLog(children[id]); err != nil {
			problems = append(problems, fmt.Errorf("subagent turn %s: %w", id, err))
		}
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: wrote %s, but the log breaks the invariants: %v\n", path, err)
		return ExitStopped
	}
	msg := fmt.Sprintf("wrote %s: %d events, %d steps", path, len(log), len(tl.Steps))
	if n := len(tl.Children()); n > 0 {
		msg += fmt.Sprintf(", %d subagent turns", n)
	}
	fmt.Fprintln(c.stdout, msg)
	return ExitOK
}

// workflowTimeline is replay --html of a workflow: it reads the tasks'
// turns (from the server, or from the same file when the log comes from
// one: exports of the workflow and of its turns, concatenated), writes the
// page, then checks every log like a replay does. A workflow's log that
// does not fold gets no page and exits 1; so does one whose logs break the
// invariants or do not fold, after its page is written.
func (c *command) workflowTimeline(ctx context.Context, path string, log []events.Envelope, turns map[string][]events.Envelope, fromServer bool) int {
	if fromServer {
		var ids []string
		for _, e := range log {
			if e.Type == events.TaskStarted {
				var d events.TaskStartedData
				_ = json.Unmarshal(e.Data, &d)
				ids = append(ids, d.TurnID)
			}
		}
		// A task just started may have no log yet: its band says so.
		var err error
		if turns, err = c.readLogs(ctx, ids...); err != nil {
			return c.fail("%v", err)
		}
	}
	wt, err := timeline.BuildWorkflow(log, turns)
	if err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: the log does not fold: %v\n", err)
		return ExitStopped
	}
	if err := timeline.WriteWorkflowFile(path, wt, timeline.WorkflowLogs{Workflow: log, Turns: turns}); err != nil {
		return c.fail("%v", err)
	}
	var problems []error
	if err := events.CheckLog(log); err != nil {
		problems = append(problems, fmt.Errorf("the workflow's log: %w", err))
	}
	for _, t := range wt.Tasks {
		if t.Turn == nil {
			if _, ok := turns[t.TurnID]; ok {
				problems = append(problems, fmt.Errorf("task %d: %s", t.Task, t.Missing))
			}
			continue
		}
		if err := events.CheckLog(turns[t.TurnID]); err != nil {
			problems = append(problems, fmt.Errorf("task %d (turn %s): %w", t.Task, t.TurnID, err))
		}
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: wrote %s, but the logs break the invariants: %v\n", path, err)
		return ExitStopped
	}
	fmt.Fprintf(c.stdout, "wrote %s: %d events, %d tasks, %d steps\n", path, len(log), len(wt.Tasks), wt.Steps())
	return ExitOK
}

// splitWorkflowFile separates a file of concatenated exports into the
// workflow's log (the events of the first event's id) and the other logs,
// by turn id.
func splitWorkflowFile(all []events.Envelope) (log []events.Envelope, turns map[string][]events.Envelope) {
	turns = map[string][]events.Envelope{}
	for _, e := range all {
		if e.TurnID == all[0].TurnID {
			log = append(log, e)
		} else {
			turns[e.TurnID] = append(turns[e.TurnID], e)
		}
	}
	return log, turns
}
