package orchestrator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inCall submits turn, which answers "made it", and returns once g holds
// its first model call and the turn's submission is handled: the turn is
// in the index, and no input of it is left to come again. A process that
// made the call dies with the call's job in the turn's log only.
func inCall(h *harness, g *gated, turn string) {
	h.t.Helper()
	h.submit(script(turn, "General", `{"responses": [{"text": "made it"}]}`))
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		h.t.Fatal("the model was never called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live, err := h.js.KeyValue(ctx, bus.BucketLive)
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitFor("the turn in the index and its submission acknowledged", func() bool {
		keys, _ := live.Keys(ctx)
		return slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "."+turn) }) && h.inboxLeft() == 0
	})
}

// madeIt waits for turn to finish with inCall's answer.
func madeIt(h *harness, turn string) {
	h.t.Helper()
	if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted || fin.Output != "made it" {
		h.t.Fatalf("finished %s %q %s", fin.StopReason, fin.Output, fin.Error)
	}
}

// TestRearmTriesAgainWhatItCouldNot: an orchestrator dies in a model call
// it made in its process, so the call's job is in the turn's log only. Its
// successor re-arms the turn at start and must publish that job, but the
// jobs stream is full then. Once there is room the job is published and the
// turn finishes: a re-arm that fails is tried again, not only logged.
func TestRearmTriesAgainWhatItCouldNot(t *testing.T) {
	p := bus.DefaultProvision(1 << 20)
	p.MaxBytes = 256 << 10
	h := newHarnessOn(t, testkit.Start(t), &p)
	g := newGated(1)
	_, _, kill := h.running(orchestrator.WithProvider("script", g))
	inCall(h, g, "stranded")
	kill()

	filler := events.ToolSubject("filler") // a tool no worker serves
	testkit.Fill(t, h.js, filler)
	// A publish the stream refuses still reaches a subscriber of its
	// subject: the successor's re-arm tried to publish the job.
	tried := make(chan *nats.Msg, 16)
	sub, err := h.nc.ChanSubscribe(events.SubjectModel, tried)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	h.orchestrator()
	select {
	case <-tried:
	case <-time.After(time.Minute):
		t.Fatal("the successor never published the model job")
	}
	if last := h.last("stranded"); last == events.TurnFinished {
		t.Fatal("the turn finished with the jobs stream full")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobs, err := h.js.Stream(ctx, events.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Purge(ctx, jetstream.WithPurgeSubject(filler)); err != nil {
		t.Fatal(err)
	}
	madeIt(h, "stranded")
}

// TestRestartedOrchestratorTakesBackItsCalls: an orchestrator dies in a
// model call it made in its process and is restarted under its name before
// its key expires, so the other orchestrator never sees it go (and then
// dies as well). The partitions it comes back to were its predecessor's,
// which is dead: it publishes the call's job, and the turn finishes.
func TestRestartedOrchestratorTakesBackItsCalls(t *testing.T) {
	h := newHarness(t)
	g := newGated(1)
	// Its kill ends its call at once, not after a drain's grace: it is
	// back before its key expires.
	_, _, kill := h.running(orchestrator.WithName("ob"), orchestrator.WithProvider("script", g), orchestrator.WithDrainGrace(time.Millisecond))
	turn := ""
	for i := 0; turn == ""; i++ {
		if id := fmt.Sprintf("heir-%d", i); bus.Owner(bus.Partition(id), []string{"oa", "ob"}) == "ob" {
			turn = id
		}
	}
	inCall(h, g, turn)
	other, _, killOther := h.running(orchestrator.WithName("oa"))
	h.waitFor("the other to serve its share", func() bool { return len(other.Partitions()) > 0 })

	kill()
	back, _, _ := h.running(orchestrator.WithName("ob"))
	h.waitFor("the restarted one to serve", func() bool { return len(back.Partitions()) > 0 })
	// The other dies too, so that only the restarted one can take the call
	// back: had the other seen the first go, it would have.
	killOther()
	madeIt(h, turn)
}
