package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// ServeOrchestrator is the orchestrator process the benchmark starts: the
// stock orchestrator with its default settings, and scripts allowed, on the
// server at url, until SIGTERM or SIGINT. It writes a CPU profile and an
// allocation profile of its whole life when asked to.
func ServeOrchestrator(url, agentsPath, cpuProfile, allocProfile string, withMetrics bool, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	set, _, err := agents.Load(agentsPath)
	if err != nil {
		return err
	}
	nc, err := bus.Connect(url, "jetloop bench orchestrator", func(err error) { log.Warn("nats", "err", err) })
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The benchmark's submissions carry their scripts.
	var m *metrics.Metrics
	if withMetrics {
		m = metrics.New()
	}
	o, err := orchestrator.New(nc, js, log, set, orchestrator.WithAllowScripts(true), orchestrator.WithMetrics(m))
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	err = o.Run(ctx)
	if allocProfile != "" {
		f, ferr := os.Create(allocProfile)
		if ferr != nil {
			return ferr
		}
		defer f.Close()
		if ferr := pprof.Lookup("allocs").WriteTo(f, 0); ferr != nil {
			return ferr
		}
	}
	return err
}

// loadSite is a server, a tool worker in this process and an orchestrator
// process: the production layout, on one machine.
type loadSite struct {
	*site
	orch   *child
	cancel context.CancelFunc
	g      *errgroup.Group
	w      *watcher
}

func (b *run) startLoad(ctx context.Context, extra ...string) (*loadSite, error) {
	s, err := startServer(ctx, b.log)
	if err != nil {
		return nil, err
	}
	s.metrics = b.metrics()
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	l := &loadSite{site: s, cancel: cancel, g: g}
	if err := s.startWorker(gctx, g, b.log, newTimings()); err != nil {
		l.stop()
		return nil, err
	}
	if l.w, err = watch(s.nc); err != nil {
		l.stop()
		return nil, err
	}
	if l.orch, err = b.spawn(s, extra...); err != nil {
		l.stop()
		return nil, err
	}
	if err := stack.WaitServing(ctx, s.js); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

func (l *loadSite) stop() {
	if l.orch != nil {
		_ = l.orch.stop()
	}
	if l.w != nil {
		l.w.stop()
	}
	l.cancel()
	_ = l.g.Wait()
	l.site.stop()
}

// throughput runs N turns of K steps with C of them in flight at any time,
// for each C, against an orchestrator process whose CPU time it reads from
// /proc.
func (b *run) throughput(ctx context.Context, sz sizes) error {
	for _, c := range sz.concurrency {
		t, err := b.throughputAt(ctx, sz, c)
		if err != nil {
			return err
		}
		b.res.Throughput = append(b.res.Throughput, t)
		b.res.StepsPerS, b.res.TurnsPerS, b.res.CPUSPerStep = t.StepsPerS, t.TurnsPerS, t.CPUSPerStep
		fmt.Fprintf(b.cfg.Progress, "bench:   %d×%d at %d: %.0f steps/s\n", t.Turns, sz.steps, c, t.StepsPerS)
	}
	return nil
}

func (b *run) throughputAt(ctx context.Context, sz sizes, c int) (Throughput, error) {
	var extra []string
	if b.cfg.ProfileDir != "" {
		extra = []string{"--cpuprofile", b.profilePath("cpu", c), "--allocprofile", b.profilePath("allocs", c)}
	}
	l, err := b.startLoad(ctx, extra...)
	if err != nil {
		return Throughput{}, err
	}
	defer l.stop()
	slots := make(chan struct{}, c)
	steps := 0
	l.w.onFinish = func(string, seen) { <-slots }
	cpu0, err := cpu(l.orch.pid())
	if err != nil {
		return Throughput{}, err
	}
	if b.cfg.ProfileDir != "" {
		// This process's profile: the server and the tool worker.
		f, err := os.Create(filepath.Join(b.cfg.ProfileDir, fmt.Sprintf("server-worker-c%d.cpu.pprof", c)))
		if err != nil {
			return Throughput{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	self0 := selfCPU()
	began := time.Now()
	for i := range sz.throughputTurns {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return Throughput{}, ctx.Err()
		}
		turn := fmt.Sprintf("load-%d", i)
		if err := submit(ctx, l.js, turn, script(turn, sz.steps, 0)); err != nil {
			return Throughput{}, err
		}
	}
	werr := l.w.until(ctx, 5*time.Minute, "every turn to finish", func() bool { return l.w.finished >= sz.throughputTurns })
	elapsed := time.Since(began)
	cpu1, err := cpu(l.orch.pid())
	if err != nil {
		return Throughput{}, err
	}
	self1 := selfCPU()
	t := Throughput{Turns: sz.throughputTurns, Concurrency: c, Seconds: elapsed.Seconds()}
	for _, s := range l.w.snapshot() {
		steps += s.steps
		if !s.finished || s.stop != events.StopCompleted {
			t.Unfinished++
		}
	}
	if werr != nil {
		b.log.Warn("throughput run cut short", "err", werr)
	}
	t.Steps = steps
	t.StepsPerS = float64(steps) / elapsed.Seconds()
	t.TurnsPerS = float64(sz.throughputTurns-t.Unfinished) / elapsed.Seconds()
	t.CPUSPerStep = (cpu1 - cpu0).Seconds() / float64(max(steps, 1))
	t.OtherCPUSPerStep = (self1 - self0).Seconds() / float64(max(steps, 1))
	return t, nil
}

// memory pauses many turns on ask_user and reads the orchestrator process's
// resident memory before and after.
func (b *run) memory(ctx context.Context, sz sizes) error {
	l, err := b.startLoad(ctx)
	if err != nil {
		return err
	}
	defer l.stop()
	before, err := rss(l.orch.pid())
	if err != nil {
		return err
	}
	// Submissions go out in windows, as many clients would send them.
	const window = 500
	for i := 0; i < sz.paused; i += window {
		var futures []jetstream.PubAckFuture
		for j := i; j < min(i+window, sz.paused); j++ {
			turn := fmt.Sprintf("paused-%d", j)
			data, err := submission(turn, askScript())
			if err != nil {
				return err
			}
			f, err := l.js.PublishAsync(events.SubjectSubmit, data, jetstream.WithMsgID(turn))
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := l.w.until(ctx, 5*time.Minute, "every turn to pause", func() bool { return l.w.paused >= sz.paused }); err != nil {
		return fmt.Errorf("%w (%d of %d paused)", err, l.w.paused, sz.paused)
	}
	after, err := rss(l.orch.pid())
	if err != nil {
		return err
	}
	b.res.PausedTurns, b.res.RSSBeforeBytes, b.res.RSSPausedBytes = sz.paused, before, after
	b.res.BytesPerPausedTurn = float64(after-before) / float64(sz.paused)
	return nil
}

// recovery kills the orchestrator process while turns are in flight, starts
// another, and measures how long until every unfinished turn gets a new
// event; then it waits for every turn to finish and checks every log.
func (b *run) recovery(ctx context.Context, sz sizes) error {
	l, err := b.startLoad(ctx)
	if err != nil {
		return err
	}
	defer l.stop()
	const steps = 20
	// A model that takes 20 ms keeps the turns in flight long enough to be
	// caught mid-way.
	for i := range sz.recoveryTurns {
		turn := fmt.Sprintf("crash-%d", i)
		if err := submit(ctx, l.js, turn, script(turn, steps, 20*time.Millisecond)); err != nil {
			return err
		}
	}
	if err := l.w.until(ctx, 2*time.Minute, "every turn to be under way", func() bool {
		if len(l.w.turns) < sz.recoveryTurns {
			return false
		}
		for _, s := range l.w.turns {
			if s.steps < 3 {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	killed := time.Now()
	l.orch.kill()
	// Events the dead process sent are in by now: only the new one's count.
	l.w.setMark(time.Now())
	l.orch = nil
	if l.orch, err = b.spawn(l.site); err != nil {
		return err
	}
	var waiting []string
	for turn, s := range l.w.snapshot() {
		if !s.finished {
			waiting = append(waiting, turn)
		}
	}
	b.res.RecoveryTurns = len(waiting)
	if err := l.w.until(ctx, time.Minute, "every turn to progress after the restart", func() bool {
		for _, turn := range waiting {
			if l.w.turns[turn].after.IsZero() {
				return false
			}
		}
		return true
	}); err != nil {
		b.log.Warn("recovery cut short", "err", err)
	}
	now := l.w.snapshot()
	for _, turn := range waiting {
		s := now[turn]
		if s.after.IsZero() {
			s.after = time.Now() // never progressed: at least this long
		}
		b.res.RecoveryS = max(b.res.RecoveryS, s.after.Sub(killed).Seconds())
	}
	_ = l.w.until(ctx, time.Minute, "every turn to finish", func() bool { return l.w.finished >= sz.recoveryTurns })
	store, err := logstore.New(ctx, l.js)
	if err != nil {
		return err
	}
	for i := range sz.recoveryTurns {
		turn := fmt.Sprintf("crash-%d", i)
		log, _, err := store.Read(ctx, turn)
		switch {
		case err != nil:
			return err
		case len(log) == 0 || log[len(log)-1].Type != events.TurnFinished:
			b.res.TurnsLost++
			if len(log) > 0 {
				last := log[len(log)-1]
				b.log.Warn("turn lost", "turn", turn, "last", last.Type, "step", last.Step, "seq", last.Seq)
			}
		default:
			if err := checkLog(log); err != nil {
				b.log.Warn("broken log", "turn", turn, "err", err)
				b.res.LogsBroken++
			}
		}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	return nil
}
