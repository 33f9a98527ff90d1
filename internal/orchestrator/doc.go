// Package orchestrator is the orchestrator process: it takes the inbox's
// inputs, folds a turn's (or a workflow's) log, asks the pure machine in
// internal/fsm or internal/workflow what happens next, appends the resulting
// events with optimistic concurrency and publishes the jobs they call for,
// and runs the model runners. What it shares with the other processes is in
// internal/bus.
package orchestrator
