package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPartitionedLogs: with the logs in four streams, a store appends each
// turn's log to the stream its partition maps to and reads it back from
// there, lists a session's turns across the streams and purges in the
// right one; a tail of the session reads every stream, each log in order,
// and says when it has caught up; a reader binds the layout from stream
// info alone.
func TestPartitionedLogs(t *testing.T) {
	srv := testkit.Start(t)
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := bus.DefaultProvision(nc.MaxPayload())
	p.EventStreams = 4
	if _, err := bus.Apply(ctx, js, p); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, events.StreamEvents); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("JETLOOP_EVENTS: %v, want none", err)
	}
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	layout := store.Layout()
	if layout.Streams != 4 {
		t.Fatalf("layout %+v, want 4 streams", layout)
	}
	// Turns until every stream has one, all of one session.
	var turns []string
	in := map[string]bool{}
	for i := 0; len(in) < 4; i++ {
		turn := fmt.Sprintf("t%d", i)
		turns = append(turns, turn)
		in[layout.Stream(turn)] = true
	}
	sessionEvent := func(turn string, n int) events.Envelope {
		e := event(turn, n)
		e.SessionID = "s"
		return e
	}
	for _, turn := range turns {
		seq, err := store.Append(ctx, 0, []events.Envelope{sessionEvent(turn, 1), sessionEvent(turn, 2)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, seq, []events.Envelope{sessionEvent(turn, 3)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range layout.Names() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		for subj := range info.State.Subjects {
			if turn := bus.TurnOf(subj); layout.Stream(turn) != name || subj != layout.Subject("s", turn) {
				t.Errorf("%s holds %s", name, subj)
			}
		}
	}
	for _, turn := range turns {
		log, last, err := store.Read(ctx, turn)
		if err != nil || len(log) != 3 || log[2].ID != sessionEvent(turn, 3).ID {
			t.Fatalf("%s: read %d events (%v)", turn, len(log), err)
		}
		if e, seq, ok, err := store.Last(ctx, turn); err != nil || !ok || seq != last || e.Seq != 3 {
			t.Fatalf("%s: last %+v at %d (%v, %v), want event 3 at %d", turn, e, seq, ok, err, last)
		}
	}
	subjects, err := store.Subjects(ctx, layout.SessionFilter("s"))
	if err != nil || len(subjects) != len(turns) {
		t.Fatalf("the session lists %d logs (%v), want %d", len(subjects), err, len(turns))
	}
	// A tail of the session from the start reads every log whole, each in
	// order, then what comes later.
	tail, err := bus.NewTails(ctx, js, layout.Names(), layout.SessionFilter("s"), bus.Start{})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	next := map[string]int{}
	for n := 0; n < 3*len(turns); {
		m, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := events.Each(m.Data, func(e events.Envelope) error {
			if e.Seq != next[e.TurnID]+1 {
				return fmt.Errorf("%s: event %d after %d", e.TurnID, e.Seq, next[e.TurnID])
			}
			next[e.TurnID] = e.Seq
			n++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n == 3*len(turns) && m.Pending != 0 {
			t.Errorf("every event read, and the tail says %d more", m.Pending)
		}
	}
	last, _, _, _ := store.Last(ctx, turns[0])
	if _, err := store.Append(ctx, lastSeq(ctx, t, store, turns[0]), []events.Envelope{sessionEvent(turns[0], 4)}); err != nil {
		t.Fatal(err)
	}
	if m, err := tail.Next(ctx); err != nil || bus.TurnOf(m.Subject) != turns[0] {
		t.Fatalf("after the append the tail read %v (%v), want %s's event 4 (after %d)", m.Subject, err, turns[0], last.Seq)
	}
	// The purge of a rejected turn's log is made in its stream.
	if err := store.PurgeThrough(ctx, "s", turns[1], lastSeq(ctx, t, store, turns[1])); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := store.Last(ctx, turns[1]); ok || err != nil {
		t.Fatalf("%s after its purge: ok %v, %v", turns[1], ok, err)
	}
	if log, _, _ := store.Read(ctx, turns[2]); len(log) != 3 {
		t.Fatalf("%s has %d events after another turn's purge", turns[2], len(log))
	}
}

func lastSeq(ctx context.Context, t *testing.T, store *bus.Store, turn string) uint64 {
	t.Helper()
	_, seq, _, err := store.Last(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}
