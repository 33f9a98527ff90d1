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
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// flow is a workflow's state as this shard last saw it.
type flow struct {
	state *workflow.State
	seq   uint64
	gen   uint64 // as entry.gen
	// checkpoint is the revision of the workflow's key in
	// JETLOOP_CHECKPOINTS this shard wrote last, 0 when it wrote none.
	checkpoint uint64
}

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
		limits.TimeoutMs = s.o.workflowClock.Milliseconds()
	}
	for i, t := range sub.Tasks {
		agent := t.Agent
		if agent == "" {
			agent = sub.Agent
		}
		if _, err := s.o.agent(agent); err != nil {
			var d *deadLetter
			if errors.As(err, &d) {
				return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, fmt.Sprintf("task %d: %s", i+1, d.reason))
			}
			return err
		}
	}
	start := workflow.Start{WorkflowID: sub.WorkflowID, SessionID: sub.SessionID, Agent: sub.Agent, Tasks: sub.Tasks,
		Limits: limits, Policy: workflow.EffectivePolicy(sub.Policy), Metadata: sub.Metadata, Digest: digest(data)}
	reason, settle, err := s.refuse(ctx, sub.WorkflowID)
	if err != nil {
		return err
	}
	if reason != "" {
		return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, reason)
	}
	defer settle() // its index entry is written by markLive, below
	if err := s.o.markLive(ctx, sub.WorkflowID); err != nil {
		if unstorable(err) {
			return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, "cannot start the workflow: "+err.Error())
		}
		return &retry{err}
	}
	err = s.applyWorkflow(ctx, log, sub.WorkflowID, start)
	if d := (*deadLetter)(nil); errors.As(err, &d) {
		return s.rejectWorkflow(ctx, log, sub.WorkflowID, sub.SessionID, d.reason)
	}
	if errors.Is(err, workflow.ErrExists) {
		// The very submission that started it, sent again, changes nothing,
		// but repairs what a handling that died may have left undone: the
		// first task's turn, a checkpoint's gate.
		if st, _, lerr := s.o.store.LoadWorkflow(ctx, sub.WorkflowID); lerr == nil && sameWorkflow(st, &sub) {
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
	last, _, ok, err := s.o.store.Last(ctx, id)
	if err != nil {
		return false, &retry{err}
	}
	return ok && last.Type.Workflow(), nil
}

func (s *shard) loadFlow(ctx context.Context, id string) (*flow, error) {
	if f, ok := s.flows.Get(id); ok {
		if f.gen == s.o.gens[bus.Partition(id)].Load() {
			return f, nil
		}
		s.flows.Delete(id)
	}
	st, seq, err := s.o.store.LoadWorkflow(ctx, id)
	if errors.Is(err, logstore.ErrIsTurn) {
		return nil, &deadLetter{fmt.Sprintf("%q is a turn, not a workflow", id)}
	}
	if err != nil {
		return nil, &retry{err}
	}
	return &flow{state: st, seq: seq}, nil
}

// applyWorkflow decides an input of a workflow and performs the decision:
// append, checkpoint to KV, gate, publish the task's turn, arm the deadline.
func (s *shard) applyWorkflow(ctx context.Context, log *slog.Logger, id string, in workflow.Input) error {
	for range 8 {
		cached := s.flows.Contains(id)
		f, err := s.loadFlow(ctx, id)
		if err != nil {
			return err
		}
		d, err := workflow.Decide(f.state, in, workflowEnv())
		var ie *workflow.InputError
		switch {
		case errors.Is(err, workflow.ErrFinished):
			// The abort of a task's turn is sent again: this input may be
			// the one whose first handling died before sending it.
			return s.o.publishFlowJobs(ctx, f.state, false)
		case errors.Is(err, workflow.ErrExists):
			return err
		case cached && (errors.Is(err, workflow.ErrUnknownWorkflow) || errors.As(err, &ie)):
			s.flows.Delete(id)
			continue
		case errors.Is(err, workflow.ErrUnknownWorkflow):
			return &deadLetter{fmt.Sprintf("no workflow %q", id)}
		case errors.As(err, &ie):
			return &deadLetter{ie.Reason}
		case err != nil:
			return &retry{err}
		}
		if cached && len(d.Events) == 0 {
			_, seq, _, err := s.o.store.Last(ctx, id)
			if err != nil {
				return &retry{err}
			}
			if seq != f.seq {
				s.flows.Delete(id)
				continue
			}
		}
		if final := workflow.FinalJobs(d.State); len(final) > 0 && len(d.Events) > 0 {
			// The hooks' final jobs go out before workflow.finished is
			// stored: once it is, nothing would send them again. A cached
			// state may be stale; a job must not announce an end that
			// another process's append is about to refute.
			if cached {
				_, last, _, err := s.o.store.Last(ctx, id)
				if err != nil {
					return &retry{err}
				}
				if last != f.seq {
					s.flows.Delete(id)
					continue
				}
			}
			if err := s.o.publishFlowJobList(ctx, final); err != nil {
				return &retry{err}
			}
		}
		seq, err := s.o.store.Append(ctx, f.seq, d.Events)
		if err != nil {
			s.flows.Delete(id)
			switch {
			case errors.Is(err, bus.ErrConflict):
				continue
			case unstorable(err) && !f.state.Exists():
				// A start too big to store (its task list is in
				// workflow.started) is a rejected submission.
				return &deadLetter{"cannot store the workflow: " + err.Error()}
			case unstorable(err):
				if _, failing := in.(workflow.Fail); !failing {
					in = workflow.Fail{Reason: "cannot store what the workflow did: " + err.Error()}
					continue
				}
			}
			return &retry{err}
		}
		if err := s.crash(StageAppended); err != nil {
			return err
		}
		// A workflow's jobs are published on every input, not only a new
		// decision's: whether an input is a repeat of one whose handling
		// died cannot be told after a restart reset the inbox consumer, and
		// a job's id makes a second publish nothing.
		st := d.State
		// A hook is asked only once the checkpoint is in KV too: by the
		// Gate that follows the put below, whatever the input.
		_, gating := in.(workflow.Gate)
		if err := s.o.publishFlowJobs(ctx, st, gating); err != nil {
			s.flows.Delete(id)
			return &retry{err}
		}
		if err := s.crash(StagePublished); err != nil {
			return err
		}
		s.o.timers.arm(st.ID, workflowTimers(st))
		if st.Done() {
			s.flows.Delete(id)
			if len(d.Events) > 0 && f.state.Exists() {
				s.o.markDone(ctx, id)
			}
			if len(d.Events) > 0 {
				s.o.metrics.WorkflowFinished(string(st.Finished.StopReason))
				log.Info("workflow finished", "stop_reason", st.Finished.StopReason, "tasks", len(st.Finished.Tasks))
			}
			return nil
		}
		next := &flow{state: st, seq: seq, checkpoint: f.checkpoint}
		if p := bus.Partition(id); s.o.owns[p].Load() {
			next.gen = s.o.gens[p].Load()
			s.flows.Put(id, next)
		}
		if st.AwaitsGate() && !gating {
			// The checkpoint's second half, then the gate: in that order,
			// and again after a crash, since the state still awaits it. A
			// gate that waits for a hook stays here until its answer.
			if next.checkpoint, err = s.o.putCheckpoint(ctx, st, f.checkpoint); err != nil {
				return &retry{err}
			}
			in = workflow.Gate{}
			continue
		}
		return nil
	}
	return &retry{fmt.Errorf("orchestrator: workflow %s: the log kept moving", id)}
}

func workflowEnv() workflow.Env {
	e := env()
	return workflow.Env{Now: e.Now, NewID: e.NewID}
}

func workflowTimers(st *workflow.State) []fsm.Timer {
	var out []fsm.Timer
	for _, t := range workflow.Timers(st) {
		out = append(out, fsm.Timer{At: t.At, Timer: t.Timer})
	}
	return out
}

// publishFlowJobs publishes what a workflow's state waits on: its task's
// turn (Nats-Msg-Id task-start:<turn id>), the abort of a task it stopped,
// or, when hooks is set, the job of the hook its gate waits for
// (hook:<workflow_id>:<task>:<name>): each id makes a second publish
// nothing, whatever crashed between.
func (o *Orchestrator) publishFlowJobs(ctx context.Context, st *workflow.State, hooks bool) error {
	jobs := workflow.Jobs(st)
	if !hooks {
		jobs = slices.DeleteFunc(jobs, func(j workflow.Job) bool { return j.Hook != nil })
	}
	return o.publishFlowJobList(ctx, jobs)
}

// publishFlowJobList publishes a workflow's jobs under their ids.
func (o *Orchestrator) publishFlowJobList(ctx context.Context, jobs []workflow.Job) error {
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
		if _, err := o.js.Publish(ctx, j.Subject, data, jetstream.WithMsgID(j.ID)); err != nil {
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
func (o *Orchestrator) putCheckpoint(ctx context.Context, st *workflow.State, rev uint64) (uint64, error) {
	cp := st.Checkpoint
	data, err := events.Marshal(cp)
	if err != nil {
		return 0, err
	}
	for range 5 {
		if rev > 0 {
			n, err := o.checkpoints.Update(ctx, st.ID, data, rev)
			if err == nil {
				return n, nil
			}
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				return 0, fmt.Errorf("orchestrator: checkpoint %s: %w", st.ID, err)
			}
		}
		e, err := o.checkpoints.Get(ctx, st.ID)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			n, err := o.checkpoints.Create(ctx, st.ID, data)
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
func (o *Orchestrator) startedTask(ctx context.Context, sub *events.Submit) error {
	w := sub.Workflow
	last, _, ok, err := o.store.Last(ctx, w.WorkflowID)
	if err != nil {
		return &retry{err}
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
func (o *Orchestrator) notifyTask(ctx context.Context, w *events.WorkflowRef, turn string, fin events.TurnFinishedData) error {
	data, err := events.Marshal(events.TaskDone{WorkflowID: w.WorkflowID, Task: w.Task, TurnID: turn, Finished: fin})
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: events.TaskSubject(w.WorkflowID), Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, "task:"+turn)
	if _, err := o.js.PublishMsg(ctx, msg); err != nil {
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
func (s *shard) workflowInput(ctx context.Context, log *slog.Logger, msg jetstream.Msg, kind, id string) error {
	log = log.With("workflow", id)
	if kind == "control" {
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
