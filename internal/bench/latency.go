package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// floor measures what JetStream itself costs on this machine, with the
// server and client settings the runtime uses: one publish and its ack, and
// one hop through a work queue, a worker and the inbox, as a tool call makes.
func (b *run) floor(ctx context.Context, sz sizes) error {
	s, err := startServer(ctx, b.log)
	if err != nil {
		return err
	}
	defer s.stop()
	// Streams like jetloop's (docs/protocol.md): file storage, a dedup
	// window, work queues for jobs and inputs.
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "BENCH_LOG", Subjects: []string{"bench.log.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowDirect: true},
		{Name: "BENCH_JOBS", Subjects: []string{"bench.jobs.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Duplicates: 10 * time.Minute},
		{Name: "BENCH_INBOX", Subjects: []string{"bench.inbox.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Duplicates: 10 * time.Minute},
	} {
		if _, err := s.js.CreateStream(ctx, cfg); err != nil {
			return err
		}
	}

	// One publish and its ack, as an event append makes it: a message id
	// and the expected last sequence of its subject.
	var pubs []time.Duration
	last := uint64(0)
	for i := range sz.floorSamples + 50 {
		began := time.Now()
		ack, err := s.js.Publish(ctx, "bench.log.turn", []byte(`{"type":"step.started","seq":1}`),
			jetstream.WithMsgID("p"+strconv.Itoa(i)), jetstream.WithExpectLastSequencePerSubject(last))
		if err != nil {
			return err
		}
		if i >= 50 { // the first ones warm the connection and the store
			pubs = append(pubs, time.Since(began))
		}
		last = ack.Sequence
	}
	b.res.PublishFloorP50Ms, b.res.PublishFloorP99Ms = ms(percentile(pubs, 0.5)), ms(percentile(pubs, 0.99))

	// One hop: a job published to a work queue, pulled by a worker the way
	// tool workers pull (one message when a slot is free), answered on the
	// inbox and received by a consumer the way the orchestrator consumes.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wnc, wjs, err := s.connect("bench worker", b.log)
	if err != nil {
		return err
	}
	defer wnc.Close()
	jobs, err := wjs.CreateOrUpdateConsumer(ctx, "BENCH_JOBS", jetstream.ConsumerConfig{Durable: "worker",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5, MaxAckPending: 10_000})
	if err != nil {
		return err
	}
	onc, ojs, err := s.connect("bench orchestrator", b.log)
	if err != nil {
		return err
	}
	defer onc.Close()
	inbox, err := ojs.CreateOrUpdateConsumer(ctx, "BENCH_INBOX", jetstream.ConsumerConfig{Durable: "orchestrator",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 20_000})
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.Go(func() error {
		bus.PullEach(ctx, jobs, b.log, func(m jetstream.Msg) {
			id := string(m.Data()[8:])
			pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer pcancel()
			if _, err := wjs.Publish(pctx, "bench.inbox.result.turn", m.Data(), jetstream.WithMsgID("result:"+id)); err == nil {
				_ = m.Ack()
			}
		})
		return nil
	})
	arrived := make(chan time.Duration, 1)
	it, err := inbox.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return err
	}
	defer it.Stop()
	g.Go(func() error {
		for {
			m, err := it.Next()
			if err != nil {
				return nil
			}
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Data()[:8])))
			_ = m.Ack()
			arrived <- time.Since(sent)
		}
	})
	var hops []time.Duration
	for i := range sz.floorSamples + 50 {
		id := "call" + strconv.Itoa(i)
		data := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
		data = append(data, id...)
		if _, err := ojs.Publish(ctx, "bench.jobs.tool.echo", data, jetstream.WithMsgID("tool:"+id)); err != nil {
			return err
		}
		select {
		case d := <-arrived:
			if i >= 50 {
				hops = append(hops, d)
			}
		case <-time.After(10 * time.Second):
			return errors.New("a hop did not arrive within 10 s")
		}
	}
	cancel()
	it.Stop()
	_ = g.Wait()
	b.res.HopFloorP50Ms, b.res.HopFloorP99Ms = ms(percentile(hops, 0.5)), ms(percentile(hops, 0.99))
	return nil
}

// overhead runs turns one at a time through an orchestrator in this process
// and takes, for each tool step, the time from its step.started to the next
// step.started (both stamped by the orchestrator's clock when it decided
// them) minus the time the model and the tool calls took, timed where they
// run.
func (b *run) overhead(ctx context.Context, sz sizes) error {
	s, err := startServer(ctx, b.log)
	if err != nil {
		return err
	}
	defer s.stop()
	s.metrics = b.metrics()
	t := newTimings()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	defer func() {
		cancel()
		_ = g.Wait()
	}()
	if err := s.startWorker(gctx, g, b.log, t); err != nil {
		return err
	}
	if err := s.startOrchestrator(gctx, g, b.log, t); err != nil {
		return err
	}
	w, err := watch(s.nc)
	if err != nil {
		return err
	}
	defer w.stop()
	const warmup = 2
	var turns []string
	for i := range sz.overheadTurns + warmup {
		turn := fmt.Sprintf("overhead-%d", i)
		if err := submit(ctx, s.js, turn, script(turn, sz.overheadSteps, 0)); err != nil {
			return err
		}
		if err := w.until(ctx, time.Minute, "turn "+turn, func() bool {
			st := w.turns[turn]
			return st != nil && st.finished
		}); err != nil {
			return err
		}
		if i >= warmup {
			turns = append(turns, turn)
		}
	}
	store, err := logstore.New(ctx, s.js)
	if err != nil {
		return err
	}
	var over, total []time.Duration
	for _, turn := range turns {
		starts, err := stepStarts(ctx, store, turn)
		if err != nil {
			return err
		}
		for step := 1; step < sz.overheadSteps; step++ {
			from, ok1 := starts[step]
			to, ok2 := starts[step+1]
			m, ok3 := t.get(fmt.Sprintf("model:%s:%d", turn, step))
			tool, ok4 := t.get("tool:" + echoText(turn, step))
			if !ok1 || !ok2 || !ok3 || !ok4 {
				return fmt.Errorf("turn %s: step %d was not measured", turn, step)
			}
			total = append(total, to.Sub(from))
			over = append(over, to.Sub(from)-m-tool)
		}
	}
	b.res.StepOverheadSamples = len(over)
	b.res.StepOverheadP50Ms, b.res.StepOverheadP99Ms = ms(percentile(over, 0.5)), ms(percentile(over, 0.99))
	b.res.StepTotalP50Ms, b.res.StepTotalP99Ms = ms(percentile(total, 0.5)), ms(percentile(total, 0.99))
	return nil
}

// checkLog checks a turn's log's invariants (events.CheckLog) and that the
// machine would have written it, and that the turn completed.
func checkLog(log []events.Envelope) error {
	if err := events.CheckLog(log); err != nil {
		return err
	}
	if _, err := fsm.Verify(log); err != nil {
		return err
	}
	st, err := fsm.Fold(log)
	if err != nil {
		return err
	}
	if !st.Done() || st.Finished.StopReason != events.StopCompleted {
		return fmt.Errorf("turn %s did not complete", st.TurnID)
	}
	return nil
}

// stepStarts reads a turn's log, checks it, and returns when each of its
// steps started, by step.
func stepStarts(ctx context.Context, store *logstore.Store, turn string) (map[int]time.Time, error) {
	log, _, err := store.Read(ctx, turn)
	if err != nil {
		return nil, err
	}
	if err := checkLog(log); err != nil {
		return nil, fmt.Errorf("turn %s: %w", turn, err)
	}
	starts := map[int]time.Time{}
	for _, e := range log {
		if e.Type == events.StepStarted {
			starts[e.Step] = e.Time
		}
	}
	return starts, nil
}
