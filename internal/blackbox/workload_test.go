package blackbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workloadTools are the tools the turns of a workload call, in turn: echo
// and sleep have no effect outside their answer; shell appends the turn's
// id to callsFile, so every execution leaves a line.
var workloadTools = []string{"echo", "sleep", "shell"}

// callsFile is where the shell calls of a workload append, under the
// workers' root.
const callsFile = "calls.log"

// workload is a batch of turns of the scripted model, each one tool call
// then a final answer, and what a test sees of them while they run: which
// have finished (from their logs) and every model text streamed (the
// scripted model streams each answer's text as one delta, and every text of
// a workload is different, so a text seen twice is a model call made
// twice).
type workload struct {
	t      *testing.T
	js     jetstream.JetStream
	prefix string
	dir    string
	n      int

	mu       sync.Mutex
	finished map[string]bool
	deltas   map[string][]time.Time
	// calls traces each call id: its jobs and results as the test's
	// connection saw them go by, for the message of a failure.
	calls map[string][]string
	// resultAt is when the test's connection saw each call's first result.
	resultAt map[string]time.Time
	// submitted is how many turns, from the first, have been submitted.
	submitted int
}

// newWorkload prepares n turns named prefix-000 …; dir is the workers'
// root. It starts watching the logs and the model deltas at once.
func newWorkload(t *testing.T, nc *nats.Conn, js jetstream.JetStream, prefix, dir string, n int) *workload {
	t.Helper()
	w := &workload{t: t, js: js, prefix: prefix, dir: dir, n: n,
		finished: map[string]bool{}, deltas: map[string][]time.Time{}, calls: map[string][]string{}, resultAt: map[string]time.Time{}}
	sub, err := nc.Subscribe(events.DeltaSubject("*"), func(m *nats.Msg) {
		var d events.Delta
		if json.Unmarshal(m.Data, &d) != nil {
			return
		}
		w.mu.Lock()
		w.deltas[d.Delta] = append(w.deltas[d.Delta], time.Now())
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// A result is handed to its turn's owner (jetloop.direct.…) or, when
	// that fails, published to the inbox: both are a result the test saw.
	for _, subject := range []string{events.ToolSubject("*"), "jetloop.inbox.*.*", "jetloop.direct.*.*"} {
		sub, err := nc.Subscribe(subject, w.trace)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// An ordered consumer follows the logs across a server's restart or a
	// node's loss, recreating itself where the last event it saw ends.
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"jetloop.events.>"}, HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if m.Headers().Get(events.HeaderType) == string(events.TurnFinished) {
			subj := m.Subject()
			w.mu.Lock()
			w.finished[subj[strings.LastIndexByte(subj, '.')+1:]] = true
			w.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return w
}

// trace notes a tool job or result.
func (w *workload) trace(m *nats.Msg) {
	var v struct {
		CallID  string `json:"call_id"`
		Worker  string `json:"worker"`
		Attempt int    `json:"attempt"`
	}
	if json.Unmarshal(m.Data, &v) != nil {
		return
	}
	what := "job published"
	if v.Worker != "" {
		what = fmt.Sprintf("result of attempt %d published by %s", v.Attempt, v.Worker)
	}
	now := time.Now()
	w.mu.Lock()
	w.calls[v.CallID] = append(w.calls[v.CallID], now.Format("15:04:05.000")+" "+what)
	if _, seen := w.resultAt[v.CallID]; !seen && v.Worker != "" {
		w.resultAt[v.CallID] = now
	}
	w.mu.Unlock()
}

// resultsBetween are the calls whose first result went by from a to b.
func (w *workload) resultsBetween(a, b time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var calls []string
	for call, at := range w.resultAt {
		if !at.Before(a) && !at.After(b) {
			calls = append(calls, call)
		}
	}
	return calls
}

// history is what the test saw of a call.
func (w *workload) history(call string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.calls[call], "; ")
}

// results is how many runs of a call the test saw answered: results of
// different attempts or workers (a worker publishing one result again, after
// a publish it could not confirm, is one run).
func (w *workload) results(call string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	runs := map[string]bool{}
	for _, e := range w.calls[call] {
		if _, what, _ := strings.Cut(e, " "); strings.HasPrefix(what, "result of attempt") {
			runs[what] = true
		}
	}
	return len(runs)
}

func (w *workload) turn(i int) string { return fmt.Sprintf("%s-%03d", w.prefix, i) }

// tool is the tool turn i calls.
func (w *workload) tool(i int) string { return workloadTools[i%len(workloadTools)] }

// retried says whether turn i's first model call fails once with
// rate_limited, a retry its log shows: every tenth turn's does.
func (w *workload) retried(i int) bool { return i%10 == 0 }

// script is turn i's scripted model: each text names the turn and the
// response, so no two model calls of a workload stream the same text.
func (w *workload) script(i int) string {
	turn := w.turn(i)
	var args string
	switch w.tool(i) {
	case "echo":
		args = fmt.Sprintf(`{"text": %q}`, turn)
	case "sleep":
		args = `{"ms": 300}`
	case "shell":
		args = fmt.Sprintf(`{"command": "echo %s >> %s"}`, turn, callsFile)
	}
	var rs []string
	if w.retried(i) {
		rs = append(rs, fmt.Sprintf(`{"text": "%s busy", "error": "rate_limited"}`, turn))
	}
	rs = append(rs, fmt.Sprintf(`{"text": "%s calls", "tool_calls": [{"name": %q, "arguments": %s}]}`, turn, w.tool(i), args),
		fmt.Sprintf(`{"text": "%s done"}`, turn))
	return `{"responses": [` + strings.Join(rs, ", ") + `]}`
}

// submit submits turns from to to-1, each retried until the server stores
// it: a submission cut off by a server going away is sent again, and
// deduplicated by its id when it had been stored.
func (w *workload) submit(from, to int) {
	w.t.Helper()
	for i := from; i < to; i++ {
		turn := w.turn(i)
		data, err := json.Marshal(events.Submit{TurnID: turn, Agent: "Any", Model: "script", Script: json.RawMessage(w.script(i)),
			Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})
		if err != nil {
			w.t.Fatal(err)
		}
		testkit.WaitFor(w.t, "turn "+turn+" submitted", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := w.js.Publish(ctx, events.SubjectSubmit, data, jetstream.WithMsgID(turn))
			return err == nil
		})
		w.mu.Lock()
		w.submitted = max(w.submitted, i+1)
		w.mu.Unlock()
	}
}

// done is how many turns have finished.
func (w *workload) done() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.finished)
}

// waitDone waits until at least k turns have finished. When they do not
// within a minute, it names the submitted turns that have not, each with
// the events its log holds, before it fails: where a turn stopped is what
// a failure of a run this long needs to be understood.
func (w *workload) waitDone(k int) {
	w.t.Helper()
	testkit.WaitForOr(w.t, fmt.Sprintf("%d turns to finish", k), func() bool { return w.done() >= k }, w.unfinished)
}

// unfinished logs each submitted turn that has not finished, with its
// log's events (at most 20 turns).
func (w *workload) unfinished() {
	w.t.Helper()
	w.mu.Lock()
	var open []string
	for i := range w.submitted {
		if turn := w.turn(i); !w.finished[turn] {
			open = append(open, turn)
		}
	}
	w.mu.Unlock()
	for _, turn := range open[:min(len(open), 20)] {
		log := turnLog(w.t, w.js, turn)
		types := make([]string, len(log))
		for i, e := range log {
			types[i] = fmt.Sprintf("%s@%s", e.Type, e.Time.Format("15:04:05.000"))
		}
		w.t.Logf("unfinished: %s: %s", turn, strings.Join(types, " "))
	}
	if len(open) > 0 {
		w.waiting(events.StreamJobs, events.StreamInbox)
	}
}

// waiting logs what the work-queue streams hold (at most 50 messages
// each): a job or an input that is there, or missing, says where a turn
// stopped.
func (w *workload) waiting(streams ...string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range streams {
		s, err := w.js.Stream(ctx, name)
		if err != nil {
			w.t.Logf("%s: %v", name, err)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			w.t.Logf("%s: %v", name, err)
			continue
		}
		w.t.Logf("%s holds %d messages", name, info.State.Msgs)
		for c := range s.ListConsumers(ctx).Info() {
			if c.NumPending+uint64(c.NumAckPending)+uint64(c.NumRedelivered) > 0 {
				w.t.Logf("%s consumer %s: %d pending, %d unacknowledged, %d redelivered, %d pulls waiting",
					name, c.Name, c.NumPending, c.NumAckPending, c.NumRedelivered, c.NumWaiting)
			}
		}
		shown := 0
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0 && shown < 50; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			shown++
			w.t.Logf("%s %d %s: %s", name, seq, m.Subject, bus.Truncate(string(m.Data), 200))
		}
	}
}

// check checks every turn once all have finished: each completed with its
// final answer after exactly one successful tool call and its model calls
// (two, the first with two attempts where scripted so); each shell call
// left exactly one line; no model text was streamed twice unless excused
// says so (a call a killed process may have been making); and calls, the
// tool executions the workers counted (see toolCalls), are one per turn and
// tool. It returns how many model calls were made twice and excused.
func (w *workload) check(excused func(first time.Time) bool, calls map[string]map[string]int) int {
	t := w.t
	t.Helper()
	wantCalls := map[string]int{}
	callOf := map[string]string{}
	for i := range w.n {
		turn := w.turn(i)
		log := turnLog(t, w.js, turn)
		if len(log) == 0 || log[len(log)-1].Type != events.TurnFinished {
			t.Errorf("%s did not finish: %d events", turn, len(log))
			continue
		}
		fin := of[events.TurnFinishedData](t, log, events.TurnFinished)[0]
		if fin.StopReason != events.StopCompleted || fin.Output != turn+" done" {
			t.Errorf("%s finished %s with %q (%s)", turn, fin.StopReason, fin.Output, fin.Error)
		}
		tool := w.tool(i)
		wantCalls[tool]++
		requested := of[events.ToolRequestedData](t, log, events.ToolRequested)
		if len(requested) != 1 {
			t.Errorf("%s: %d tool.requested", turn, len(requested))
		} else {
			callOf[turn] = requested[0].CallID
		}
		done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
		// Attempts counts deliveries: one lost in flight while a node
		// fails over is delivered again without the call running twice,
		// which the workers' own counts below would show.
		if len(done) != 1 || done[0].IsError || done[0].Name != tool ||
			(tool == "echo" && done[0].Output != turn) || (tool == "sleep" && done[0].Output != "slept") {
			t.Errorf("%s: tool.completed %+v (seen: %s)", turn, done, w.history(callOf[turn]))
		}
		models := of[events.ModelCompletedData](t, log, events.ModelCompleted)
		if len(models) != 2 || models[0].Attempts != 1+b2i(w.retried(i)) || models[1].Attempts > 1 {
			t.Errorf("%s: model.completed %+v", turn, models)
		}
	}
	// What the model streamed: every text at most once (a viewer may miss
	// a delta while its server is away, never see one twice).
	repeats := 0
	w.mu.Lock()
	for text, seen := range w.deltas {
		if len(seen) < 2 {
			continue
		}
		if excused(seen[0]) {
			repeats++
			t.Logf("model call %q made %d times; the first was under way when a process was killed", text, len(seen))
			continue
		}
		t.Errorf("model call %q made %d times (streamed at %s)", text, len(seen), stamps(seen))
	}
	w.mu.Unlock()
	w.checkNoDeadLetters()
	w.checkDrained(events.StreamInbox, events.StreamJobs)
	lines := map[string]int{}
	f, err := os.Open(filepath.Join(w.dir, callsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines[sc.Text()]++
	}
	for i := range w.n {
		turn := w.turn(i)
		switch {
		case w.tool(i) == "shell" && lines[turn] != 1:
			t.Errorf("%s's shell call ran %d times (seen: %s)", turn, lines[turn], w.history(callOf[turn]))
		case w.tool(i) != "shell" && w.results(callOf[turn]) > 1:
			// Without an effect to count, a second result is the trace
			// of a second run (the workers' count below says how many).
			t.Errorf("%s's %s call ran again (seen: %s)", turn, w.tool(i), w.history(callOf[turn]))
		}
	}
	for _, tool := range workloadTools {
		ran := 0
		for _, n := range calls[tool] {
			ran += n
		}
		ok := calls[tool]["ok"]
		if ran != wantCalls[tool] || ok != ran {
			t.Errorf("the workers ran %d %s calls for %d turns, by outcome %v", ran, tool, wantCalls[tool], calls[tool])
		}
	}
	return repeats
}

func stamps(ts []time.Time) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Format("15:04:05.000"))
	}
	return strings.Join(s, ", ")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// metricsURL waits until a process started with --metrics-addr says where
// it serves its metrics.
var metricsLine = regexp.MustCompile(`http://[0-9.]+:[0-9]+/metrics`)

func metricsURL(t *testing.T, p *process) string {
	t.Helper()
	var url string
	testkit.WaitFor(t, "the metrics endpoint", func() bool {
		url = metricsLine.FindString(p.out.String())
		return url != ""
	})
	return url
}

// toolCalls reads jetloop_tool_calls_total from the metrics of the given
// tool worker processes: the calls they executed, by tool and outcome,
// summed over the processes.
func toolCalls(t *testing.T, urls ...string) map[string]map[string]int {
	t.Helper()
	series := regexp.MustCompile(`^jetloop_tool_calls_total\{(.*)\} ([0-9.e+]+)$`)
	label := func(name, labels string) string {
		m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(labels)
		if m == nil {
			return ""
		}
		return m[1]
	}
	calls := map[string]map[string]int{}
	for _, url := range urls {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			m := series.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			n, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("metrics: cannot read %q", line)
			}
			tool := label("tool", m[1])
			if calls[tool] == nil {
				calls[tool] = map[string]int{}
			}
			calls[tool][label("outcome", m[1])] += int(n)
		}
	}
	return calls
}

// checkNoDeadLetters fails the test for every dead letter on the server,
// naming its subject and error.
func (w *workload) checkNoDeadLetters() {
	w.t.Helper()
	for _, m := range testkit.Stored(w.t, w.js, events.StreamDead) {
		w.t.Errorf("dead letter on %s: %s\n%s", m.Subject, m.Header.Get(events.HeaderError), m.Data)
	}
}

// checkDrained fails the test for every message left in the work-queue
// streams once a short while has passed: an input or a job that nobody ever
// acknowledged.
func (w *workload) checkDrained(streams ...string) {
	w.t.Helper()
	for _, name := range streams {
		w.checkStreamDrained(name)
	}
}

// checkStreamDrained is checkDrained of one stream, with a deadline of its
// own: a message the server keeps after its acknowledgement (unacked) holds
// the wait to its end, which must leave the next stream its own.
func (w *workload) checkStreamDrained(name string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, name)
	if err != nil {
		w.t.Fatal(err)
	}
	var left map[string]uint64
	for ctx.Err() == nil {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err == nil && info.State.Msgs == 0 {
			return
		}
		if err == nil {
			left = info.State.Subjects
		}
		time.Sleep(50 * time.Millisecond)
	}
	if unacked := w.unacked(s, left); len(unacked) > 0 {
		w.t.Errorf("%s still holds messages nobody acknowledged: %v", name, unacked)
	}
}

// unacked keeps, of the subjects left in a work-queue stream, those of a
// message its consumer has not acknowledged. The server was seen keeping a
// message its consumer had acknowledged (the consumer's ack floor past it,
// nothing pending) across a restart: a server quirk, not a lost input.
func (w *workload) unacked(s jetstream.Stream, left map[string]uint64) map[string]uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var infos []*jetstream.ConsumerInfo
	for info := range s.ListConsumers(ctx).Info() {
		infos = append(infos, info)
	}
	out := map[string]uint64{}
	for subject, n := range left {
		m, err := s.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			out[subject] = n
			continue
		}
		acked := false
		for _, c := range infos {
			filters := append([]string{c.Config.FilterSubject}, c.Config.FilterSubjects...)
			for _, f := range filters {
				if f != "" && server.SubjectMatchesFilter(subject, f) && c.AckFloor.Stream >= m.Sequence && c.NumAckPending == 0 && c.NumPending == 0 {
					acked = true
				}
			}
		}
		if acked {
			w.t.Logf("%s (seq %d) stays in the stream though its consumer acknowledged it", subject, m.Sequence)
			continue
		}
		out[subject] = n
	}
	return out
}
