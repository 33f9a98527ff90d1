package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// BenchmarkLogAppends appends decisions (two events, one message) to 64
// turns' logs at once through the store, on a server that fsyncs every
// stored message (the shipped sync_interval: always), with the logs in one
// stream or in four: how many synced appends one stream's leader takes,
// and what streams whose syncs run side by side add on this disk. A
// cluster's node with a disk of its own leads some of the streams
// (docs/scaling.md); here one server leads them all.
func BenchmarkLogAppends(b *testing.B) {
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("streams-%d", streams), func(b *testing.B) {
			srv := testkit.StartSynced(b)
			nc, js := srv.Connect(b)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			p := bus.DefaultProvision(nc.MaxPayload())
			p.EventStreams = streams
			if _, err := bus.Apply(ctx, js, p); err != nil {
				b.Fatal(err)
			}
			store, err := bus.NewStore(ctx, js)
			if err != nil {
				b.Fatal(err)
			}
			const writers = 64
			var (
				left atomic.Int64
				wg   sync.WaitGroup
			)
			left.Store(int64(b.N))
			b.ResetTimer()
			for w := range writers {
				wg.Go(func() {
					turn := fmt.Sprintf("w%d", w)
					last, n := uint64(0), 0
					for left.Add(-1) >= 0 {
						n += 2
						seq, err := store.Append(ctx, last, []events.Envelope{event(turn, n-1), event(turn, n)})
						if err != nil {
							b.Error(err)
							return
						}
						last = seq
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		})
	}
}
