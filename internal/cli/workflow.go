package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/client/workflowfile"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

const workflowUsage = `usage: jetloop workflow run [--watch] [--id ID] FILE.yaml
       jetloop workflow watch|show ID
       jetloop workflow abort [--reason TEXT] ID
       jetloop workflow approve|deny [--note TEXT] ID`

// workflowCmd runs, follows and steers workflows.
func workflowCmd(ctx context.Context, c *command, args []string) int {
	follow := c.flags.Bool("watch", false, "run: print the workflow's trace, each task's turn nested, until it finishes")
	id := c.flags.String("id", "", "run: the workflow id (default: the file's workflow_id, else a new UUIDv7)")
	reason := c.flags.String("reason", "aborted from the command line", "abort: why the workflow stops")
	note := c.flags.String("note", "", "approve, deny: why; recorded in workflow.resumed")
	// Flags may come before the subcommand, after it, or after its
	// argument: `workflow run FILE.yaml --watch` reads naturally.
	if !c.parse(args) {
		return c.exit
	}
	rest := c.flags.Args()
	if len(rest) != 2 {
		return c.usageErr("%s", workflowUsage)
	}
	sub, arg := rest[0], rest[1]
	if sub == "run" {
		return workflowRun(ctx, c, arg, *id, *follow)
	}
	if !events.ValidID(arg) {
		return c.usageErr("invalid workflow id %q", arg)
	}
	switch sub {
	case "watch", "show":
		nc, _, err := c.connect()
		if err != nil {
			return c.fail("%v", err)
		}
		defer nc.Close()
		cl, err := c.sdk(nc)
		if err != nil {
			return c.fail("%v", err)
		}
		if sub == "show" {
			return c.showWorkflow(ctx, cl, arg)
		}
		return c.followWorkflow(ctx, cl, arg)
	case "abort":
		return c.workflowControl(ctx, arg, events.Control{Action: events.ActionAbort, Reason: *reason})
	case "approve", "deny":
		ok := sub == "approve"
		return c.workflowControl(ctx, arg, events.Control{Action: events.ActionApprove, Approved: &ok, Note: *note})
	}
	return c.usageErr("unknown workflow command %q\n%s", sub, workflowUsage)
}

func workflowRun(ctx context.Context, c *command, path, id string, follow bool) int {
	w, err := workflowfile.Read(path)
	if err != nil {
		return c.fail("%v", err)
	}
	if id != "" {
		if !events.ValidID(id) {
			return c.fail("--id: invalid workflow id %q", id)
		}
		w.WorkflowID = id
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cl, err := c.sdk(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if w.Policy != nil && len(w.Policy.Hooks) > 0 {
		c.warnUnservedHooks(pctx, js, w.Policy.Hooks)
	}
	if _, err := cl.RunWorkflow(pctx, w); err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintln(c.stdout, w.WorkflowID)
	if !follow {
		return ExitOK
	}
	return c.followWorkflow(ctx, cl, w.WorkflowID)
}

// followWorkflow prints a workflow's events as they come, each task's turn
// traced live and indented under its task, until the workflow finishes.
func (c *command) followWorkflow(ctx context.Context, cl *client.Client, id string) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for e, err := range cl.FollowLog(ctx, id) {
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx)
			}
			return c.fail("%v", err)
		}
		if !e.Type.Workflow() {
			return c.fail("%s is a turn, not a workflow: use jetloop watch", id)
		}
		fmt.Fprintf(c.stdout, "%s  %s\n", e.Type, timeline.WorkflowDetail(e))
		switch e.Type {
		case events.TaskStarted:
			var d events.TaskStartedData
			_ = json.Unmarshal(e.Data, &d)
			if _, err := Watch(ctx, cl, d.TurnID, timeline.NewTrace(timeline.Indented(c.stdout), c.color())); err != nil {
				if ctx.Err() != nil {
					return interrupted(ctx)
				}
				return c.fail("%v", err)
			}
		case events.WorkflowFinished:
			var d events.WorkflowFinishedData
			_ = json.Unmarshal(e.Data, &d)
			if d.StopReason != events.StopCompleted {
				return ExitStopped
			}
			return ExitOK
		}
	}
	return interrupted(ctx)
}

func (c *command) showWorkflow(ctx context.Context, cl *client.Client, id string) int {
	st, err := loadWorkflow(ctx, cl, id)
	if err != nil {
		return c.fail("%v", err)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	status := string(st.Phase)
	if st.Finished != nil {
		status = "finished: " + string(st.Finished.StopReason)
	}
	fmt.Fprintf(w, "workflow\t%s\nsession\t%s\nstatus\t%s\ntasks\t%d of %d\nstarted\t%s\n", st.ID, st.SessionID, status,
		len(st.Outcomes), len(st.Tasks), st.Started.Format(time.RFC3339))
	m := st.Metrics
	fmt.Fprintf(w, "metrics\t%d steps, %d tool calls, %d model calls, %d+%d tokens, %d ms\n", m.Steps, m.ToolCalls, m.ModelCalls, m.InputTokens, m.OutputTokens, m.DurationMs)
	for _, o := range st.Outcomes {
		fmt.Fprintf(w, "  task %d\t%s\t%s\n", o.Task, o.TurnID, o.StopReason)
	}
	if st.Running {
		fmt.Fprintf(w, "  task %d\t%s\trunning\n", st.Task, workflow.TurnID(st.ID, st.Task))
	}
	if st.Phase == workflow.PhasePaused {
		fmt.Fprintf(w, "waiting\tfor jetloop workflow approve|deny %s\n", st.ID)
	}
	_ = w.Flush()
	return ExitOK
}

func loadWorkflow(ctx context.Context, cl *client.Client, id string) (*workflow.State, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	log, err := cl.Log(ctx, id)
	switch {
	case errors.Is(err, client.ErrTurnNotFound):
		return nil, fmt.Errorf("no workflow %q", id)
	case err != nil:
		return nil, err
	case !log[0].Type.Workflow():
		return nil, fmt.Errorf("%s is a turn, not a workflow", id)
	}
	st, err := workflow.Fold(log)
	if err != nil {
		return nil, fmt.Errorf("fold workflow %s: %w", id, err)
	}
	if !st.Exists() {
		return nil, fmt.Errorf("no workflow %q", id)
	}
	return st, nil
}

// workflowControl sends a control message to a workflow; the client
// refuses what the workflow cannot take now.
func (c *command) workflowControl(ctx context.Context, id string, ctl events.Control) int {
	nc, _, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cl, err := c.sdk(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	if ctl.Action == events.ActionAbort {
		err = cl.AbortWorkflow(ctx, id, ctl.Reason)
	} else {
		err = cl.ApproveWorkflow(ctx, id, *ctl.Approved, ctl.Note)
	}
	if err != nil {
		return c.fail("%v", err)
	}
	return ExitOK
}

// warnUnservedHooks says which of a workflow's hooks no live worker
// advertises now: the gate would only find out at the hook's timeout. It
// is a warning, as a worker may yet start; what cannot be read is left
// unsaid.
func (c *command) warnUnservedHooks(ctx context.Context, js jetstream.JetStream, hooks []string) {
	w, err := readWorkers(ctx, js)
	if err != nil {
		return
	}
	for _, h := range hooks {
		if !slices.ContainsFunc(w.Served, func(s Served) bool { return s.Kind == "hook" && s.Name == h && s.Workers > 0 }) {
			fmt.Fprintf(c.stderr, "jetloop workflow: warning: no live worker serves the hook %q now: the gate waits for it until the hook's timeout (jetloop workers lists what is served)\n", h)
		}
	}
}

// WorkflowSummary is one workflow as jetloop workflows --json prints it.
type WorkflowSummary = client.WorkflowSummary

// workflowsCmd lists workflows, newest first.
func workflowsCmd(ctx context.Context, c *command, args []string) int {
	asJSON := c.flags.Bool("json", false, "print one JSON object per workflow")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 0 {
		return c.usageErr("workflows takes no arguments")
	}
	nc, _, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cl, err := c.sdk(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	rows, err := cl.Workflows(ctx)
	if err != nil {
		return c.fail("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return c.fail("%v", err)
			}
		}
		return ExitOK
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "WORKFLOW\tSTATUS\tTASK\tSTARTED")
	for _, r := range rows {
		status := "running (" + string(r.Last) + ")"
		switch r.Status {
		case client.StatusFinished:
			status = "finished: " + string(r.StopReason)
		case client.StatusPaused:
			status = "paused: waits for approval"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s ago\n", r.WorkflowID, status, r.Task, age(time.Since(r.Started)))
	}
	_ = w.Flush()
	return ExitOK
}
