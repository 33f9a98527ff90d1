package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// TestStoredMessagesPerStep counts what one tool step stores in each
// stream: under sync_interval: always every stored message is one fsync on
// the step's path (DESIGN.md, durability facts), so this is the step's
// count of synced writes. A turn of 11 steps (10 echo calls, then an
// answer) runs alone through an in-process orchestrator and tool worker.
// A decision's events are one message: a tool step stores two event
// messages (the call's decision, the result's decision) and one job; its
// result, handed to the turn's owner, is stored in the log alone. Jobs are
// in memory storage (the default): stored, but not synced, so a tool step
// makes two synced writes and a bit. The server
// syncs more than it stores (tombstones, consumer state, directories):
// TestSyncsPerStep counts those.
func TestStoredMessagesPerStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := startServer(ctx, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	g, gctx := errgroup.WithContext(ctx)
	defer func() {
		cancel()
		_ = g.Wait()
	}()
	tm := newTimings()
	if err := s.startWorker(gctx, g, discard(), tm); err != nil {
		t.Fatal(err)
	}
	if err := s.startOrchestrator(gctx, g, discard(), tm); err != nil {
		t.Fatal(err)
	}
	w, err := watch(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.stop()
	synced := map[string]bool{}
	live, err := s.js.KeyValue(ctx, bus.BucketLive)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() map[string]uint64 {
		// A turn leaves the index after its last event is stored, and the
		// watch can see that event before then: once the index is empty,
		// the turn's every message is in.
		testkit.WaitFor(t, "the index to be empty", func() bool {
			_, err := live.Keys(ctx)
			return errors.Is(err, jetstream.ErrNoKeysFound)
		})
		out := map[string]uint64{}
		for _, name := range []string{events.StreamEvents, events.StreamJobs, events.StreamInbox, "KV_JETLOOP_LIVE"} {
			st, err := s.js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = info.State.LastSeq
			synced[name] = info.Config.Storage == jetstream.FileStorage
		}
		return out
	}
	const steps = 11
	turn := func(id string) {
		if err := submit(ctx, s.js, id, script(id, steps, 0)); err != nil {
			t.Fatal(err)
		}
		if err := w.until(ctx, time.Minute, id, func() bool { st := w.turns[id]; return st != nil && st.finished }); err != nil {
			t.Fatal(err)
		}
	}
	turn("warm")
	before := stored()
	turn("count")
	after := stored()
	per := map[string]float64{}
	var total uint64 // synced writes of the turn
	for name, n := range after {
		per[name] = float64(n-before[name]) / (steps - 1)
		storage := "memory, not synced"
		if synced[name] {
			total += n - before[name]
			storage = "file, synced"
		}
		t.Logf("%-18s %5.2f stored messages per tool step (%d for the turn; %s)", name, per[name], n-before[name], storage)
	}
	t.Logf("%-18s %5.2f synced writes per tool step", "all", float64(total)/(steps-1))
	// Per tool step: 2 event messages, plus the turn's start and end spread
	// over its steps.
	if per[events.StreamEvents] > 2.5 {
		t.Errorf("%.2f event messages per tool step, want a decision's events in one message (≤ 2.5)", per[events.StreamEvents])
	}
	// Events 2.2, its turn's submission 0.1, the index 0.2; the result is
	// handed to the turn's owner, not stored in the inbox. A job synced on
	// file storage would add 1.0, a result stored in the inbox 1.0.
	if total > 26 {
		t.Errorf("%d synced writes over %d tool steps, want ≤ 2.6 a step (jobs in memory storage, results handed over)", total, steps-1)
	}
}
