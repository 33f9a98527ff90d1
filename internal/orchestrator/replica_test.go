package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/nats-io/nats.go/jetstream"
)

// gated is the scripted model whose first call of its step waits until
// release is closed; it counts the calls of each turn's steps.
type gated struct {
	model.Scripted
	step             int
	entered, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	calls            map[string]int
}

func newGated(step int) *gated {
	return &gated{step: step, entered: make(chan struct{}), release: make(chan struct{}), calls: map[string]int{}}
}

func (g *gated) Call(ctx context.Context, req model.Request, emit func(string)) (model.Response, error) {
	g.mu.Lock()
	g.calls[fmt.Sprintf("%s/%d", req.TurnID, req.Step)]++
	g.mu.Unlock()
	first := false
	if req.Step == g.step {
		g.once.Do(func() { first = true })
	}
	if first {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			return model.Response{}, ctx.Err()
		}
	}
	return g.Scripted.Call(ctx, req, emit)
}

func (g *gated) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[key]
}

// TestStartingReplicaLeavesRunningCallsAlone starts a second orchestrator
// while the first is in a model call of a turn whose partition moves to the
// newcomer (made in the first's process: the submission's call in step 1,
// a tool result's in step 2): the first is alive, so the newcomer must not
// make the call again (it would run twice); the first sends its answer
// through the inbox, and the newcomer finishes the turn.
func TestStartingReplicaLeavesRunningCallsAlone(t *testing.T) {
	for _, step := range []int{1, 2} {
		t.Run(fmt.Sprintf("step %d", step), func(t *testing.T) { startingReplicaLeavesRunningCallsAlone(t, step) })
	}
}

func startingReplicaLeavesRunningCallsAlone(t *testing.T, step int) {
	h := newHarness(t)
	h.worker()
	// The harness names its orchestrators orchestrator-1, -2, …: pick a
	// turn whose partition the second takes from the first.
	turn := turnOwnedBy(fmt.Sprintf("t-replica-%d", step), 1)
	g := newGated(step)
	first, _, _ := h.running(orchestrator.WithModelRunners(1), orchestrator.WithProvider("script", g))
	h.submit(script(turn, "General", `{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"text": "one answer"}]}`))
	<-g.entered

	second, _, _ := h.running(orchestrator.WithModelRunners(1), orchestrator.WithProvider("script", g))
	p := bus.Partition(turn)
	h.waitFor("the turn's partition to move to the newcomer", func() bool {
		return slices.Contains(second.Partitions(), p) && !slices.Contains(first.Partitions(), p)
	})
	close(g.release)
	if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if n := g.count(fmt.Sprintf("%s/%d", turn, step)); n != 1 {
		t.Fatalf("the model call ran %d times", n)
	}
}

// turnOwnedBy returns a turn id starting with prefix whose partition the
// harness's orchestrator i (0 or 1) owns when both of the first two run.
func turnOwnedBy(prefix string, i int) string {
	both := []string{"orchestrator-1", "orchestrator-2"}
	for n := 0; ; n++ {
		if id := fmt.Sprintf("%s-%d", prefix, n); bus.Owner(bus.Partition(id), both) == both[i] {
			return id
		}
	}
}

// TestAStartDecidedAgainElsewhereLeavesItsCallAlone sends a submission
// again while the owner of its turn makes the turn's first model call in
// its process, until an orchestrator that does not own the turn has
// decided it again. That one cannot tell a call made in another process
// from a job never published: it must not publish the call's job (a runner
// of its own would make the call a second time), but ask the owner, which
// made the call, to look at the turn.
func TestAStartDecidedAgainElsewhereLeavesItsCallAlone(t *testing.T) {
	h := newHarness(t)
	h.worker()
	turn := turnOwnedBy("t-again-elsewhere", 0)
	g := newGated(1)
	mOwner, m := metrics.New(), metrics.New()
	owner, _, _ := h.running(orchestrator.WithModelRunners(1), orchestrator.WithProvider("script", g), orchestrator.WithMetrics(mOwner))
	sub := script(turn, "General", `{"responses": [{"text": "one answer"}]}`)
	h.submit(sub)
	<-g.entered

	// More runners than the owner's: a job published for the call would
	// most likely be pulled by one of the other's, which has no record of
	// the call.
	other, _, _ := h.running(orchestrator.WithModelRunners(4), orchestrator.WithProvider("script", g), orchestrator.WithMetrics(m))
	h.waitFor("the partitions to settle", func() bool {
		return len(owner.Partitions())+len(other.Partitions()) == bus.Partitions && slices.Contains(owner.Partitions(), bus.Partition(turn))
	})
	data, err := json.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	submits := func(m *metrics.Metrics) float64 { return labeled(t, m, "jetloop_inputs_total", "kind", "submit") }
	for i := 0; submits(m) == 0; i++ {
		if i == 50 {
			t.Fatal("the other orchestrator took none of 50 copies of the submission")
		}
		h.publish(events.SubjectSubmit, data, fmt.Sprintf("%s-again-%d", turn, i))
		h.waitFor("the copy to be handled", func() bool { return submits(mOwner)+submits(m) >= float64(i+2) })
	}
	// A model job published for the call would be run by now (the gate
	// holds the first call only), or be held by the owner's runner, which
	// waits for the call it makes: none may be pending or in flight.
	ctx := context.Background()
	jobs, err := h.js.Consumer(ctx, events.StreamJobs, bus.ModelConsumer)
	if err != nil {
		t.Fatal(err)
	}
	h.waitFor("no model job pending or running", func() bool {
		info, err := jobs.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	close(g.release)
	if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if n := g.count(turn + "/1"); n != 1 {
		t.Fatalf("the model call ran %d times", n)
	}
}

// labeled sums a counter of a registry over the series with label = value
// (over every series when label is "").
func labeled(t *testing.T, m *metrics.Metrics, name, label, value string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, c := range f.GetMetric() {
			match := label == ""
			for _, l := range c.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				total += c.GetCounter().GetValue()
			}
		}
	}
	return total
}

// counterTotal sums a counter of a registry over its labels.
func counterTotal(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	return labeled(t, m, name, "", "")
}

// TestPartitionedOrchestrators runs three orchestrators: they own disjoint
// partitions that cover the inbox, turns run with no append conflict (no
// input is handled by two at once), and when one dies its partitions move
// to the others, which finish its turns.
func TestPartitionedOrchestrators(t *testing.T) {
	h := newHarness(t)
	h.worker()
	ms := []*metrics.Metrics{metrics.New(), metrics.New(), metrics.New()}
	var orchs []*orchestrator.Orchestrator
	var kills []func()
	for _, m := range ms {
		o, _, kill := h.running(orchestrator.WithMetrics(m))
		orchs = append(orchs, o)
		kills = append(kills, kill)
	}
	split := func(live []*orchestrator.Orchestrator) bool {
		seen := map[int]int{}
		for _, o := range live {
			for _, p := range o.Partitions() {
				seen[p]++
			}
		}
		for p := range bus.Partitions {
			if seen[p] != 1 {
				return false
			}
		}
		return true
	}
	h.waitFor("the partitions split among the three", func() bool {
		return split(orchs) && len(orchs[0].Partitions()) > 0 && len(orchs[1].Partitions()) > 0 && len(orchs[2].Partitions()) > 0
	})
	const echoTwice = `{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"tool_calls": [{"name": "echo", "arguments": {"text": "b"}}]}, {"text": "done"}]}`
	for i := range 48 {
		h.submit(script(fmt.Sprintf("part-%d", i), "General", echoTwice))
	}
	for i := range 48 {
		if _, f := h.finished(fmt.Sprintf("part-%d", i)); f.StopReason != events.StopCompleted {
			t.Fatalf("part-%d: %+v", i, f)
		}
	}
	for i, m := range ms {
		if n := counterTotal(t, m, "jetloop_append_conflicts_total"); n != 0 {
			t.Errorf("orchestrator %d: %v append conflicts in steady state", i+1, n)
		}
	}

	// One dies without a word: its key expires, the others take its
	// partitions over and finish the turns it held.
	lost := orchs[2].Partitions()
	kills[2]()
	for i := range 24 {
		h.submit(script(fmt.Sprintf("after-%d", i), "General", echoTwice))
	}
	h.waitFor("the dead one's partitions taken over", func() bool { return split(orchs[:2]) })
	for i := range 24 {
		if _, f := h.finished(fmt.Sprintf("after-%d", i)); f.StopReason != events.StopCompleted {
			t.Fatalf("after-%d: %+v", i, f)
		}
	}
	if h.calls.max() > 1 {
		t.Fatal("a tool call ran twice")
	}
	t.Logf("partitions %v moved from the dead orchestrator", lost)
}

// TestOwnedTurnsCallTheModelWithoutAJob runs turns on an orchestrator that
// owns every partition: their model calls, the submissions' first ones
// included, are made in its process and their answers applied there, so no
// model job is delivered, and only the tool calls go through the jobs
// stream.
func TestOwnedTurnsCallTheModelWithoutAJob(t *testing.T) {
	h := newHarness(t).start()
	const echoTwice = `{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"tool_calls": [{"name": "echo", "arguments": {"text": "b"}}]}, {"text": "done"}]}`
	for i := range 8 {
		h.submit(script(fmt.Sprintf("own-%d", i), "General", echoTwice))
	}
	for i := range 8 {
		if _, f := h.finished(fmt.Sprintf("own-%d", i)); f.StopReason != events.StopCompleted || f.Metrics.ToolCalls != 2 {
			t.Fatalf("own-%d: %+v", i, f)
		}
	}
	ctx := context.Background()
	model, err := h.js.Consumer(ctx, events.StreamJobs, bus.ModelConsumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := model.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 0 {
		t.Fatalf("%d model jobs delivered for 24 model calls of 8 turns made in-process", info.Delivered.Consumer)
	}
	echo, err := h.js.Consumer(ctx, events.StreamJobs, "tool_echo")
	if err != nil {
		t.Fatal(err)
	}
	if info, err = echo.Info(ctx); err != nil || info.Delivered.Consumer != 16 {
		t.Fatalf("echo jobs delivered: %+v (%v), want 16", info.Delivered, err)
	}
}

// slowRetry is the scripted model whose first attempt of step 2's call
// fails with a rate limit that asks for a long wait; it counts each turn's
// calls by step and attempt.
type slowRetry struct {
	model.Scripted
	mu    sync.Mutex
	calls map[string]int
}

func (m *slowRetry) Call(ctx context.Context, req model.Request, emit func(string)) (model.Response, error) {
	m.mu.Lock()
	m.calls[fmt.Sprintf("%s/%d/%d", req.TurnID, req.Step, req.Attempt)]++
	m.mu.Unlock()
	if req.Step == 2 && req.Attempt == 1 {
		return model.Response{}, &model.Error{Kind: model.RateLimited, Message: "slow down", RetryAfter: 3 * time.Second}
	}
	return m.Scripted.Call(ctx, req, emit)
}

func (m *slowRetry) count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[key]
}

// TestADecisionTakenAgainLeavesItsCallAlone takes a decision again while a
// model call this process began (step 2's) waits for its retry: the turn's
// state is folded anew (evicted from a cache of one per shard) and its
// submission sent again. The call is not made again.
func TestADecisionTakenAgainLeavesItsCallAlone(t *testing.T) {
	h := newHarness(t)
	h.worker()
	m := &slowRetry{calls: map[string]int{}}
	h.orchestrator(orchestrator.WithCacheSize(1), orchestrator.WithProvider("script", m))
	const turn = "t-again"
	// Another turn in the same shard (16 of them, by FNV-1a of the id)
	// evicts it from the cache.
	shardOf := func(id string) uint32 {
		f := fnv.New32a()
		f.Write([]byte(id))
		return f.Sum32() % 16
	}
	other := ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("t-evict-%d", i); shardOf(id) == shardOf(turn) {
			other = id
		}
	}
	// The scripted model answers attempt n of a step with its response
	// n-1 further on.
	const answer = `{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"text": "not asked"}, {"text": "done"}]}`
	sub := script(turn, "General", answer)
	h.submit(sub)
	h.waitFor("step 2's first attempt", func() bool { return m.count(turn+"/2/1") == 1 })
	h.submit(script(other, "General", answer))
	h.waitFor("the other turn's step 2", func() bool { return m.count(other+"/2/1") == 1 })
	data, err := json.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	h.publish(events.SubjectSubmit, data, turn+"-again")
	if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if n := m.count(turn + "/2/1"); n != 1 {
		t.Fatalf("step 2's first attempt was made %d times", n)
	}
}

// TestAModelJobAheadOfItsLogComesAgain gives a model runner the job of a
// turn's step 2 while the turn's log, as the runner reads it, still waits
// in step 1: on a cluster, a read a follower answers can end before the
// events that asked for the call. The runner must not take the job for a
// call nobody waits for and drop it: the turn would wait for ever on a job
// that was stored once (the owner's own publish of it is a duplicate). It
// comes again, and is made once the log shows step 2.
func TestAModelJobAheadOfItsLogComesAgain(t *testing.T) {
	h := newHarness(t)
	h.worker()
	// The turn's owner runs no model calls, so each is a job that the
	// other orchestrator's runner reads the turn's log for.
	turn := turnOwnedBy("t-ahead", 0)
	owner, _, _ := h.running(orchestrator.WithModelRunners(0))
	other, _, _ := h.running(orchestrator.WithModelRunners(1))
	p := bus.Partition(turn)
	h.waitFor("the partitions to settle", func() bool {
		return slices.Contains(owner.Partitions(), p) && !slices.Contains(other.Partitions(), p)
	})
	h.submit(script(turn, "Gated", `{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"text": "done"}]}`))
	paused := h.waitType(turn, events.TurnPaused)

	// Step 2's job, published as its owner will publish it once step 2
	// starts, and the id with it.
	data, err := json.Marshal(events.ModelJobRef{TurnID: turn, SessionID: turn, Step: 2, Kind: events.ModelStep})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := h.js.Publish(ctx, events.SubjectModel, data, jetstream.WithMsgID("model:"+turn+":2"))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := h.js.Consumer(ctx, events.StreamJobs, bus.ModelConsumer)
	if err != nil {
		t.Fatal(err)
	}
	h.waitFor("the runner to have the early job", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream >= ack.Sequence
	})
	if h.last(turn) != events.TurnPaused {
		t.Fatalf("the turn moved on before its approval: %s", h.last(turn))
	}

	var pd events.TurnPausedData
	if err := json.Unmarshal(paused.Data, &pd); err != nil {
		t.Fatal(err)
	}
	approved := true
	h.control(turn, events.Control{Action: events.ActionApprove, CallID: pd.CallID, Approved: &approved})
	if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted || fin.Output != "done" {
		t.Fatalf("finished %+v", fin)
	}
}
