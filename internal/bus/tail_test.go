package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTailReadsWithoutConsumers: a tail reads what is stored (more than one
// batch), from each start, then what is stored after it, each message
// once, in order, and leaves no consumer on the stream; on a stream
// without direct gets (the dead letters) it reads by message get.
func TestTailReadsWithoutConsumers(t *testing.T) {
	ctx, js := provisioned(t)
	for _, stream := range []struct{ name, subject, filter string }{
		{events.StreamEvents, "jetloop.events.s.t", "jetloop.events.*.t"},
		{events.StreamDead, "jetloop.dead.job", "jetloop.dead.>"},
	} {
		t.Run(stream.name, func(t *testing.T) {
			put := func(from, to int) {
				for i := from; i < to; i++ {
					if _, err := js.Publish(ctx, stream.subject, fmt.Appendf(nil, "%d", i)); err != nil {
						t.Error(err)
						return
					}
				}
			}
			// Another subject in between: the filter skips it.
			put(0, 300)
			if stream.name == events.StreamEvents {
				if _, err := js.Publish(ctx, "jetloop.events.s.other", []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			read := func(tail *bus.Tail, want []string) {
				t.Helper()
				for _, w := range want {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					m, err := tail.Next(rctx)
					cancel()
					if err != nil {
						t.Fatalf("want %s: %v", w, err)
					}
					if string(m.Data) != w || m.Subject != stream.subject {
						t.Fatalf("read %s on %s, want %s", m.Data, m.Subject, w)
					}
				}
			}
			nums := func(from, to int) (out []string) {
				for i := from; i < to; i++ {
					out = append(out, fmt.Sprint(i))
				}
				return out
			}
			first, err := bus.NewTail(ctx, js, stream.name, stream.filter, bus.Start{})
			if err != nil {
				t.Fatal(err)
			}
			defer first.Close()
			last, err := bus.NewTail(ctx, js, stream.name, stream.filter, bus.Start{Last: true})
			if err != nil {
				t.Fatal(err)
			}
			defer last.Close()
			news, err := bus.NewTail(ctx, js, stream.name, stream.filter, bus.Start{New: true})
			if err != nil {
				t.Fatal(err)
			}
			defer news.Close()
			read(first, nums(0, 300))
			read(last, []string{"299"})
			// Stored after the tails began: each wakes and reads it.
			go put(300, 310)
			read(first, nums(300, 310))
			read(last, nums(300, 310))
			read(news, nums(300, 310))

			st, err := js.Stream(ctx, stream.name)
			if err != nil {
				t.Fatal(err)
			}
			names := st.ConsumerNames(ctx)
			for n := range names.Name() {
				t.Errorf("consumer %s left on %s", n, stream.name)
			}
			if err := names.Err(); err != nil && err != jetstream.ErrEndOfData {
				t.Fatal(err)
			}
		})
	}
}
