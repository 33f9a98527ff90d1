// Package tools is jetloop's tool-worker runtime and its built-in tools.
//
// A Worker serves a set of tools: for each it binds the durable consumer
// tool_<name> that every worker of that tool shares, pulls a job only when it
// has a free slot for it, runs the call under the job's deadline, heartbeats
// it with InProgress, and publishes the result to the turn's inbox before it
// acknowledges the job. It advertises its tools in KV JETLOOP_TOOLS while it
// runs. Anything that speaks the same two JSON messages is a worker too.
//
// MCP serves the tools of MCP servers (toolworker --mcp) as Tools like the
// built-in ones: see its doc for naming, results and restarts.
package tools
