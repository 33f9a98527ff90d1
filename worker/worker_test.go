package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// hang is a tool whose calls block until their context ends, counting the
// calls that entered and those whose context was cancelled.
type hang struct{ entered, cancelled atomic.Int32 }

func (h *hang) Spec() events.ToolSpec { return events.ToolSpec{Name: "hang", Description: "Blocks."} }

func (h *hang) Call(ctx context.Context, _ json.RawMessage) (tools.Result, error) {
	h.entered.Add(1)
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.Canceled) {
		h.cancelled.Add(1)
	}
	return tools.Result{}, ctx.Err()
}

// flood is a tool whose output is four times the cap.
type flood struct{}

func (flood) Spec() events.ToolSpec { return events.ToolSpec{Name: "flood", Description: "Floods."} }

func (flood) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{Output: strings.Repeat("<&>", worker.MaxOutput*4/3)}, nil
}

// answer is a tool whose result is final, and panics when asked to.
type answer struct{}

func (answer) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "answer", Parameters: json.RawMessage(`{"type":"object","properties":{"panic":{"type":"boolean"}}}`)}
}

func (answer) Call(_ context.Context, args json.RawMessage) (tools.Result, error) {
	if strings.Contains(string(args), "true") {
		panic("asked to")
	}
	return tools.Result{Output: "42", Final: true}, nil
}

type env struct {
	t   *testing.T
	srv *testkit.Server
	js  jetstream.JetStream
}

func newEnv(t *testing.T) *env { return newEnvTTL(t, bus.ToolsTTL) }

// newEnvTTL creates the tools bucket with ttl before anything else does:
// workers follow the TTL of the bucket they find.
func newEnvTTL(t *testing.T, ttl time.Duration) *env {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := js.CreateKeyValue(ctx, bus.ToolsBucket(ttl))
	must(t, err)
	must(t, bus.EnsureStreams(ctx, js))
	return &env{t: t, srv: srv, js: js}
}

// worker runs a worker with the built-ins plus extra tools on its own
// connection; kill closes that connection under it, like a crash.
func (e *env) worker(extra []tools.Tool, opts ...worker.Option) (stop, kill func()) {
	e.t.Helper()
	ts, err := tools.Builtins(e.t.TempDir(), false)
	must(e.t, err)
	return e.serve(opts, func(w *worker.Worker) error { return tools.Register(w, append(ts, extra...)...) })
}

// serve runs a worker with what register registers, and returns once it
// serves.
func (e *env) serve(opts []worker.Option, register func(*worker.Worker) error) (stop, kill func()) {
	e.t.Helper()
	return inproc.Serve(e.t, e.srv, register, opts...)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	testkit.WaitFor(e.t, what, cond)
}

func (e *env) info(tool string) *events.ToolInfo { return testkit.ToolInfo(e.t, e.js, tool) }

func (e *env) job(j events.ToolJob) {
	e.t.Helper()
	testkit.Job(e.t, e.js, j)
}

func (e *env) publish(subject string, data []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := e.js.Publish(ctx, subject, data)
	must(e.t, err)
}

// result waits for the result of a turn's call in the inbox.
func (e *env) result(turn string) events.ToolResult {
	e.t.Helper()
	r, h := testkit.Result(e.t, e.js, turn)
	if id := h.Get(jetstream.MsgIDHeader); !strings.HasPrefix(id, "result:") {
		e.t.Errorf("result published with id %q", id)
	}
	return r
}

func (e *env) noResult(turn string) bool {
	s, err := e.js.Stream(context.Background(), events.StreamInbox)
	must(e.t, err)
	_, err = s.GetLastMsgForSubject(context.Background(), bus.Stored("jetloop.inbox.*."+turn))
	return errors.Is(err, jetstream.ErrMsgNotFound)
}

// pending counts the jobs still in the jobs stream.
func (e *env) pending() uint64 {
	s, err := e.js.Stream(context.Background(), events.StreamJobs)
	must(e.t, err)
	info, err := s.Info(context.Background())
	must(e.t, err)
	return info.State.Msgs
}

func job(turn, tool, args string) events.ToolJob {
	return events.ToolJob{TurnID: turn, SessionID: turn, Step: 1, CallID: "c-" + turn, Tool: tool,
		Arguments: json.RawMessage(args), Deadline: time.Now().Add(time.Minute).UTC()}
}

func TestWorkerAnswersJobsAndAcknowledgesThem(t *testing.T) {
	e := newEnv(t)
	e.worker([]tools.Tool{answer{}}, worker.WithName("w1"))
	e.job(job("t1", "echo", `{"text":"hi"}`))
	r := e.result("t1")
	want := events.ToolResult{TurnID: "t1", CallID: "c-t1", Tool: "echo", Output: "hi", Worker: "w1", Attempt: 1, DurationMs: r.DurationMs}
	if r != want {
		t.Errorf("result = %+v, want %+v", r, want)
	}
	e.job(job("t2", "answer", `{}`))
	if r := e.result("t2"); !r.Final || r.Output != "42" {
		t.Errorf("a final result came back as %+v", r)
	}
	e.job(job("t3", "echo", `{"text":7}`))
	if r := e.result("t3"); !r.IsError || !strings.Contains(r.Output, "invalid arguments for echo") {
		t.Errorf("invalid arguments answered with %+v", r)
	}
	e.job(job("t4", "answer", `{"panic":true}`))
	if r := e.result("t4"); !r.IsError || !strings.Contains(r.Output, "asked to") {
		t.Errorf("a panicking tool answered with %+v", r)
	}
	j := job("t5", "echo", `{"text":"late"}`)
	j.Deadline = time.Now().Add(-time.Second)
	e.job(j)
	if r := e.result("t5"); !r.IsError || !strings.Contains(r.Output, "deadline") {
		t.Errorf("a job past its deadline answered with %+v", r)
	}
	e.waitFor("every job acknowledged", func() bool { return e.pending() == 0 })
}

func TestInvalidJobsAreDeadLettered(t *testing.T) {
	e := newEnv(t)
	e.worker(nil)
	e.publish(events.ToolSubject("echo"), []byte(`{not json`))
	e.publish(events.ToolSubject("echo"), []byte(`{"turn_id":"t1","call_id":"c1","tool":"echo"}`))
	dead := func() []*jetstream.RawStreamMsg { return testkit.Stored(t, e.js, events.StreamDead) }
	e.waitFor("two dead letters", func() bool { return len(dead()) == 2 })
	for _, m := range dead() {
		if m.Subject != "jetloop.dead.job" || !strings.Contains(m.Header.Get(events.HeaderError), "tool_job") && !strings.Contains(m.Header.Get(events.HeaderError), "JSON") {
			t.Errorf("dead letter %s with reason %q", m.Subject, m.Header.Get(events.HeaderError))
		}
	}
	// The second one names its call: the turn hears at once.
	if r := e.result("t1"); !r.IsError || !strings.Contains(r.Output, "invalid job") {
		t.Errorf("result of an invalid job = %+v", r)
	}
	e.waitFor("the bad jobs removed", func() bool { return e.pending() == 0 })
}

func TestCancelStopsRunningCallsOfTheTurn(t *testing.T) {
	e := newEnv(t)
	h := &hang{}
	e.worker([]tools.Tool{h})
	e.job(job("t1", "hang", `{}`))
	e.waitFor("the call to start", func() bool { return h.entered.Load() == 1 })
	nc, _ := e.srv.Connect(t)
	must(t, nc.Publish(events.CancelSubject("t1"), nil))
	e.waitFor("the call's context cancelled", func() bool { return h.cancelled.Load() == 1 })
	e.waitFor("the aborted job acknowledged", func() bool { return e.pending() == 0 })
	if !e.noResult("t1") {
		t.Error("an aborted call was answered")
	}
}

func TestJobOfACrashedWorkerGoesToAnother(t *testing.T) {
	e := newEnv(t)
	h := &hang{}
	_, kill := e.worker([]tools.Tool{h}, worker.WithAckWait(300*time.Millisecond), worker.WithName("a"))
	e.job(job("t1", "hang", `{}`))
	e.waitFor("the call to start", func() bool { return h.entered.Load() == 1 })
	kill()
	// The second worker gets the job after the first one's lease ends, and
	// runs it (attempt 2) until the turn is cancelled.
	e.worker([]tools.Tool{h}, worker.WithAckWait(300*time.Millisecond), worker.WithName("b"))
	e.waitFor("the redelivery", func() bool { return h.entered.Load() == 2 })
}

func TestExhaustedJobsAreAnsweredWithAnError(t *testing.T) {
	e := newEnv(t)
	h := &hang{}
	opts := []worker.Option{worker.WithAckWait(300 * time.Millisecond), worker.WithMaxDeliver(1)}
	_, kill := e.worker([]tools.Tool{h}, append(opts, worker.WithName("a"))...)
	e.worker([]tools.Tool{&hang{}}, append(opts, worker.WithName("b"))...)
	e.job(job("t1", "hang", `{}`))
	e.waitFor("the call to start on a", func() bool { return h.entered.Load() == 1 })
	kill()
	r := e.result("t1")
	if !r.IsError || !strings.Contains(r.Output, "in 1 attempts") || r.Worker != "b" {
		t.Errorf("exhausted job answered with %+v", r)
	}
	e.waitFor("the exhausted job deleted", func() bool { return e.pending() == 0 })
}

func TestRegistryCountsWorkers(t *testing.T) {
	e := newEnv(t)
	stop1, _ := e.worker(nil, worker.WithName("w1"))
	if info := e.info("read_file"); info == nil || info.Workers != 1 || info.TimeoutMs == 0 || len(info.Parameters) == 0 {
		t.Fatalf("read_file advertised as %+v", info)
	}
	stop2, _ := e.worker(nil, worker.WithName("w2"))
	e.waitFor("two workers", func() bool { i := e.info("echo"); return i != nil && i.Workers == 2 })
	stop1()
	e.waitFor("one worker", func() bool { i := e.info("echo"); return i != nil && i.Workers == 1 })
	stop2()
	e.waitFor("the tool withdrawn", func() bool { return e.info("echo") == nil })
}

func TestParallelCallsOfOneTool(t *testing.T) {
	e := newEnv(t)
	h := &hang{}
	e.worker([]tools.Tool{h}, worker.WithConcurrency(3))
	for _, turn := range []string{"p1", "p2", "p3"} {
		e.job(job(turn, "hang", `{}`))
	}
	e.waitFor("three calls at once", func() bool { return h.entered.Load() == 3 })
}

// A worker killed without withdrawing its tools leaves them in the registry
// only until the bucket's TTL passes: its live peers keep theirs, with the
// count of workers corrected, and a tool it alone served disappears.
func TestKilledWorkersToolsExpire(t *testing.T) {
	// Entries are refreshed every third of the TTL: a TTL of 3 s leaves a
	// loaded machine 2 s of stall before a live worker's entry lapses.
	e := newEnvTTL(t, 3*time.Second)
	_, killA := e.worker([]tools.Tool{&hang{}}, worker.WithName("a"))
	e.worker(nil, worker.WithName("b"))
	e.waitFor("two workers of echo", func() bool { i := e.info("echo"); return i != nil && i.Workers == 2 })
	if i := e.info("hang"); i == nil || i.Workers != 1 {
		t.Fatalf("hang advertised as %+v", i)
	}
	killA()
	e.waitFor("hang gone with its only worker", func() bool { return e.info("hang") == nil })
	e.waitFor("echo counted with one worker", func() bool { i := e.info("echo"); return i != nil && i.Workers == 1 })
	if e.info("shell") != nil {
		t.Error("shell advertised by workers without it")
	}
}

// A call longer than the ack wait is heartbeated: its job is delivered once
// while its worker lives.
func TestLongCallsAreNotRedelivered(t *testing.T) {
	e := newEnv(t)
	// Heartbeats come every third of the ack wait: only a stall of more
	// than 1 s on a loaded machine could make this redeliver.
	e.worker(nil, worker.WithAckWait(1500*time.Millisecond), worker.WithName("a"))
	e.worker(nil, worker.WithAckWait(1500*time.Millisecond), worker.WithName("b"))
	e.job(job("t1", "sleep", `{"ms":6000}`)) // four ack waits
	if r := e.result("t1"); r.IsError || r.Output != "slept" || r.Attempt != 1 {
		t.Errorf("a long call answered with %+v", r)
	}
	cons, err := e.js.Consumer(context.Background(), events.StreamJobs, events.ToolConsumer("sleep"))
	must(t, err)
	info, err := cons.Info(context.Background())
	must(t, err)
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("the job was delivered %d times (%d redelivered)", info.Delivered.Consumer, info.NumRedelivered)
	}
}

// Whatever a tool returns, a result carries at most MaxOutput bytes and
// one truncation marker.
func TestResultsAreCapped(t *testing.T) {
	e := newEnv(t)
	e.worker([]tools.Tool{flood{}})
	e.job(job("t1", "flood", `{}`))
	r := e.result("t1")
	if len(r.Output) > worker.MaxOutput || strings.Count(r.Output, "[output truncated: ") != 1 || !strings.HasPrefix(r.Output, "<&><&>") {
		t.Errorf("result of %d bytes ending %q", len(r.Output), r.Output[max(len(r.Output)-80, 0):])
	}
}

// Workers of a tool share its one durable consumer, and each asks only for
// as many jobs as it has free slots: with two workers of two slots and five
// jobs, four run and the fifth waits in the stream, delivered to nobody.
func TestWorkersPullOnlyForFreeSlots(t *testing.T) {
	e := newEnv(t)
	h := &hang{}
	e.worker([]tools.Tool{h}, worker.WithConcurrency(2), worker.WithName("a"))
	e.worker([]tools.Tool{h}, worker.WithConcurrency(2), worker.WithName("b"))
	for i := range 5 {
		e.job(job(fmt.Sprintf("s%d", i), "hang", `{}`))
	}
	e.waitFor("four calls running", func() bool { return h.entered.Load() == 4 })
	cons, err := e.js.Consumer(context.Background(), events.StreamJobs, events.ToolConsumer("hang"))
	must(t, err)
	var info *jetstream.ConsumerInfo
	e.waitFor("the consumer's state", func() bool {
		info, err = cons.Info(context.Background())
		return err == nil && info.NumAckPending == 4
	})
	if info.NumPending != 1 || info.Delivered.Consumer != 4 || h.entered.Load() != 4 {
		t.Errorf("%d waiting, %d delivered, %d entered", info.NumPending, info.Delivered.Consumer, h.entered.Load())
	}
}

// gate is a tool whose calls wait until open is closed, counting them.
type gate struct {
	open    chan struct{}
	entered atomic.Int32
}

func (g *gate) Spec() events.ToolSpec { return events.ToolSpec{Name: "gate", Description: "Waits."} }

func (g *gate) Call(ctx context.Context, _ json.RawMessage) (tools.Result, error) {
	g.entered.Add(1)
	select {
	case <-g.open:
		return tools.Result{Output: "opened"}, nil
	case <-ctx.Done():
		return tools.Result{}, ctx.Err()
	}
}

// A result whose publish fails is published again, not computed again: the
// failed publish may have stored it (its acknowledgement lost), and running
// the call a second time repeats whatever it did.
func TestAFailedPublishIsRetriedWithoutRunningTheCallAgain(t *testing.T) {
	e := newEnv(t)
	g := &gate{open: make(chan struct{})}
	e.worker([]tools.Tool{g}, worker.WithName("w1"))
	e.job(job("t1", "gate", `{}`))
	e.waitFor("the call to start", func() bool { return g.entered.Load() == 1 })
	// Without the inbox stream, the result's publish reaches this
	// subscription, which answers it as JetStream does when it cannot store.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, e.js.DeleteStream(ctx, events.StreamInbox))
	nc, _ := e.srv.Connect(t)
	refused := make(chan struct{})
	sub, err := nc.Subscribe(events.ToolResultSubject("gate", "t1"), func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"error":{"code":503,"err_code":10039,"description":"unavailable"}}`))
		close(refused)
	})
	must(t, err)
	must(t, nc.Flush())
	close(g.open)
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("the result was never published")
	}
	must(t, sub.Unsubscribe())
	must(t, bus.EnsureStreams(ctx, e.js))
	r := e.result("t1")
	if r.Output != "opened" || r.Attempt != 1 || g.entered.Load() != 1 {
		t.Errorf("result %+v after %d calls", r, g.entered.Load())
	}
	e.waitFor("the job acknowledged", func() bool { return e.pending() == 0 })
}

// binary is a tool whose output is text a JSON encoder writes six bytes
// per byte: control characters and bytes that are not UTF-8.
type binary struct{}

func (binary) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "binary", Description: "Dumps bytes."}
}

func (binary) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{Output: strings.Repeat("\x00\x1b\xff", worker.MaxOutput/3)}, nil
}

// An output the size of the cap still fits in one message once encoded as
// JSON (a shell command's `cat` of a binary file, a dump full of escape
// sequences), and says it was cut.
func TestResultsOfBinaryOutputFitInAMessage(t *testing.T) {
	e := newEnv(t)
	e.worker([]tools.Tool{binary{}})
	e.job(job("t1", "binary", `{}`))
	r := e.result("t1")
	if r.Attempt != 1 || !strings.HasPrefix(r.Output, "\x00\x1b\ufffd") || !strings.Contains(r.Output, "[output truncated: ") {
		t.Errorf("result of %d bytes, attempt %d, ending %q", len(r.Output), r.Attempt, r.Output[max(len(r.Output)-80, 0):])
	}
}

// counted is a tool that counts its runs.
type counted struct{ runs atomic.Int32 }

func (c *counted) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "counted", Description: "Counts."}
}

func (c *counted) Call(context.Context, json.RawMessage) (tools.Result, error) {
	n := c.runs.Add(1)
	return tools.Result{Output: fmt.Sprint(n)}, nil
}

// TestJobOfACallRunOnceIsAnsweredAgain: a job delivered again for a call
// this worker already ran (its acknowledgement was lost, or the jobs were
// derived again after a server restart) gets the first run's result; the
// call does not run twice.
func TestJobOfACallRunOnceIsAnsweredAgain(t *testing.T) {
	e := newEnv(t)
	c := &counted{}
	e.worker([]tools.Tool{c}, worker.WithName("w1"))
	e.job(job("once", "counted", `{}`))
	if r := e.result("once"); r.Output != "1" {
		t.Fatalf("first result %+v", r)
	}
	e.waitFor("the first job acknowledged", func() bool { return e.pending() == 0 })
	e.job(job("once", "counted", `{}`)) // the same call id, published anew
	e.waitFor("the second job acknowledged", func() bool { return e.pending() == 0 })
	if n := c.runs.Load(); n != 1 {
		t.Fatalf("the call ran %d times", n)
	}
}

// TestTwoTurnsReuseACallID: providers that number calls per turn give two
// turns the same call id. Each turn's job runs and each gets its own
// result, with a dedup id that names the turn (docs/protocol.md, "Dedup
// ids"); keyed by call id alone, the second would be answered with the
// first turn's result, on the first turn's subject, and deduplicated away.
func TestTwoTurnsReuseACallID(t *testing.T) {
	e := newEnv(t)
	e.worker(nil, worker.WithName("w1"))
	for _, turn := range []string{"u1", "u2"} {
		j := job(turn, "echo", `{"text":"`+turn+`"}`)
		j.CallID = "call_1"
		e.job(j)
		r := e.result(turn)
		if r.TurnID != turn || r.CallID != "call_1" || r.Output != turn {
			t.Fatalf("turn %s got %+v", turn, r)
		}
		s, err := e.js.Stream(context.Background(), events.StreamInbox)
		must(t, err)
		msg, err := s.GetLastMsgForSubject(context.Background(), bus.Stored("jetloop.inbox.*."+turn))
		must(t, err)
		if id := msg.Header.Get(jetstream.MsgIDHeader); id != "result:"+turn+":call_1" {
			t.Errorf("turn %s's result has dedup id %q", turn, id)
		}
	}
}
