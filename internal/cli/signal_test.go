package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats-server/v2/server"
)

// TestInterruptedWatchIsQuiet: watch and submit --watch, stopped while they
// follow a turn, exit 130 after SIGINT and 0 after SIGTERM or a plain
// cancel, and say nothing of a canceled context; submit says how to follow
// or abort the turn it leaves running. No orchestrator runs, so
// the turn never finishes and only the stop ends the command.
func TestInterruptedWatchIsQuiet(t *testing.T) {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	testkit.EnsureStreams(t, js)
	following := func(turn string) bool { return followed(srv, turn) }
	for i, tc := range []struct {
		args  []string
		turn  string
		cause error // nil: a plain cancel
		want  int
	}{
		{[]string{"watch", "watch-int"}, "watch-int", &Interrupt{Signal: os.Interrupt}, ExitInterrupted},
		{[]string{"watch", "watch-term"}, "watch-term", &Interrupt{Signal: syscall.SIGTERM}, ExitOK},
		{[]string{"watch", "watch-plain"}, "watch-plain", nil, ExitOK},
		{[]string{"submit", "--watch", "--turn", "sub-int", "hi"}, "sub-int", &Interrupt{Signal: os.Interrupt}, ExitInterrupted},
		{[]string{"submit", "--watch", "--turn", "sub-term", "hi"}, "sub-term", &Interrupt{Signal: syscall.SIGTERM}, ExitOK},
		// --no-wait: stopped while it follows the turn, not while it
		// waits for the start.
		{[]string{"submit", "--watch", "--no-wait", "--turn", "sub-follow", "hi"}, "sub-follow", &Interrupt{Signal: os.Interrupt}, ExitInterrupted},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		args := append([]string{tc.args[0], "--nats", srv.ClientURL()}, tc.args[1:]...)
		go func() { done <- Main(ctx, args, &stdout, &stderr) }()
		// Stop it once it follows the turn: it subscribed to its log.
		testkit.WaitFor(t, "the watch to start", func() bool { return following(tc.turn) })
		cancel(tc.cause)
		var code int
		select {
		case code = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("case %d: %v did not stop", i, tc.args)
		}
		// Main has returned: its writers are no longer written to.
		if code != tc.want {
			t.Errorf("case %d: %v exited %d, want %d\nstderr:\n%s", i, tc.args, code, tc.want, stderr.String())
		}
		// A submitted turn goes on: the command says how to get back to it.
		if tc.args[0] == "submit" && !strings.Contains(stderr.String(), "jetloop watch "+tc.turn) ||
			tc.args[0] == "submit" && !strings.Contains(stderr.String(), "jetloop abort "+tc.turn) {
			t.Errorf("case %d: %v did not say how to follow or abort the turn:\n%s", i, tc.args, stderr.String())
		}
		if tc.args[0] == "watch" && stderr.Len() > 0 {
			t.Errorf("case %d: %v was not quiet:\n%s", i, tc.args, stderr.String())
		}
		if s := stderr.String(); strings.Contains(s, "cancel") || strings.Contains(s, "signal") || strings.Contains(s, "jetloop "+tc.args[0]+": watch") {
			t.Errorf("case %d: %v was not quiet:\n%s", i, tc.args, s)
		}
	}
}

// followed reports whether a watch of turn has subscribed to its log.
func followed(srv *testkit.Server, turn string) bool {
	// A follower reads by get, and subscribes to the turn's log first.
	subs, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: "jetloop.events.x." + turn})
	if err != nil {
		return false
	}
	for _, s := range subs.Subs {
		if s.Subject == events.TurnEventsFilter(turn) {
			return true
		}
	}
	return false
}
