package bus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishAgainSendsAnUnansweredPublishAgain: the first publish is
// never answered, as one sent while the server went away is not; the
// second is. PublishAgain returns the second's acknowledgement (a plain
// publish fails at the caller's deadline), and sends the same id.
func TestPublishAgainSendsAnUnansweredPublishAgain(t *testing.T) {
	srv := testkit.Start(t)
	nc, js := srv.Connect(t)
	var seen atomic.Int32
	ids := make(chan string, 2)
	// A plain subscriber answers for the stream the way a stream does,
	// but only from the second copy on.
	sub, err := nc.Subscribe("lost.reply", func(m *nats.Msg) {
		ids <- m.Header.Get(nats.MsgIdHdr)
		if seen.Add(1) == 1 {
			return
		}
		_ = m.Respond([]byte(`{"stream":"LOST","seq":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := bus.PublishAgain(ctx, js, &nats.Msg{Subject: "lost.reply", Data: []byte("x")}, jetstream.WithMsgID("job-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "LOST" || seen.Load() != 2 {
		t.Fatalf("ack %+v after %d copies, want the second copy's", ack, seen.Load())
	}
	if a, b := <-ids, <-ids; a != "job-1" || b != "job-1" {
		t.Fatalf("ids %q and %q, want job-1 twice", a, b)
	}
}
