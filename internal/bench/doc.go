// Package bench measures what a durable jetloop step costs, against the
// floor JetStream sets and against the same machine run in memory.
//
// Run starts everything it measures itself: an embedded JetStream server
// with file storage per phase, the tool worker with the echo tool, the
// scripted model answering at once, and the orchestrator either in this
// process (where its model and tool calls can be timed exactly) or as a
// separate process (where its CPU time and memory can be read from /proc and
// where it can be killed). BENCHMARKS.md explains how each figure is made.
package bench
