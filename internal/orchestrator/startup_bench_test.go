package orchestrator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkStartupAfterHistory starts an orchestrator on a log of 100,000
// finished turns: start-up reads the index of unfinished turns, not the
// log, so it does not grow with history. For scale it also times the reads
// the former start-up made (every subject of the log, then the last event
// of each). make bench runs it once:
//
//	go test -run '^$' -bench StartupAfterHistory -benchtime 1x ./internal/orchestrator
func BenchmarkStartupAfterHistory(b *testing.B) {
	const turns = 100_000
	srv := testkit.Start(b)
	nc, js := srv.Connect(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range turns {
		id := fmt.Sprintf("old-%d", i)
		data, err := events.AppendEnvelope(nil, events.Envelope{ID: id, Type: events.TurnFinished, TurnID: id, SessionID: id,
			Seq: 1, Time: now, Data: []byte(`{"stop_reason":"completed","output":"","metrics":{}}`)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync(events.EventsSubject(id, id), data); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	dir := b.TempDir()
	path := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(path, []byte("---\nname: General\nmodel: script\n---\nHelps.\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	set, _, err := agents.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	inbox := func() jetstream.Consumer {
		c, err := js.Consumer(ctx, events.StreamInbox, bus.InboxConsumer)
		if err != nil {
			return nil
		}
		return c
	}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		o, err := orchestrator.New(nc, js, slog.New(slog.DiscardHandler), set, orchestrator.WithName("startup"))
		if err != nil {
			b.Fatal(err)
		}
		octx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- o.Run(octx) }()
		testkit.WaitFor(b, "the orchestrator to serve", func() bool {
			c := inbox()
			if c == nil {
				return false
			}
			info, err := c.Info(ctx)
			return err == nil && info.NumWaiting > 0 && len(o.Partitions()) == bus.Partitions
		})
		total += time.Since(began)
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "startup_ms")

	store, err := logstore.New(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	subjects, err := store.Subjects(ctx, "jetloop.events.>")
	if err != nil {
		b.Fatal(err)
	}
	for subj := range subjects {
		if _, _, _, err := store.Last(ctx, bus.TurnOf(subj)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(began).Milliseconds()), "former_scan_ms")
	b.ReportMetric(float64(len(subjects)), "turns")
}
