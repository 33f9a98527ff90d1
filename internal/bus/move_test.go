package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// layoutServer is a fresh server provisioned with the logs in n streams.
func layoutServer(t *testing.T, n int) (context.Context, jetstream.JetStream) {
	t.Helper()
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if _, err := bus.Apply(ctx, js, provision(js, n)); err != nil {
		t.Fatal(err)
	}
	return ctx, js
}

func provision(js jetstream.JetStream, n int) bus.Provision {
	p := bus.DefaultProvision(js.Conn().MaxPayload())
	p.EventStreams = n
	return p
}

// writeLogs appends the logs of twelve turns of four sessions: a grouped
// decision of three events, then two events one by one.
func writeLogs(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var turns []string
	for i := range 12 {
		turn, session := fmt.Sprintf("turn-%d", i), fmt.Sprintf("session-%d", i%4)
		turns = append(turns, turn)
		ev := func(n int) events.Envelope {
			return events.Envelope{ID: fmt.Sprintf("%s-e%d", turn, n), Type: events.StepStarted, TurnID: turn, SessionID: session,
				Seq: n, Step: 1, Time: time.Now().UTC(), Data: json.RawMessage(`{"n":` + fmt.Sprint(n) + `}`)}
		}
		last, err := store.Append(ctx, 0, []events.Envelope{ev(1), ev(2), ev(3)})
		if err != nil {
			t.Fatal(err)
		}
		for n := 4; n <= 5; n++ {
			if last, err = store.Append(ctx, last, []events.Envelope{ev(n)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return turns
}

// readLogs reads every turn's log with a fresh store.
func readLogs(t *testing.T, ctx context.Context, js jetstream.JetStream, turns []string) map[string][]events.Envelope {
	t.Helper()
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]events.Envelope{}
	for _, turn := range turns {
		log, _, err := store.Read(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != 5 {
			t.Fatalf("%s: %d events, want 5", turn, len(log))
		}
		out[turn] = log
	}
	return out
}

// eventStreams lists the events streams the server has, with their
// subjects and message counts.
func eventStreams(t *testing.T, ctx context.Context, js jetstream.JetStream) (map[string][]string, uint64) {
	t.Helper()
	out := map[string][]string{}
	var msgs uint64
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if !strings.HasPrefix(name, events.StreamEvents) {
			continue
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = s.CachedInfo().Config.Subjects
		msgs += s.CachedInfo().State.Msgs
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out, msgs
}

// wantLayout checks that the server has exactly the streams of n, the logs
// as before, and no message twice, and that a process would start on it.
func wantLayout(t *testing.T, ctx context.Context, js jetstream.JetStream, n int, turns []string, before map[string][]events.Envelope, msgs uint64) {
	t.Helper()
	l := events.Layout{Streams: n}
	streams, have := eventStreams(t, ctx, js)
	want := map[string][]string{}
	for k, name := range l.Names() {
		want[name] = l.StreamSubjects(k)
	}
	if !reflect.DeepEqual(streams, want) {
		t.Fatalf("events streams %v, want %v", streams, want)
	}
	if have != msgs {
		t.Fatalf("%d messages, want %d", have, msgs)
	}
	if got, err := bus.FindLayout(ctx, js); err != nil || got != l {
		t.Fatalf("FindLayout: %v (%v), want %v", got, err, l)
	}
	if after := readLogs(t, ctx, js, turns); !reflect.DeepEqual(after, before) {
		t.Fatalf("the logs read back differently after the move")
	}
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	if diffs, err := bus.Check(ctx, js, provision(js, 0)); err != nil || len(diffs) > 0 {
		t.Fatalf("check after the move: %v (%v)", diffs, err)
	}
}

// TestMoveLogs moves a dozen turns' logs from one stream to four, back to
// one, to four again and from four to two: after each, a fresh store reads
// every log as before, each message once, and the ids and the store's own
// headers moved with them.
func TestMoveLogs(t *testing.T) {
	ctx, js := layoutServer(t, 1)
	turns := writeLogs(t, ctx, js)
	before := readLogs(t, ctx, js, turns)
	_, msgs := eventStreams(t, ctx, js)
	if msgs != 36 {
		t.Fatalf("%d messages, want 12 × 3", msgs)
	}

	for _, n := range []int{4, 1, 4, 2} {
		var said []string
		if err := bus.MoveLogs(ctx, js, provision(js, n), func(s string) { said = append(said, s) }); err != nil {
			t.Fatalf("move to %d: %v", n, err)
		}
		t.Logf("move to %d:\n%s", n, strings.Join(said, "\n"))
		wantLayout(t, ctx, js, n, turns, before, msgs)
	}

	l := events.Layout{Streams: 2}
	s, err := js.Stream(ctx, l.Stream("turn-3"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, l.TurnFilter("turn-3"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(jetstream.MsgIDHeader) != "turn-3-e5" || m.Header.Get(events.HeaderType) != string(events.StepStarted) {
		t.Fatalf("a moved message's headers: %v", m.Header)
	}
	first, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(l.TurnFilter("turn-3")))
	if err != nil {
		t.Fatal(err)
	}
	if first.Header.Get(events.HeaderEvents) != "3" || first.Header.Get(jetstream.MsgIDHeader) != "turn-3-e1" {
		t.Fatalf("a moved decision's headers: %v", first.Header)
	}

	// A log goes on where it was.
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	_, seq, _, err := store.Last(ctx, "turn-3")
	if err != nil {
		t.Fatal(err)
	}
	e := before["turn-3"][4]
	e.ID, e.Seq = "turn-3-e6", 6
	if _, err := store.Append(ctx, seq, []events.Envelope{e}); err != nil {
		t.Fatal(err)
	}

	var said []string
	if err := bus.MoveLogs(ctx, js, provision(js, 2), func(s string) { said = append(said, s) }); err != nil || len(said) != 1 || !strings.Contains(said[0], "nothing to do") {
		t.Fatalf("a move to the layout there is: %v, said %q", err, said)
	}
}

func logf(t *testing.T) func(string) { return func(s string) { t.Log(s) } }

// TestMoveRefusedWhileOrchestratorsLive: a key in JETLOOP_ORCHESTRATORS
// refuses the move, naming it, and nothing changes.
func TestMoveRefusedWhileOrchestratorsLive(t *testing.T) {
	ctx, js := layoutServer(t, 1)
	turns := writeLogs(t, ctx, js)
	before := readLogs(t, ctx, js, turns)
	_, msgs := eventStreams(t, ctx, js)
	kv, err := js.KeyValue(ctx, bus.BucketOrchestrators)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "orch-a", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	err = bus.MoveLogs(ctx, js, provision(js, 4), nil)
	var live *bus.OrchestratorsLiveError
	if !errors.As(err, &live) || !slices.Equal(live.Names, []string{"orch-a"}) || !strings.Contains(err.Error(), "stop them") {
		t.Fatalf("move with an orchestrator live: %v", err)
	}
	wantLayout(t, ctx, js, 1, turns, before, msgs)
}

// copyByHand copies the first n messages of stream from, in layout fromL,
// to their subjects in layout to, as a move does.
func copyByHand(t *testing.T, ctx context.Context, js jetstream.JetStream, from string, fromL, to events.Layout, n int) {
	t.Helper()
	s, err := js.Stream(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); n > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		tokens := strings.Split(m.Subject, ".")
		session, turn := tokens[len(tokens)-2], tokens[len(tokens)-1]
		out := &nats.Msg{Subject: to.Subject(session, turn), Data: m.Data, Header: nats.Header{}}
		// A get's answer carries the message's own headers and the
		// server's (Nats-Subject, Nats-Sequence...).
		for k, v := range m.Header {
			if !strings.HasPrefix(k, "Nats-") || k == jetstream.MsgIDHeader {
				out.Header[k] = v
			}
		}
		if _, err := js.PublishMsg(ctx, out); err != nil {
			t.Fatal(err)
		}
		n--
	}
}

// TestMoveResumes leaves moves half done, as a crash would, and runs them
// again: from one stream to four, stopped in the copy; from four to one,
// stopped in the copy, and finished as a move to two; and one stopped there
// again and given up (moved back to four). Meanwhile no process starts and
// check names the unfinished move; at the end every log is as before, each
// message once.
func TestMoveResumes(t *testing.T) {
	ctx, js := layoutServer(t, 1)
	turns := writeLogs(t, ctx, js)
	before := readLogs(t, ctx, js, turns)
	_, msgs := eventStreams(t, ctx, js)
	wantUnfinished := func(to int) {
		t.Helper()
		var unfinished *bus.MoveUnfinishedError
		if err := bus.EnsureStreams(ctx, js); !errors.As(err, &unfinished) || unfinished.To != to {
			t.Fatalf("EnsureStreams during a move to %d: %v", to, err)
		}
		diffs, err := bus.Check(ctx, js, provision(js, 0))
		if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], fmt.Sprintf("--event-streams %d` again", to)) {
			t.Fatalf("check during a move to %d: %q (%v)", to, diffs, err)
		}
	}

	// 1 → 4, stopped after the pivot, the new streams and 10 messages.
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{"jetloop.events.*.*"}
	cfg.Metadata = map[string]string{"jetloop_move_to": "4"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	four := events.Layout{Streams: 4}
	for _, c := range provision(js, 4).EventsConfigs() {
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	copyByHand(t, ctx, js, events.StreamEvents, events.OneStream, four, 10)
	wantUnfinished(4)
	// The one stream still holds every log, and is where they are read.
	if after := readLogs(t, ctx, js, turns); !reflect.DeepEqual(after, before) {
		t.Fatal("the logs read differently during the move")
	}
	if err := bus.MoveLogs(ctx, js, provision(js, 4), logf(t)); err != nil {
		t.Fatal(err)
	}
	wantLayout(t, ctx, js, 4, turns, before, msgs)

	// 4 → 1, stopped in the copy; run again as a move to 2.
	c := provision(js, 1).EventsConfigs()[0]
	c.Subjects = []string{"jetloop.events.*.*"}
	c.Metadata = map[string]string{"jetloop_move_to": "1", "jetloop_move_filling": "true"}
	if _, err := js.CreateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	copyByHand(t, ctx, js, events.PartitionedStream(0), four, events.OneStream, 3)
	copyByHand(t, ctx, js, events.PartitionedStream(2), four, events.OneStream, 2)
	wantUnfinished(1)
	if err := bus.MoveLogs(ctx, js, provision(js, 2), logf(t)); err != nil {
		t.Fatal(err)
	}
	wantLayout(t, ctx, js, 2, turns, before, msgs)

	// 2 → 1 stopped in the copy, given up: a move back to 2 deletes the
	// part copy.
	c.Metadata["jetloop_move_to"] = "1"
	if _, err := js.CreateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	copyByHand(t, ctx, js, events.PartitionedStream(1), events.Layout{Streams: 2}, events.OneStream, 4)
	wantUnfinished(1)
	if err := bus.MoveLogs(ctx, js, provision(js, 2), logf(t)); err != nil {
		t.Fatal(err)
	}
	wantLayout(t, ctx, js, 2, turns, before, msgs)
}

// TestApplyPartitionedLayout: Apply with four events streams on a fresh
// server makes JETLOOP_EVENTS_0..3 and no JETLOOP_EVENTS; asked for two
// afterwards it refuses with a LayoutError, and Check names the difference
// in one line; EnsureStreams keeps the four.
func TestApplyPartitionedLayout(t *testing.T) {
	ctx, js := layoutServer(t, 4)
	l := events.Layout{Streams: 4}
	want := map[string][]string{}
	for k, name := range l.Names() {
		want[name] = l.StreamSubjects(k)
	}
	if streams, _ := eventStreams(t, ctx, js); !reflect.DeepEqual(streams, want) {
		t.Fatalf("events streams %v, want %v", streams, want)
	}
	_, err := bus.Apply(ctx, js, provision(js, 2))
	var lerr *bus.LayoutError
	if !errors.As(err, &lerr) || lerr.Have != l || !strings.Contains(err.Error(), "jetloop streams move --event-streams 2") {
		t.Fatalf("apply of another layout: %v", err)
	}
	diffs, err := bus.Check(ctx, js, provision(js, 2))
	if err != nil || !slices.Equal(diffs, []string{"events: the logs are in 4 stream(s), want 2"}) {
		t.Fatalf("check of another layout: %q (%v)", diffs, err)
	}
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	if streams, _ := eventStreams(t, ctx, js); !reflect.DeepEqual(streams, want) {
		t.Fatalf("after EnsureStreams, events streams %v, want %v", streams, want)
	}
	line, err := bus.DescribeLayout(ctx, js)
	if err != nil || line != "events: the logs are in 4 streams: JETLOOP_EVENTS_0, JETLOOP_EVENTS_1, JETLOOP_EVENTS_2, JETLOOP_EVENTS_3" {
		t.Fatalf("layout line %q (%v)", line, err)
	}
}

// TestMoveManyMessages moves more messages than go out in one window, so
// the copy waits for its acks several times, each message expecting the
// one before it.
func TestMoveManyMessages(t *testing.T) {
	ctx, js := layoutServer(t, 1)
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	var turns []string
	for i := range 700 {
		turn := fmt.Sprintf("t%d", i%20)
		if i < 20 {
			turns = append(turns, turn)
		}
		e := events.Envelope{ID: fmt.Sprintf("%s-e%d", turn, i/20+1), Type: events.StepStarted, TurnID: turn, SessionID: "s",
			Seq: i/20 + 1, Step: 1, Time: time.Now().UTC(), Data: json.RawMessage(`{}`)}
		if last[turn], err = store.Append(ctx, last[turn], []events.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() map[string][]events.Envelope {
		s, err := bus.NewStore(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]events.Envelope{}
		for _, turn := range turns {
			if out[turn], _, err = s.Read(ctx, turn); err != nil || len(out[turn]) != 35 {
				t.Fatalf("%s: %d events (%v)", turn, len(out[turn]), err)
			}
		}
		return out
	}
	before := read()
	for _, n := range []int{2, 1} {
		if err := bus.MoveLogs(ctx, js, provision(js, n), nil); err != nil {
			t.Fatal(err)
		}
		if _, msgs := eventStreams(t, ctx, js); msgs != 700 {
			t.Fatalf("%d messages after the move to %d, want 700", msgs, n)
		}
		if !reflect.DeepEqual(read(), before) {
			t.Fatalf("the logs read differently after the move to %d", n)
		}
	}
}
