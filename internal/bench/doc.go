// Package bench measures what a durable jetloop step costs, against the
// floor JetStream sets and against the same machine run in memory.
//
// Run starts everything it measures itself: an embedded JetStream server
// with file storage per phase, the tool worker with the echo tool, the
// scripted model answering at once, and the orchestrator either in this
// process (where its model and tool calls can be timed exactly) or as a
// separate process (where its CPU time and memory can be read from /proc and
// where it can be killed).
//
// The deployed phase measures the shape users run instead: the nats-server,
// orchestrator, toolworker and jetloop binaries built from the module the
// benchmark runs in, a nats-server process with the repository's nats.conf,
// streams applied by jetloop streams apply, each process as its own user,
// and this process as a thin client. BENCHMARKS.md explains how each figure
// is made.
package bench
