package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workflowSubmit starts a workflow, or records why it cannot start: the
// submission becomes a dead letter and, when its id is valid and new, the
// workflow's log gets one workflow.finished (rejected), as a turn's does.
func (s *shard) workflowSubmit(ctx context.Context, log *slog.Logger, data []byte) error {
	var sub events.WorkflowSubmit
	verr := schemas.Validate("workflow_submit", data)
	if verr == nil {
		verr = json.Unmarshal(data, &sub)
	}
	if verr != nil {
		var id struct {
			WorkflowID string `json:"workflow_id"`
			SessionID  string `json:"session_id"`
		}
		_ = json.Unmarshal(data, &id)
		return s.rejectWorkflow(ctx, log, id.WorkflowID, id.SessionID, verr.Error())
	}
	log = log.With("workflow", sub.WorkflowID)
	if sub.SessionID == "" {
		sub.SessionID = sub.WorkflowID
	}
	limits := workflow.EffectiveLimits(sub.Limits)
	if limits.TimeoutMs <= 0 {
		limits.TimeoutMs = s.starter.workflowClock.Milliseconds()
	}
	for i, t := range sub.Tasks {
		agent := t.Agent
		if agent == "" {
			agent = sub.Agent
		}
		if _, err := s.starter.agent(agent); err != nil {
			var d *deadLetter
			if errors.As(err, &d) {
				return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, fmt.Sprintf("task %d: %s", i+1, d.reason))
			}
			return err
		}
	}
	start := workflow.Start{WorkflowID: sub.WorkflowID, SessionID: sub.SessionID, Agent: sub.Agent, Tasks: sub.Tasks,
		Limits: limits, Policy: workflow.EffectivePolicy(sub.Policy), Metadata: sub.Metadata, Digest: digest(data)}
	reason, settle, err := s.admit.refuse(ctx, sub.WorkflowID)
	if err != nil {
		return err
	}
	if reason != "" {
		return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, reason)
	}
	defer settle() // its index entry is written by index.put, below
	if err := s.eff.index.put(ctx, sub.WorkflowID); err != nil {
		if unstorable(err) {
			return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, "cannot start the workflow: "+err.Error())
		}
		return &retry{err: err}
	}
	err = s.applyWorkflow(ctx, log, sub.WorkflowID, start)
	if d := (*deadLetter)(nil); errors.As(err, &d) {
		return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, d.reason)
	}
	if errors.Is(err, workflow.ErrExists) {
		// The very submission that started it, sent again, changes nothing,
		// but repairs what a handling that died may have left undone: the
		// first task's turn, a checkpoint's gate.
		if st, _, lerr := s.store.LoadWorkflow(ctx, sub.WorkflowID); lerr == nil && sameWorkflow(st, &sub) {
			return s.applyWorkflow(ctx, log, sub.WorkflowID, workflow.Gate{})
		}
		return &deadLetter{fmt.Sprintf("workflow %q already exists", sub.WorkflowID)}
	}
	return err
}

func (s *shard) rejectWorkflow(ctx context.Context, log *slog.Logger, id, session, reason string) error {
	if !events.ValidID(id) || len(id) > events.MaxWorkflowID {
		return &deadLetter{reason}
	}
	if session == "" || !events.ValidID(session) {
		session = id
	}
	err := s.applyWorkflow(ctx, log, id, workflow.Reject{WorkflowID: id, SessionID: session, Reason: reason})
	if err != nil && !errors.Is(err, workflow.ErrExists) {
		var d *deadLetter
		if !errors.As(err, &d) {
			return err
		}
	}
	return &deadLetter{reason}
}

// isWorkflow tells whether id names a workflow's log rather than a turn's.
func (s *shard) isWorkflow(ctx context.Context, id string) (bool, error) {
	if s.flows.Contains(id) {
		return true, nil
	}
	if s.cache.Contains(id) {
		return false, nil
	}
	last, _, ok, err := s.store.Last(ctx, id)
	if err != nil {
		return false, &retry{err: err}
	}
	return ok && last.Type.Workflow(), nil
}

// flows is the workflow machine (internal/workflow) as the runtime loop
// runs it: append, checkpoint to KV, gate, publish the task's turn, arm
// the deadline.
type flows struct{ s *shard }

// applyWorkflow takes an input of a workflow through the runtime loop.
func (s *shard) applyWorkflow(ctx context.Context, log *slog.Logger, id string, in workflow.Input) error {
	return advance(ctx, s, flows{s}, log, id, in, false, false)
}

func (flows) noun() string { return "workflow" }

func (f flows) cache() *locked[*entry[*workflow.State]] { return f.s.flows }

func (f flows) fold(ctx context.Context, id string) (*entry[*workflow.State], error) {
	st, seq, err := f.s.store.LoadWorkflow(ctx, id)
	if errors.Is(err, logstore.ErrIsTurn) {
		return nil, &deadLetter{fmt.Sprintf("%q is a turn, not a workflow", id)}
	}
	if err != nil {
		return nil, &retry{err: err}
	}
	return &entry[*workflow.State]{state: st, seq: seq}, nil
}

func (flows) decide(st *workflow.State, in workflow.Input) (decision[*workflow.State], error) {
	d, err := workflow.Decide(st, in, env())
	return decision[*workflow.State]{state: d.State, events: d.Events}, err
}

func (flows) judge(err error) judgement {
	var ie *workflow.InputError
	switch {
	case err == nil:
		return taken
	case errors.Is(err, workflow.ErrFinished):
		return finished
	case errors.Is(err, workflow.ErrExists):
		return passed
	case errors.Is(err, workflow.ErrUnknownWorkflow):
		return unknownLog
	case errors.As(err, &ie):
		return refused
	}
	return broken
}

func (flows) exists(st *workflow.State) bool { return st.Exists() }

// again sends the abort of a task's turn again: the input may be the one
// whose first handling died before sending it.
func (f flows) again(ctx context.Context, _ *slog.Logger, st *workflow.State) error {
	return f.s.eff.publishFlowJobs(ctx, st, false)
}

// prepare sends the hooks' final jobs before workflow.finished is stored:
// once it is, nothing would send them again. A cached state may be stale;
// a job must not announce an end that another process's append is about to
// refute.
func (f flows) prepare(ctx context.Context, _ *slog.Logger, st *step[*workflow.State, workflow.Input], current func() (bool, error)) error {
	final := workflow.FinalJobs(st.next.state)
	if len(final) == 0 || !st.fresh() {
		return nil
	}
	switch ok, err := current(); {
	case err != nil:
		return &retry{err: err}
	case !ok:
		return bus.ErrConflict
	}
	if err := f.s.eff.publishFlowJobList(ctx, final); err != nil {
		return &retry{err: err}
	}
	return nil
}

// publish publishes the workflow's jobs on every input, not only a new
// decision's: whether an input repeats one whose handling died cannot be
// told after a restart reset the inbox consumer, and a job's id makes a
// second publish nothing. A hook is asked only once the checkpoint is in
// KV too: by the Gate that follows it (follow), whatever the input.
func (f flows) publish(ctx context.Context, _ *slog.Logger, st *step[*workflow.State, workflow.Input]) error {
	if err := f.s.eff.publishFlowJobs(ctx, st.next.state, gating(st.in)); err != nil {
		return &retry{err: err}
	}
	return nil
}

func gating(in workflow.Input) bool {
	_, ok := in.(workflow.Gate)
	return ok
}

func (f flows) settle(ctx context.Context, log *slog.Logger, st *step[*workflow.State, workflow.Input]) (*entry[*workflow.State], error) {
	eff, state := f.s.eff, st.next.state
	eff.timers.arm(state.ID, workflow.Timers(state))
	if !state.Done() {
		return &entry[*workflow.State]{state: state, seq: st.seq, checkpoint: st.prev.checkpoint}, nil
	}
	if st.fresh() && st.prev.state.Exists() {
		eff.index.done(ctx, st.id)
	}
	if st.fresh() {
		f.s.obs.metrics.WorkflowFinished(string(state.Finished.StopReason))
		log.Info("workflow finished", "stop_reason", state.Finished.StopReason, "tasks", len(state.Finished.Tasks))
	}
	return nil, nil
}

// follow writes the checkpoint's second half, then gates: in that order,
// and again after a crash, since the state still awaits it. A gate that
// waits for a hook stays there until its answer.
func (f flows) follow(ctx context.Context, st *step[*workflow.State, workflow.Input], kept *entry[*workflow.State]) (workflow.Input, bool, error) {
	if !st.next.state.AwaitsGate() || gating(st.in) {
		return nil, false, nil
	}
	rev, err := f.s.eff.putCheckpoint(ctx, st.next.state, st.prev.checkpoint)
	if err != nil {
		return nil, false, &retry{err: err}
	}
	if kept != nil {
		kept.checkpoint = rev
	}
	return workflow.Gate{}, true, nil
}

func (flows) fail(_ string, in workflow.Input, reason string) (workflow.Input, bool) {
	if _, failing := in.(workflow.Fail); failing {
		return nil, false
	}
	return workflow.Fail{Reason: reason}, true
}

func (flows) unstorable(err error, started bool) string {
	if !started {
		// A start too big to store (its task list is in workflow.started)
		// is a rejected submission.
		return "cannot store the workflow: " + err.Error()
	}
	return "cannot store what the workflow did: " + err.Error()
}

// publishFlowJobs publishes what a workflow's state waits on: its task's
// turn (Nats-Msg-Id task-start:<turn id>), the abort of a task it stopped,
// or, when hooks is set, the job of the hook its gate waits for
// (hook:<workflow_id>:<task>:<name>): each id makes a second publish
// nothing, whatever crashed between.
func (ef *effects) publishFlowJobs(ctx context.Context, st *workflow.State, hooks bool) error {
	jobs := workflow.Jobs(st)
	if !hooks {
		jobs = slices.DeleteFunc(jobs, func(j workflow.Job) bool { return j.Hook != nil })
	}
	return ef.publishFlowJobList(ctx, jobs)
}

// publishFlowJobList publishes a workflow's jobs under their ids.
func (ef *effects) publishFlowJobList(ctx context.Context, jobs []workflow.Job) error {
	for _, j := range jobs {
		var v any = j.Submit
		switch {
		case j.Abort != nil:
			v = j.Abort
		case j.Hook != nil:
			v = j.Hook
		}
		data, err := events.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := ef.js.Publish(ctx, j.Subject, data, jetstream.WithMsgID(j.ID)); err != nil {
			return fmt.Errorf("orchestrator: publish %s: %w", j.Subject, err)
		}
	}
	return nil
}

// putCheckpoint writes the workflow's last checkpoint to KV
// JETLOOP_CHECKPOINTS, unless the bucket already holds it or a later one,
// and returns the key's revision. Every write expects the revision it
// read, so a checkpoint never replaces a later one written meanwhile (by
// another process deciding on a stale state). rev is the revision this
// shard wrote last, when it knows it: then one round trip, not a read and
// a write, unless someone wrote since.
func (ef *effects) putCheckpoint(ctx context.Context, st *workflow.State, rev uint64) (uint64, error) {
	cp := st.Checkpoint
	data, err := events.Marshal(cp)
	if err != nil {
		return 0, err
	}
	for range 5 {
		if rev > 0 {
			n, err := ef.checkpoints.Update(ctx, st.ID, data, rev)
			if err == nil {
				return n, nil
			}
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				return 0, fmt.Errorf("orchestrator: checkpoint %s: %w", st.ID, err)
			}
		}
		e, err := ef.checkpoints.Get(ctx, st.ID)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			n, err := ef.checkpoints.Create(ctx, st.ID, data)
			if err == nil {
				return n, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, fmt.Errorf("orchestrator: checkpoint %s: %w", st.ID, err)
			}
			rev = 0
			continue
		case err != nil:
			return 0, fmt.Errorf("orchestrator: checkpoint %s: %w", st.ID, err)
		}
		var have events.WorkflowCheckpointedData
		if json.Unmarshal(e.Value(), &have) == nil && have.Task >= cp.Task {
			return e.Revision(), nil
		}
		rev = e.Revision()
	}
	return 0, fmt.Errorf("orchestrator: checkpoint %s: the key kept changing", st.ID)
}

// startedTask accepts a submission that claims to run a workflow's task only
// when that workflow's log shows it started that task with this turn id: no
// client can make its own turn report to someone's workflow.
func (sr *starter) startedTask(ctx context.Context, sub *events.Submit) error {
	w := sub.Workflow
	last, _, ok, err := sr.store.Last(ctx, w.WorkflowID)
	if err != nil {
		return &retry{err: err}
	}
	if ok && last.Type == events.TaskStarted {
		var d events.TaskStartedData
		if json.Unmarshal(last.Data, &d) == nil && d.Task == w.Task && d.TurnID == sub.TurnID &&
			sub.TurnID == workflow.TurnID(w.WorkflowID, w.Task) && last.SessionID == sub.SessionID {
			return nil
		}
	}
	return &deadLetter{fmt.Sprintf("turn %q is not a task that workflow %q started", sub.TurnID, w.WorkflowID)}
}

// notifyTask tells a workflow that its task's turn finished. Its id makes a
// second notice of the same turn one.
func (ef *effects) notifyTask(ctx context.Context, w *events.WorkflowRef, turn string, fin events.TurnFinishedData) error {
	data, err := events.Marshal(events.TaskDone{WorkflowID: w.WorkflowID, Task: w.Task, TurnID: turn, Finished: fin})
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: events.TaskSubject(w.WorkflowID), Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, events.TaskDoneID(turn))
	if _, err := ef.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("orchestrator: tell workflow %s: %w", w.WorkflowID, err)
	}
	return nil
}

func sameWorkflow(st *workflow.State, sub *events.WorkflowSubmit) bool {
	if st.Started.IsZero() || st.SessionID != sub.SessionID || st.Agent != sub.Agent {
		return false
	}
	a, err1 := json.Marshal(st.Tasks)
	b, err2 := json.Marshal(sub.Tasks)
	return err1 == nil && err2 == nil && string(a) == string(b)
}

// workflowInput decodes a control message or timer sent to a workflow.
func (s *shard) workflowInput(ctx context.Context, log *slog.Logger, msg jetstream.Msg, kind events.Input, id string) error {
	log = log.With("workflow", id)
	if kind == events.InputControl {
		var c events.Control
		if err := decode("control", msg.Data(), &c); err != nil {
			return err
		}
		return s.applyWorkflow(ctx, log, id, workflow.Command(c))
	}
	var t events.Timer
	if err := decode("timer", msg.Data(), &t); err != nil {
		return err
	}
	return s.applyWorkflow(ctx, log, id, workflow.Tick(t))
}
