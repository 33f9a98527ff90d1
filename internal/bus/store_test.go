package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// event is the nth event of a turn: the store reads and writes envelopes,
// whatever they hold.
func event(turn string, n int) events.Envelope {
	return events.Envelope{ID: fmt.Sprintf("%s-e%d", turn, n), Type: events.StepStarted, TurnID: turn, SessionID: turn,
		Seq: n, Step: 1, Time: time.Now().UTC(), Data: json.RawMessage(`{}`)}
}

// TestAppendSendsADecisionTogether appends decisions of several events on a
// single-replica stream, one event per message (the layout of a decision
// too big for one message; grouping is turned off here, as this test
// predates it and checks that path), where they are sent together: they
// land in order; one whose first event lost the race for the log lands not
// at all; one whose events another append came between lands whole, the
// rest of it one by one.
func TestAppendSendsADecisionTogether(t *testing.T) {
	ctx, js := provisioned(t)
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	store.Grouped = false
	ids := func(turn string) []string {
		log, _, err := store.Read(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range log {
			out = append(out, e.ID)
		}
		return out
	}
	want := func(turn string, n int) {
		t.Helper()
		got := ids(turn)
		if len(got) != n {
			t.Fatalf("%s: log %v, want %d events", turn, got, n)
		}
		for i, id := range got {
			if id != event(turn, i+1).ID {
				t.Fatalf("%s: log %v, want its events 1 to %d in order", turn, got, n)
			}
		}
	}

	last, err := store.Append(ctx, 0, []events.Envelope{event("a", 1), event("a", 2), event("a", 3)})
	if err != nil {
		t.Fatal(err)
	}
	want("a", 3)
	if _, seq, _, _ := store.Last(ctx, "a"); seq != last {
		t.Fatalf("append returned %d, the log ends at %d", last, seq)
	}

	// The turn moved on since: nothing of the decision lands.
	if _, err := store.Append(ctx, last-1, []events.Envelope{event("a", 4), event("a", 5)}); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("append on a stale sequence: %v, want ErrConflict", err)
	}
	want("a", 3)

	// A decision whose first event landed before (a retry), another
	// turn's append after it: the second event cannot expect the first
	// to be the stream's last, and is appended alone.
	first, err := store.Append(ctx, 0, []events.Envelope{event("b", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, last, []events.Envelope{event("a", 4)}); err != nil {
		t.Fatal(err)
	}
	end, err := store.Append(ctx, first, []events.Envelope{event("b", 1), event("b", 2), event("b", 3)})
	if err != nil {
		t.Fatal(err)
	}
	want("b", 3)
	want("a", 4)
	if _, seq, _, _ := store.Last(ctx, "b"); seq != end {
		t.Fatalf("append returned %d, the log ends at %d", end, seq)
	}
}

// TestClusterLogReadsAreTheLeaders reads turn logs (a store's read and a
// reader's tail) on a single server and on a 3-node cluster, and counts the
// requests a client of either sees go by: on a single server a log is read
// with direct gets; on a cluster never, only with the stream's message get,
// which its leader answers. A direct get on a cluster may be answered by a
// follower behind the appends (see NewStore).
func TestClusterLogReadsAreTheLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	reads := func(t *testing.T, nc *nats.Conn, js jetstream.JetStream, ctx context.Context) (direct, leader int) {
		t.Helper()
		store, err := bus.NewStore(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		subs := map[string]*nats.Subscription{}
		for _, subject := range []string{"$JS.API.DIRECT.GET." + events.StreamEvents + ".>", "$JS.API.DIRECT.GET." + events.StreamEvents,
			"$JS.API.STREAM.MSG.GET." + events.StreamEvents} {
			sub, err := nc.SubscribeSync(subject)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			subs[subject] = sub
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, 0, []events.Envelope{event("r", 1), event("r", 2)}); err != nil {
			t.Fatal(err)
		}
		log, _, err := store.Read(ctx, "r")
		if err != nil || len(log) != 2 {
			t.Fatalf("read %d events (%v), want 2", len(log), err)
		}
		// A reader's tail reads the same way.
		tail, err := bus.NewTail(ctx, js, events.StreamEvents, events.TurnEventsFilter("r"), bus.Start{})
		if err != nil {
			t.Fatal(err)
		}
		defer tail.Close()
		if m, err := tail.Next(ctx); err != nil || m.Pending != 0 {
			t.Fatalf("the tail read %+v, %v", m, err)
		}
		// A read's request is delivered to this connection's subscriptions
		// before its answer comes back on it.
		count := func(subject string) int {
			n, _, err := subs[subject].Pending()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		return count("$JS.API.DIRECT.GET."+events.StreamEvents+".>") + count("$JS.API.DIRECT.GET."+events.StreamEvents),
			count("$JS.API.STREAM.MSG.GET." + events.StreamEvents)
	}

	t.Run("single server", func(t *testing.T) {
		ctx, js := provisioned(t)
		if direct, leader := reads(t, js.Conn(), js, ctx); direct == 0 || leader != 0 {
			t.Fatalf("%d direct gets and %d message gets, want only direct gets", direct, leader)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := testkit.StartCluster(t, 3)
		nc, js := c.Connect(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p := bus.DefaultProvision(nc.MaxPayload())
		p.Replicas = 3
		if _, err := bus.Apply(ctx, js, p); err != nil {
			t.Fatal(err)
		}
		if direct, leader := reads(t, nc, js, ctx); direct != 0 || leader == 0 {
			t.Fatalf("%d direct gets and %d message gets, want only message gets", direct, leader)
		}
	})
}

// TestAppendStoresADecisionAsOneMessage: a decision's events are one message
// (docs/protocol.md, "Reading a log": header Jetloop-Events, the first
// event's id as Nats-Msg-Id, the last event's type as Jetloop-Type), fenced
// by the turn's last sequence; a retried append is dropped as a duplicate; a
// decision too big for one message is stored one event per message; and a log
// of both layouts reads back whole and in order.
func TestAppendStoresADecisionAsOneMessage(t *testing.T) {
	ctx, js := provisioned(t)
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msgs := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	decision := []events.Envelope{event("g", 1), event("g", 2), event("g", 3)}
	decision[2].Type = events.StepChecked
	last, err := store.Append(ctx, 0, decision)
	if err != nil {
		t.Fatal(err)
	}
	if n := msgs(); n != 1 {
		t.Fatalf("a decision of 3 events is %d messages, want 1", n)
	}
	m, err := stream.GetMsg(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(events.HeaderEvents) != "3" || m.Header.Get(jetstream.MsgIDHeader) != "g-e1" ||
		m.Header.Get(events.HeaderType) != string(events.StepChecked) {
		t.Fatalf("headers %v", m.Header)
	}
	// A retry of the same decision (its ack was lost) is no second copy:
	// the fence refuses it, and the orchestrator reads the log again.
	if _, err := store.Append(ctx, 0, decision); !errors.Is(err, bus.ErrConflict) || msgs() != 1 {
		t.Fatalf("a retried append: %v, %d messages", err, msgs())
	}
	// Fenced: a decision on a stale sequence lands not at all.
	if _, err := store.Append(ctx, last-1, []events.Envelope{event("g", 4), event("g", 5)}); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("append on a stale sequence: %v, want ErrConflict", err)
	}
	// One event per message, as a decision too big for one is stored.
	store.Grouped = false
	if last, err = store.Append(ctx, last, []events.Envelope{event("g", 4), event("g", 5)}); err != nil {
		t.Fatal(err)
	}
	store.Grouped = true
	big := []events.Envelope{event("g", 6), event("g", 7)}
	half := int(js.Conn().MaxPayload()/2) + 1
	for i := range big {
		big[i].Data = json.RawMessage(`{"x":"` + strings.Repeat("a", half) + `"}`)
	}
	if last, err = store.Append(ctx, last, big); err != nil {
		t.Fatal(err)
	}
	if n := msgs(); n != 5 {
		t.Fatalf("%d messages, want 1 + 2 + 2 (a decision too big for one message is one per event)", n)
	}
	log, seq, err := store.Read(ctx, "g")
	if err != nil || seq != last || len(log) != 7 {
		t.Fatalf("read %d events to %d (%v), want 7 to %d", len(log), seq, err, last)
	}
	for i, e := range log {
		if e.Seq != i+1 {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	if e, seq, ok, err := store.Last(ctx, "g"); err != nil || !ok || e.Seq != 7 || seq != last {
		t.Fatalf("last: %+v at %d (%v)", e, seq, err)
	}
}
