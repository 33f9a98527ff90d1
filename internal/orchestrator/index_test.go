package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/nats-io/nats.go/jetstream"
)

// askUser is a turn that pauses on its first step until it is answered.
const askUser = `{"responses": [
	{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which API?"}}]},
	{"text": "using v2"}]}`

// indexed reports whether KV JETLOOP_LIVE, the index a restart re-arms
// from, holds a turn.
func (h *harness) indexed(turn string) bool {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, bus.BucketLive)
	if err != nil {
		h.t.Fatal(err)
	}
	_, err = kv.Get(ctx, strconv.Itoa(bus.Partition(turn))+"."+turn)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return true
}

// TestTheIndexHoldsUnfinishedTurns: a turn is in the index of unfinished
// turns while it runs or waits, and not once it finished; a rejected
// submission is never in it (nothing would drop it before a restart). A
// start whose handling died after appending it, before writing the index,
// is indexed when its submission comes again.
func TestTheIndexHoldsUnfinishedTurns(t *testing.T) {
	h := newHarness(t)
	h.worker()
	var seen atomic.Int32
	crashed := make(chan struct{})
	_, _, kill := h.running(orchestrator.WithCrashHook(func(s string) error {
		if s != orchestrator.StageAppended || seen.Add(1) != 1 {
			return nil
		}
		close(crashed)
		return errors.New("crash")
	}))
	h.submit(script("idx-crashed", "General", askUser))
	<-crashed
	kill()
	h.orchestrator()
	h.waitType("idx-crashed", events.TurnPaused)
	h.waitFor("the crashed start to be indexed", func() bool { return h.indexed("idx-crashed") })

	h.submit(script("idx-paused", "General", askUser))
	h.waitType("idx-paused", events.TurnPaused)
	h.waitFor("the paused turn to be indexed", func() bool { return h.indexed("idx-paused") })

	h.submit(script("idx-done", "General", `{"responses": [{"text": "done"}]}`))
	h.finished("idx-done")
	h.waitFor("the finished turn to leave the index", func() bool { return !h.indexed("idx-done") })

	h.submit(events.Submit{TurnID: "idx-rejected", Agent: "Nobody"})
	// Its dead letter is kept after its handling ended.
	h.waitFor("the rejected submission's dead letter", func() bool { return len(h.deadBySubject()) == 1 })
	if h.indexed("idx-rejected") {
		t.Fatal("a rejected submission is in the index")
	}
	h.checkAllLogs()
}

// TestFullIndexEndsTheTurn: a turn whose entry the full index cannot take
// (no restart would find it) ends with an error that says so, like one
// whose job cannot be stored, instead of a submission retried until it is a
// dead letter while its turn runs on.
func TestFullIndexEndsTheTurn(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, "KV_"+bus.BucketLive)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = 4 << 10
	cfg.Discard = jetstream.DiscardNew
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kv, err := h.js.KeyValue(ctx, bus.BucketLive)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, "the index", func(i int) error {
		_, err := kv.Put(ctx, fmt.Sprintf("0.fill-%d", i), nil)
		return err
	})
	h.start()
	h.submit(script("unindexed", "General", askUser))
	if _, fin := h.finished("unindexed"); fin.StopReason != events.StopError || !strings.Contains(fin.Error, "maximum bytes exceeded") {
		t.Fatalf("finished %s %q, want an error saying the index is full", fin.StopReason, fin.Error)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	h.submit(script("indexed", "General", askUser))
	h.waitType("indexed", events.TurnPaused)
	h.waitFor("a paused turn to be indexed once the index has room", func() bool { return h.indexed("indexed") })
}
