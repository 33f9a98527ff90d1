// Package fsm is jetloop's turn machine: pure functions that say what a turn
// does next.
//
// A turn is folded from its event log with Evolve; Decide takes the state and
// one input (a submission, a model answer, a tool result, a control message, a
// timer) and returns the events that input causes, in order; Jobs and Timers
// derive the effects the state is waiting on (a model call, tool calls,
// deadlines). The runtime performs those effects and feeds their results back
// as inputs. Because the machine only ever sees the log and its inputs, the
// same log folds to the same state everywhere: in the orchestrator after a
// crash, in a second orchestrator, and in `jetloop replay --verify`.
//
// Rules for code in this package (as for a Temporal workflow):
//   - no I/O: no nats, net, os, files, environment;
//   - no clock and no randomness: time and new ids arrive in Env;
//   - no logging: what a user should hear about comes back as Warnings;
//   - no goroutines and no global mutable state beyond caches of pure
//     results.
//
// internal/layers' TestMachinesArePure holds this package, internal/workflow
// and internal/machine (the scaffolding both share: Env, InputError,
// TransitionError, the indexed table) to the clock, timer, randomness and
// I/O rules, as Temporal's workflowcheck does workflow code.
//
// The transition table is a looplab/fsm table; Evolve rejects every
// transition it does not hold (through an index of it that a test proves
// equal to looplab's machine); docs/fsm.md holds its Mermaid diagram,
// generated from the table (go test ./internal/fsm -run Diagram -update).
package fsm
