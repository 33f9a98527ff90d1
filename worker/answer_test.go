package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestResultIsPublishedUntilStored: a result the inbox refuses (it is full)
// is published again until it is stored, its job kept by the worker
// meanwhile. Handing the job back would run the call again on whichever
// worker took it next.
func TestResultIsPublishedUntilStored(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inbox, err := e.js.Stream(ctx, events.StreamInbox)
	must(t, err)
	cfg := inbox.CachedInfo().Config
	cfg.MaxBytes = 64 << 10
	_, err = e.js.UpdateStream(ctx, cfg)
	must(t, err)
	filler := events.ResultSubject("filler")
	testkit.Fill(t, e.js, filler)
	// A publish the stream refuses still reaches a subscriber.
	var tries atomic.Int32
	nc, _ := e.srv.Connect(t)
	sub, err := nc.Subscribe(events.ToolResultSubject("echo", "t-full"), func(*nats.Msg) { tries.Add(1) })
	must(t, err)
	defer sub.Unsubscribe()

	e.worker(nil, worker.WithName("w1"))
	e.job(job("t-full", "echo", `{"text":"kept"}`))
	// More tries than a bounded retry would make before handing the job back.
	testkit.WaitFor(t, "six tries to publish the result", func() bool { return tries.Load() >= 6 })
	must(t, inbox.Purge(ctx, jetstream.WithPurgeSubject(bus.Stored(filler))))
	if r := e.result("t-full"); r.Output != "kept" || r.Attempt != 1 {
		t.Fatalf("result %+v", r)
	}
	cons, err := e.js.Consumer(ctx, events.StreamJobs, events.ToolConsumer("echo"))
	must(t, err)
	info, err := cons.Info(ctx)
	must(t, err)
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("the job was delivered %d times (%d redelivered)", info.Delivered.Consumer, info.NumRedelivered)
	}
}

// TestSilentOwnerPausesHandOvers: a result handed to a turn's owner that
// never answers goes to the inbox after the wait, and the next results go
// there at once, without being handed over: a deployment whose owner fails
// over, or whose permissions predate hand-overs, pays one wait, not one a
// call. A refusal pauses nothing.
func TestSilentOwnerPausesHandOvers(t *testing.T) {
	e := newEnv(t)
	nc, _ := e.srv.Connect(t)
	var asked atomic.Int32
	silent, err := nc.Subscribe(events.DirectResultSubject("echo", "*"), func(*nats.Msg) { asked.Add(1) })
	defer silent.Unsubscribe()
	must(t, err)
	must(t, nc.Flush())
	e.worker(nil, worker.WithName("w1"))
	e.job(job("t-silent-1", "echo", `{"text":"one"}`))
	if r := e.result("t-silent-1"); r.Output != "one" {
		t.Fatalf("result %+v", r)
	}
	e.job(job("t-silent-2", "echo", `{"text":"two"}`))
	if r := e.result("t-silent-2"); r.Output != "two" {
		t.Fatalf("result %+v", r)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("%d results handed over to a silent owner, want 1 and then the inbox", n)
	}
}

// TestRefusedHandOverGoesToTheInbox: an owner's refusal (its reason in
// Jetloop-Error) sends the result to the inbox at once, and pauses no
// later hand-over.
func TestRefusedHandOverGoesToTheInbox(t *testing.T) {
	e := newEnv(t)
	nc, _ := e.srv.Connect(t)
	var refused atomic.Int32
	sub, err := nc.Subscribe(events.DirectResultSubject("echo", "*"), func(m *nats.Msg) {
		refused.Add(1)
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header{events.HeaderError: []string{"not here"}}})
	})
	must(t, err)
	defer sub.Unsubscribe()
	must(t, nc.Flush())
	e.worker(nil, worker.WithName("w1"))
	for _, turn := range []string{"t-refused-1", "t-refused-2"} {
		e.job(job(turn, "echo", `{"text":"stored"}`))
		if r := e.result(turn); r.Output != "stored" {
			t.Fatalf("%s: result %+v", turn, r)
		}
	}
	if n := refused.Load(); n != 2 {
		t.Fatalf("%d results handed over, want both", n)
	}
}
