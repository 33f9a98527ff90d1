package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkflowMetrics are a workflow's sums so far (OpenBotStack's LoopMetrics):
// Tasks, Steps, ToolCalls, ModelCalls, InputTokens, OutputTokens, BusyMs
// (the tasks' own time) and DurationMs (the wall clock since it started,
// the seed's TotalRuntime).
type WorkflowMetrics = events.WorkflowMetrics

// TaskMetrics are one task's own numbers, as its task.finished has them
// (the seed's TaskResult.TurnCount, ToolCallsUsed and Duration): Steps,
// ToolCalls, ModelCalls, InputTokens, OutputTokens and DurationMs.
type TaskMetrics = events.Metrics

// Ended is how a workflow ended: its workflow.finished's StopReason and
// Error.
type Ended = events.HookEnded

// Checkpoint is what a hook is asked about: a workflow right after one of
// its tasks, its checkpoint written (docs/protocol.md, "Hooks"). It carries
// OpenBotStack's Checkpoint.Save arguments (the task's index, its result
// and the metrics) and PolicyCheckpoint.Check's. It marshals flat, with
// the wire's snake_case names: metrics is the checkpoint's, task_metrics
// the task result's.
type Checkpoint struct {
	WorkflowID string `json:"workflow_id"`
	SessionID  string `json:"session_id"`
	// Task is the task just done, from 1; TurnID its turn. Last is set
	// after the last task of the list: a stop then vetoes the result.
	Task   int    `json:"task"`
	TurnID string `json:"turn_id"`
	Last   bool   `json:"last"`
	// Metrics are the workflow's sums, this task's included; TaskMetrics
	// this task's own.
	Metrics     WorkflowMetrics `json:"metrics"`
	TaskMetrics TaskMetrics     `json:"task_metrics"`
	// StopReason, Output and Error are the task's result.
	StopReason events.StopReason `json:"stop_reason"`
	Output     string            `json:"output"`
	Error      string            `json:"error,omitempty"`
	// Deadline is when the workflow stops waiting for the answer; Check's
	// context ends then.
	Deadline time.Time `json:"deadline"`
	// Ended is set when the workflow ended at this checkpoint before this
	// hook decided (its clock, an abort, a rejected task, another hook's
	// stop, error or timeout, a denial): the hook is handed the last
	// checkpoint, and its decision changes nothing.
	Ended *Ended `json:"ended,omitempty"`
	// Attempt counts the deliveries of the job: more than 1 when a hook
	// process died or timed out with it before.
	Attempt int `json:"attempt"`
}

// Decision is a hook's answer: go on, stop the workflow (it ends denied
// with Reason) or wait for a person's approval. Build one with Continue,
// Stop or Wait.
type Decision struct {
	Decision events.GateDecision
	Reason   string
}

// Continue lets the workflow go on (to the next hook, then the gate's own
// rules).
func Continue(reason string) Decision { return Decision{Decision: events.GateContinue, Reason: reason} }

// Stop ends the workflow with stop reason denied and reason as its error,
// after the last task too.
func Stop(reason string) Decision { return Decision{Decision: events.GateStop, Reason: reason} }

// Wait pauses the workflow until a person approves (jetloop workflow
// approve) or denies it.
func Wait(reason string) Decision { return Decision{Decision: events.GateWait, Reason: reason} }

// Hook is a program a workflow consults after each task: OpenBotStack's
// PolicyCheckpoint (Check decides) and, when it stores the checkpoint
// somewhere and answers Continue, its Checkpoint. Several hooks named in
// order in policy.hooks are its CompositeCheckpoint. A returned error (or a
// panic) is answered as the hook's failure: the workflow ends with stop
// reason error and the error's text, as the seed's Save and Check errors
// end its loop, not denied as a Stop does.
type Hook interface {
	Check(ctx context.Context, cp Checkpoint) (Decision, error)
}

// HookFunc is a function as a Hook.
type HookFunc func(ctx context.Context, cp Checkpoint) (Decision, error)

// Check calls f.
func (f HookFunc) Check(ctx context.Context, cp Checkpoint) (Decision, error) { return f(ctx, cp) }

// HandleHook registers a hook under name ([A-Za-z0-9_-]{1,64}; not rules
// nor approval): Run then serves jobs.hook.<name> through the durable
// consumer hook_<name> that all its workers share, and advertises it in KV
// JETLOOP_TOOLS under hook.<name> (never offered to a model as a tool).
// A job whose hook process dies is asked again after the ack wait.
func (w *Worker) HandleHook(name string, h Hook) error {
	if h == nil {
		return fmt.Errorf("worker: hook %s: nil hook", name)
	}
	if !events.ValidID(name) || name == events.GateByRules || name == events.GateByApproval {
		return fmt.Errorf("worker: hook name %q must match [A-Za-z0-9_-]{1,64} and be neither rules nor approval: %w", name, ErrInvalidName)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return fmt.Errorf("worker: hook %s registered after Run: %w", name, ErrRunning)
	}
	if _, dup := w.hooks[name]; dup {
		return fmt.Errorf("worker: hook %s %w", name, ErrDuplicate)
	}
	w.hooks[name] = h
	return nil
}

// hookConsumerConfig is the durable consumer every worker of a hook shares.
func (w *Worker) hookConsumerConfig(hook string) jetstream.ConsumerConfig {
	c := w.consumerConfig(hook)
	c.Durable, c.FilterSubject = events.HookConsumer(hook), events.HookSubject(hook)
	return c
}

// pullHook is one slot of a hook, as pull is of a tool.
func (w *Worker) pullHook(ctx context.Context, hook string, c jetstream.Consumer) {
	repair := func(ctx context.Context) (jetstream.Consumer, error) {
		return w.remake(ctx, w.hookConsumerConfig(hook))
	}
	bus.PullRepairing(ctx, c, w.log.With("hook", hook), repair, func(msg jetstream.Msg) { w.handleHook(ctx, hook, msg) })
}

// handleHook asks a hook about one job and answers it. Every path ends in
// one of: the answer published then the job acknowledged; a dead letter;
// a Nak that asks again (the worker is stopping); or an acknowledgement
// without an answer when the workflow has stopped waiting.
func (w *Worker) handleHook(stop context.Context, hook string, msg jetstream.Msg) {
	if stop.Err() != nil {
		_ = msg.Nak()
		return
	}
	job, attempt, ok := readJob[events.HookJob](msg, "hook_job", w.deadJob)
	if !ok {
		return
	}
	log := w.log.With("workflow", job.WorkflowID, "task", job.Task, "hook", hook, "attempt", attempt)
	if deadlinePassed(job.Deadline) {
		// The workflow has given up on this answer already.
		log.Info("a hook job past its deadline: not asked")
		_ = msg.Ack()
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), job.Deadline)
	defer cancel()
	grace := context.AfterFunc(stop, func() {
		t := time.AfterFunc(w.opts.drainGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer grace()
	beat := bus.Heartbeat(ctx, msg, w.opts.ackWait/3)
	defer beat()

	d, err := w.check(ctx, hook, Checkpoint{WorkflowID: job.WorkflowID, SessionID: job.SessionID, Task: job.Task,
		TurnID: job.TurnID, Last: job.Last, Metrics: job.Checkpoint.Metrics, TaskMetrics: job.TaskResult.Metrics,
		StopReason: job.TaskResult.StopReason, Output: job.TaskResult.Output, Error: job.TaskResult.Error,
		Deadline: job.Deadline, Ended: job.Ended, Attempt: attempt})
	switch {
	case stop.Err() != nil && ctx.Err() != nil && !deadlinePassed(job.Deadline):
		log.Info("hook cut short by shutdown; handed back")
		_ = msg.Nak()
		return
	case deadlinePassed(job.Deadline):
		log.Warn("the hook answered after its deadline; the workflow has gone on without it")
		_ = msg.Ack()
		return
	case err != nil:
		// The orchestrator names the hook in the workflow's error.
		d = Decision{Decision: events.GateError, Reason: err.Error()}
	case d.Decision != events.GateContinue && d.Decision != events.GateStop && d.Decision != events.GateWait:
		d = Decision{Decision: events.GateError, Reason: fmt.Sprintf("answered %q: a hook answers continue, stop or wait", d.Decision)}
	}
	a := events.HookAnswer{WorkflowID: job.WorkflowID, Task: job.Task, Hook: hook, Decision: d.Decision, Reason: capReason(d.Reason)}
	if err := w.answerHook(msg, a, log); err != nil {
		log.Warn("cannot publish a hook's answer; the job will be redelivered", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	actx, acancel := context.WithTimeout(context.Background(), w.opts.ackWait)
	defer acancel()
	if err := bus.AckSure(actx, msg); err != nil {
		log.Warn("ack not confirmed; a redelivery's answer is deduplicated", "err", err)
	}
}

// maxReason is hook_answer's bound on a reason.
const maxReason = 4096

func capReason(s string) string {
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason - 3
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut-- // not inside a UTF-8 sequence
	}
	return s[:cut] + "..."
}

// check runs a hook, turning a panic into an error.
func (w *Worker) check(ctx context.Context, hook string, cp Checkpoint) (d Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("hook panicked", "hook", hook, "panic", p, "stack", string(debug.Stack()))
			d, err = Decision{}, fmt.Errorf("internal error: %v", p)
		}
	}()
	return w.hooks[hook].Check(ctx, cp)
}

// hookAnswerTries bounds the publishes of a hook's answer; past them its
// job is handed back, and the hook asked again.
const hookAnswerTries = 5

// answerHook publishes a hook's answer under its id, trying again when a
// publish fails: the same answer published twice is one.
func (w *Worker) answerHook(msg jetstream.Msg, a events.HookAnswer, log *slog.Logger) error {
	beat := bus.Heartbeat(context.Background(), msg, w.opts.ackWait/3)
	defer beat()
	data, err := events.Marshal(a)
	if err != nil {
		return err
	}
	return backoff.Policy{First: time.Second, Max: time.Second, Tries: hookAnswerTries}.Do(context.Background(), func(try int) error {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		_, err := w.js.Publish(ctx, events.HookAnswerSubjectOf(a.Hook, a.WorkflowID), data,
			jetstream.WithMsgID(events.HookAnswerID(a.WorkflowID, a.Task, a.Hook)))
		if err != nil && try < hookAnswerTries {
			log.Warn("cannot publish a hook's answer; trying again", "err", err, "try", try)
		}
		return err
	})
}

// deadJob keeps a hook job no hook can read in the dead-letter stream; its
// workflow stops at the hook's timeout.
func (w *Worker) deadJob(msg jetstream.Msg, reason string) {
	w.log.Warn("dead letter", "subject", msg.Subject(), "reason", reason)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := bus.DeadLetter(ctx, w.js, msg, "job", reason); err != nil {
		w.log.Warn("cannot dead-letter a job", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	w.obs.deadLetter("job")
	_ = msg.TermWithReason(reason)
}
