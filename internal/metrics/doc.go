// Package metrics holds the Prometheus metrics of docs/operations.md,
// "Metrics", and serves them, with /healthz and /readyz, on a process's
// --metrics-addr.
//
// The runtime and the tool worker call small methods (TurnStarted,
// ToolCall, …) on a *Metrics; a nil *Metrics records nothing, so a process
// without --metrics-addr pays one nil check per call. Each process (or
// test) has a registry of its own, never the global default.
//
// Labels carry no ids: agents, tools, providers, kinds, outcomes and stop
// reasons come from configuration or closed sets, and an agent or tool the
// process does not know is counted as Other.
package metrics
