// Package runtime is jetloop's JetStream I/O: the streams and consumers of the
// contract, the orchestrator that folds a turn's log, asks the pure machine in
// internal/fsm what happens next, appends the resulting events with optimistic
// concurrency and publishes the jobs they call for, and the model runners.
package runtime
