// Package workflow is the outer loop: a pure, event-sourced machine that
// runs a list of tasks, each as one turn of the inner loop (internal/fsm),
// through init → task_select → task_execute → checkpoint → gate → next_task
// → done, with paused while the gate waits for a person (docs/protocol.md,
// "Workflows — the outer loop").
//
// It follows internal/fsm's rules to the letter: no nats, net, os, time.Now,
// rand or slog here. Time and ids arrive in Env, a task's result arrives as
// an input (TaskDone), and what the machine wants done — submit a task's
// turn, abort it, arm the deadline — is derived from the state by Jobs and
// Timers, so a crash between any two lines of the runtime repeats nothing
// that matters: the log says what was decided, and the jobs carry ids that
// make a second publish a no-op.
//
// The checkpoint is two writes in order: workflow.checkpointed to the log
// (by Decide on TaskDone), then the runtime's put to KV
// JETLOOP_CHECKPOINTS. Only then does the runtime ask for Gate, so a
// workflow found in the checkpoint phase (after a crash) has its checkpoint
// written again before the gate decides.
package workflow
