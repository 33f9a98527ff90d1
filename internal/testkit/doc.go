// Package testkit is what jetloop's own tests share: real embedded
// JetStream servers (one, restartable in place; a cluster; one started
// from a configuration file, or from the repository's nats.conf with its
// roles), one way to wait on a condition, the inputs a client sends, reads
// of turn logs and the check every test that runs turns ends with, and the
// golden go doc test of the public packages. JetStream code is never tested
// against a mock of the jetstream interfaces.
//
// Running an orchestrator or a tool worker in a test, alone or as a Stack
// on one server, is in internal/testkit/inproc, a package of its own
// because the orchestrator's own tests use this one. Programs never import
// either (internal/layers).
package testkit
