// Package testkit is what jetloop's own tests share: real embedded
// JetStream servers (one, a cluster, or one started from a configuration
// file), one way to wait on a condition, reads of turn logs and the check
// every test that runs turns ends with, and the golden go doc test of the
// public packages. JetStream code is never tested against a mock of the
// jetstream interfaces.
//
// Running an orchestrator or a tool worker in a test is in
// internal/testkit/inproc, a package of its own because the orchestrator's
// own tests use this one. Programs never import either (internal/layers).
package testkit
