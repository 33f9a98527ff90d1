package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// syncStack is an in-process orchestrator and tool worker on an embedded
// server that fsyncs before every acknowledgement (the embedded default):
// a step's cost under sync always, without the deployed shape's processes.
func syncStack(b *testing.B) (*site, *watcher, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := startServer(ctx, discard())
	if err != nil {
		b.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	tm := newTimings()
	if err := s.startWorker(gctx, g, discard(), tm); err != nil {
		b.Fatal(err)
	}
	if err := s.startOrchestrator(gctx, g, discard(), tm); err != nil {
		b.Fatal(err)
	}
	w, err := watch(s.nc)
	if err != nil {
		b.Fatal(err)
	}
	return s, w, func() {
		w.stop()
		cancel()
		_ = g.Wait()
		s.stop()
	}
}

// BenchmarkSyncedStep runs turns of 11 steps (10 echo calls) one at a
// time and reports the time per step (ms/step).
func BenchmarkSyncedStep(b *testing.B) {
	s, w, stop := syncStack(b)
	defer stop()
	ctx := context.Background()
	const steps = 11
	run := func(id string) {
		if err := submit(ctx, s.js, id, script(id, steps, 0)); err != nil {
			b.Fatal(err)
		}
		if err := w.until(ctx, time.Minute, id, func() bool { st := w.turns[id]; return st != nil && st.finished }); err != nil {
			b.Fatal(err)
		}
	}
	run("warm")
	b.ResetTimer()
	began := time.Now()
	for i := range b.N {
		run("seq-" + strconv.Itoa(i))
	}
	b.ReportMetric(float64(time.Since(began).Microseconds())/1000/float64(b.N*(steps-1)), "ms/step")
}

// BenchmarkSyncedThroughput runs b.N turns of 10 steps, 50 in flight, and
// reports steps per second.
func BenchmarkSyncedThroughput(b *testing.B) {
	s, w, stop := syncStack(b)
	defer stop()
	ctx := context.Background()
	const steps, inFlight = 10, 50
	slots := make(chan struct{}, inFlight)
	w.mu.Lock()
	w.onFinish = func(string, seen) { <-slots }
	w.mu.Unlock()
	b.ResetTimer()
	began := time.Now()
	for i := range b.N {
		slots <- struct{}{}
		id := fmt.Sprintf("load-%d", i)
		if err := submit(ctx, s.js, id, script(id, steps, 0)); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.until(ctx, 5*time.Minute, "every turn", func() bool { return w.finished >= b.N }); err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, st := range w.snapshot() {
		total += st.steps
	}
	b.ReportMetric(float64(total)/time.Since(began).Seconds(), "steps/s")
}
