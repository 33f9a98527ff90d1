package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/lazyfs"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// syncGroup is where synced writes go: a stream (a KV bucket is its
// stream, KV_NAME) and a kind of file in its directory.
type syncGroup struct{ stream, kind string }

// The kinds of file a stream's synced writes go to.
const (
	kindBlocks    = "message blocks"       // msgs/N.blk: messages and tombstones
	kindConsumer  = "consumer state"       // obs/NAME/o.dat: delivered and acknowledged
	kindStreamDir = "directories"          // the stream's, msgs/, obs/NAME/: renames and new files made durable
	kindMeta      = "stream/consumer meta" // meta.inf, meta.sum: configurations
	kindIndex     = "stream state"         // msgs/index.db
)

// classify names the group of a synced path in the server's store, as
// lazyfs counts it: .../streams/STREAM/msgs/1.blk and so on. A file
// written whole is synced as NAME.tmp, then renamed: it counts as NAME.
func classify(p string) syncGroup {
	p = strings.TrimSuffix(p, ".tmp")
	parts := strings.Split(p, "/")
	i := slices.Index(parts, "streams")
	if i < 0 || i+1 >= len(parts) {
		return syncGroup{"(server)", p}
	}
	stream, rest := parts[i+1], parts[i+2:]
	switch {
	case len(rest) == 0, len(rest) == 1 && (rest[0] == "msgs" || rest[0] == "obs"),
		len(rest) == 2 && rest[0] == "obs":
		return syncGroup{stream, kindStreamDir}
	case len(rest) == 2 && rest[0] == "msgs" && strings.HasSuffix(rest[1], ".blk"):
		return syncGroup{stream, kindBlocks}
	case len(rest) == 2 && rest[0] == "msgs" && rest[1] == "index.db":
		return syncGroup{stream, kindIndex}
	case len(rest) == 3 && rest[0] == "obs" && rest[2] == "o.dat":
		return syncGroup{stream, kindConsumer}
	case rest[len(rest)-1] == "meta.inf" || rest[len(rest)-1] == "meta.sum":
		return syncGroup{stream, kindMeta}
	}
	return syncGroup{stream, path.Join(rest...)}
}

// Ceilings of synced writes (fsyncs, fdatasyncs, O_SYNC writes) per tool
// step, by stream and kind of file, at today's counts on turns of ten echo
// steps run one at a time (TestSyncsPerStep), with room for rounding only:
// a change that adds a synced write to a step fails the test, and one that
// removes writes lowers its ceiling. The direction is at most 2 synced
// writes in series and 3 in all per tool step (BENCHMARKS.md, "What a step
// syncs").
const (
	// The call's decision and the result's decision, one message each, and
	// the turn's submission, start and end spread over its ten steps.
	maxEventsBlocks = 2.2
	// The turn's submission and the tombstone its acknowledgement writes,
	// spread over its steps: a result handed to its turn's owner directly
	// is stored in the log alone (the worker's handOver).
	maxInboxBlocks = 0.2
	// The index of unfinished turns: a put at a turn's start and a delete
	// at its end.
	maxLiveBlocks = 0.2
	// The inbox consumers' state files, each written with O_SYNC and its
	// directory fsynced after the rename: at most one write per delivery
	// and one per acknowledgement (each kicks the consumer's flusher) of
	// the 0.1 inputs of a step (its turn's submission), and at most ten a
	// second per consumer (nats-server's consumerFileStore.flushLoop), so
	// how many there are below this depends on how long the steps take
	// (boundConsumers).
	maxInboxConsumerState = 0.2
	maxInboxDirs          = maxInboxConsumerState
)

// maxConsumersPerTurn is how many of the inbox's durable consumers one
// turn's inputs move: the shared one (its submission) and its partition's
// (its results).
const maxConsumersPerTurn = 2

// stepCeilings are the ceilings per tool step by group. A group missing
// here that a step syncs is a new synced write: it fails the test.
var stepCeilings = map[syncGroup]float64{
	{events.StreamEvents, kindBlocks}:    maxEventsBlocks,
	{events.StreamInbox, kindBlocks}:     maxInboxBlocks,
	{"KV_" + bus.BucketLive, kindBlocks}: maxLiveBlocks,
	{events.StreamInbox, kindConsumer}:   maxInboxConsumerState,
	{events.StreamInbox, kindStreamDir}:  maxInboxDirs,
}

// presence are the buckets written on a timer, not per step: each live
// orchestrator, tool and worker refreshes its key every third of its TTL.
var presence = map[string]time.Duration{
	"KV_" + bus.BucketOrchestrators: bus.OrchestratorsTTL / 3,
	"KV_" + events.BucketTools:      bus.ToolsTTL / 3,
	"KV_" + bus.BucketWorkers:       bus.ToolsTTL / 3,
}

// syncCount is what a run of turns synced.
type syncCount struct {
	toolSteps, turns int
	// elapsed is the turns' time; window the time between the two counts
	// (the turns, then the wait for the writes to settle).
	elapsed, window time.Duration
	by              map[syncGroup]int
	// consumers are the inbox consumers' state writes, by consumer.
	consumers map[string]int
}

func (c syncCount) per(g syncGroup) float64 { return float64(c.by[g]) / float64(c.toolSteps) }

func (c syncCount) total(keep func(syncGroup) bool) int {
	n := 0
	for g, v := range c.by {
		if keep(g) {
			n += v
		}
	}
	return n
}

// perStep reports whether a group's writes come with the steps, rather
// than on a timer.
func perStep(g syncGroup) bool {
	_, timed := presence[g.stream]
	return !timed
}

// table prints the counts per tool step, by stream and kind of file, then
// by stream.
func (c syncCount) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stream\tfile\tsynced writes\tper tool step\t\n")
	groups := slices.SortedFunc(maps.Keys(c.by), func(a, b syncGroup) int {
		return strings.Compare(a.stream+"\x00"+a.kind, b.stream+"\x00"+b.kind)
	})
	streams := map[string]int{}
	for _, g := range groups {
		streams[g.stream] += c.by[g]
		kind := g.kind
		if !perStep(g) {
			kind += ", on a timer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t\n", g.stream, kind, c.by[g], c.per(g))
	}
	for _, s := range slices.Sorted(maps.Keys(streams)) {
		fmt.Fprintf(tw, "%s\tall\t%d\t%.2f\t\n", s, streams[s], float64(streams[s])/float64(c.toolSteps))
	}
	n := c.total(perStep)
	fmt.Fprintf(tw, "all but presence\tall\t%d\t%.2f\t\n", n, float64(n)/float64(c.toolSteps))
	_ = tw.Flush()
	return b.String()
}

// countSyncs runs an embedded server with the shipped durability (sync
// always) whose store is on a filesystem that counts syncs
// (internal/lazyfs), with an in-process orchestrator and tool worker, and
// counts what turns of ten echo steps and an answer sync, run one at a time
// after a warm-up turn. It skips where FUSE cannot be mounted (fails under
// CI=true).
func countSyncs(t testing.TB, turns int) syncCount {
	t.Helper()
	if err := lazyfs.Supported(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skipf("%v: counting syncs needs it", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mnt := t.TempDir()
	fsys, err := lazyfs.Mount(t.TempDir(), mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := fsys.Unmount(); err != nil {
			t.Error(err)
		}
	}()
	s, err := startServerOn(ctx, discard(), filepath.Join(mnt, "js"))
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
	live, err := s.js.KeyValue(ctx, bus.BucketLive)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 11
	turn := func(id string) {
		t.Helper()
		if err := submit(ctx, s.js, id, script(id, steps, 0)); err != nil {
			t.Fatal(err)
		}
		if err := w.until(ctx, time.Minute, id, func() bool { st := w.turns[id]; return st != nil && st.finished }); err != nil {
			t.Fatal(err)
		}
	}
	// settled returns the counts once the turns' every write is in: the
	// index is empty (a turn leaves it after its last event is stored) and
	// nothing was synced for half a second, five times the longest a
	// consumer's state waits to be written.
	settled := func() map[string]int {
		t.Helper()
		testkit.WaitFor(t, "the index to be empty", func() bool {
			_, err := live.Keys(ctx)
			return errors.Is(err, jetstream.ErrNoKeysFound)
		})
		last, since := fsys.Fsyncs(), time.Now()
		testkit.WaitFor(t, "the syncs to settle", func() bool {
			now := fsys.Fsyncs()
			if !maps.Equal(now, last) {
				last, since = now, time.Now()
			}
			return time.Since(since) >= 500*time.Millisecond
		})
		return last
	}
	turn("warm")
	before := settled()
	began := time.Now()
	for i := range turns {
		turn(fmt.Sprintf("count-%d", i))
	}
	elapsed := time.Since(began)
	after := settled()
	c := syncCount{toolSteps: turns * (steps - 1), turns: turns, elapsed: elapsed, window: time.Since(began),
		by: map[syncGroup]int{}, consumers: map[string]int{}}
	for p, n := range after {
		d := n - before[p]
		if d <= 0 {
			continue
		}
		g := classify(p)
		c.by[g] += d
		if g.stream == events.StreamInbox && g.kind == kindConsumer {
			c.consumers[path.Base(path.Dir(p))] += d
		}
	}
	return c
}

// TestSyncsPerStep counts the synced writes a tool step makes, by stream
// and kind of file, as the server makes them under sync always: what
// TestStoredMessagesPerStep's stored messages undercount (tombstones,
// consumer state, directories). Three turns of ten echo steps run one at a
// time; each group must stay under its ceiling, and a group with none is a
// new synced write.
func TestSyncsPerStep(t *testing.T) {
	if testing.Short() {
		t.Skip("a server on a FUSE filesystem")
	}
	c := countSyncs(t, 3)
	t.Logf("synced writes per tool step, %d tool steps in %.2f s (sync always, jobs in memory):\n%s", c.toolSteps, c.elapsed.Seconds(), c.table())
	for g, n := range c.by {
		if !perStep(g) {
			continue
		}
		ceiling, ok := stepCeilings[g]
		if !ok {
			t.Errorf("%s %s: %d synced writes, where a step synced nothing before: a new synced write (give it a ceiling if it is meant)", g.stream, g.kind, n)
			continue
		}
		// Room for rounding only: the counts are whole, the ceilings have two decimals.
		if got := c.per(g); got > ceiling+0.005 {
			t.Errorf("%s %s: %.2f synced writes per tool step, ceiling %.2f", g.stream, g.kind, got, ceiling)
		}
	}
	boundConsumers(t, c)
	boundPresence(t, c)
}

// boundConsumers checks the inbox consumers' state writes against what
// nats-server allows them, the part that depends on the steps' time: at
// most ten a second per consumer, and no more consumers than the turns'
// inputs move. Each write fsyncs its directory once, and nothing else does.
func boundConsumers(t *testing.T, c syncCount) {
	t.Helper()
	if n := len(c.consumers); n > maxConsumersPerTurn*c.turns {
		t.Errorf("%d inbox consumers wrote their state for %d turns, want ≤ %d a turn: %v", n, c.turns, maxConsumersPerTurn, c.consumers)
	}
	// The last write of a consumer can come 100 ms after the turns end, and
	// the first as they begin: one write at each end of the span.
	span := c.elapsed + 100*time.Millisecond
	limit := int((span+100*time.Millisecond-1)/(100*time.Millisecond)) + 1
	for name, n := range c.consumers {
		if n > limit {
			t.Errorf("inbox consumer %s wrote its state %d times in %.2f s: nats-server writes it at most ten times a second", name, n, c.elapsed.Seconds())
		}
	}
	state, dirs := c.by[syncGroup{events.StreamInbox, kindConsumer}], c.by[syncGroup{events.StreamInbox, kindStreamDir}]
	if dirs > state {
		t.Errorf("%d directory fsyncs on the inbox, %d consumer state writes: a directory synced for something else", dirs, state)
	}
}

// boundPresence checks the writes on a timer: at most one per key each
// refresh interval (one orchestrator, one tool, one worker here), and one
// more that may fall in the window anywhere.
func boundPresence(t *testing.T, c syncCount) {
	t.Helper()
	for stream, every := range presence {
		limit := int(c.window/every) + 1
		for g, n := range c.by {
			if g.stream == stream && n > limit {
				t.Errorf("%s %s: %d synced writes in %.2f s, want ≤ %d (a refresh every %s)", g.stream, g.kind, n, c.window.Seconds(), limit, every)
			}
		}
	}
}

// BenchmarkSyncsPerStep reports the synced writes per tool step by stream,
// counted as TestSyncsPerStep counts them, over b.N rounds of three turns
// of ten echo steps (make bench runs one), and prints the table.
func BenchmarkSyncsPerStep(b *testing.B) {
	c := countSyncs(b, 3*b.N)
	streams := map[string]int{}
	for g, n := range c.by {
		if perStep(g) {
			streams[g.stream] += n
		}
	}
	for name, n := range streams {
		b.ReportMetric(float64(n)/float64(c.toolSteps), name+"-syncs/step")
	}
	b.ReportMetric(float64(c.total(perStep))/float64(c.toolSteps), "syncs/step")
	// Printed, not logged: a benchmark's log is cut to a few lines.
	fmt.Printf("synced writes per tool step, %d tool steps in %.2f s (sync always, jobs in memory; in-process, the embedded server's store on lazyfs):\n%s",
		c.toolSteps, c.elapsed.Seconds(), c.table())
}
