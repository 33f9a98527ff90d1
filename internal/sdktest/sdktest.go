// Package sdktest runs what the public packages' examples and tests talk
// to: the public test kit, jetlooptest, started from the files of a
// directory (AGENTS.md and the scripts it names), with the orchestrator's
// log on standard error when SDKTEST_LOG is set. It also holds the golden
// go doc test of the public packages.
package sdktest

import (
	"log/slog"
	"os"

	"github.com/jetloop/jetloop/jetlooptest"
)

// Stack is an embedded server, and the orchestrator once Orchestrate has
// started it.
type Stack = jetlooptest.Server

// Start starts a server with files (name → content): the agents file
// AGENTS.md and the scripts it names, for Orchestrate.
func Start(files map[string]string) (*Stack, error) {
	var opts []jetlooptest.Option
	for name, content := range files {
		if name == "AGENTS.md" {
			opts = append(opts, jetlooptest.WithAgents(content))
		} else {
			opts = append(opts, jetlooptest.WithFile(name, content))
		}
	}
	if os.Getenv("SDKTEST_LOG") != "" {
		opts = append(opts, jetlooptest.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	}
	return jetlooptest.New(opts...)
}
