package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats-server/v2/server"
)

// TestMain lets the test binary be the jetloop binary: with
// JETLOOP_RUN_MAIN set it runs main, so the tests signal a real process
// without building one.
func TestMain(m *testing.M) {
	if os.Getenv("JETLOOP_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestSignalledWatchExitsQuietly: jetloop watch, sent SIGINT or SIGTERM
// while it waits for a turn, exits 130 or 0 and says nothing of a canceled
// context.
func TestSignalledWatchExitsQuietly(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	testkit.EnsureStreams(t, js)
	for _, tc := range []struct {
		turn string
		sig  os.Signal
		want int
	}{
		{"proc-int", os.Interrupt, 130},
		{"proc-term", syscall.SIGTERM, 0},
	} {
		cmd := exec.Command(os.Args[0], "watch", "--nats", srv.ClientURL(), "--no-color", tc.turn)
		cmd.Env = append(os.Environ(), "JETLOOP_RUN_MAIN=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A watch reads by get, and subscribes to the turn's log first.
		testkit.WaitFor(t, "the watch to start", func() bool {
			subs, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: "jetloop.events.x." + tc.turn})
			if err != nil {
				return false
			}
			return slices.ContainsFunc(subs.Subs, func(s server.SubDetail) bool { return s.Subject == events.TurnEventsFilter(tc.turn) })
		})
		if err := cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: still running after %v", tc.turn, tc.sig)
		}
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.want {
			t.Errorf("%v: exit %d, want %d\nstderr:\n%s", tc.sig, code, tc.want, stderr.String())
		}
		if s := stderr.String(); strings.Contains(s, "cancel") || strings.Contains(s, "signal") {
			t.Errorf("%v: not quiet:\n%s", tc.sig, s)
		}
	}
}
