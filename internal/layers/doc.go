// Package layers has no code: its test holds the module to its layering,
// commands → cli → orchestrator and tools → bus → fsm, workflow and events,
// and keeps what a user links (the client and worker packages, the tool
// worker binary) free of the server and the model SDKs, and every package
// but a test free of the test kits. Its tests also keep the machines pure,
// and the in-process starting of an orchestrator or a tool worker in one
// place (internal/stack).
package layers
