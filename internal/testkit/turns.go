package testkit

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// store binds the events stream.
func store(t testing.TB, ctx context.Context, js jetstream.JetStream) *bus.Store {
	t.Helper()
	s, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Log reads a turn's log as it is now.
func Log(t testing.TB, js jetstream.JetStream, turn string) []events.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	log, _, err := store(t, ctx, js).Read(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// TryLog reads a turn's log as it is now, nil when it cannot be read: for
// a condition polled while the log is being replaced or the server
// restarts.
func TryLog(js jetstream.JetStream, turn string) []events.Envelope {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := bus.NewStore(ctx, js)
	if err != nil {
		return nil
	}
	log, _, err := s.Read(ctx, turn)
	if err != nil {
		return nil
	}
	return log
}

// Last returns a turn's last event; ok is false while it has no log.
func Last(t testing.TB, js jetstream.JetStream, turn string) (e events.Envelope, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, _, ok, err := store(t, ctx, js).Last(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	return e, ok
}

// TryLast is Last that reports a read that fails as no log, for the same
// conditions as TryLog.
func TryLast(js jetstream.JetStream, turn string) (e events.Envelope, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := bus.NewStore(ctx, js)
	if err != nil {
		return events.Envelope{}, false
	}
	e, _, ok, err = s.Last(ctx, turn)
	return e, ok && err == nil
}

// Finished waits for a turn to finish, checks its log's invariants
// (events.CheckLog), and returns it with its turn.finished data.
func Finished(t testing.TB, js jetstream.JetStream, turn string) ([]events.Envelope, events.TurnFinishedData) {
	t.Helper()
	WaitLast(t, js, turn, events.TurnFinished)
	log := Log(t, js, turn)
	if err := events.CheckLog(log); err != nil {
		t.Fatalf("turn %s: %v\n%s", turn, err, Dump(log))
	}
	var fin events.TurnFinishedData
	if err := json.Unmarshal(log[len(log)-1].Data, &fin); err != nil {
		t.Fatal(err)
	}
	return log, fin
}

// WaitLast waits until a turn's last event is of type typ and returns it.
func WaitLast(t testing.TB, js jetstream.JetStream, turn string, typ events.Type) events.Envelope {
	t.Helper()
	var e events.Envelope
	WaitFor(t, "turn "+turn+" at "+string(typ), func() bool {
		var ok bool
		e, ok = Last(t, js, turn)
		return ok && e.Type == typ
	})
	return e
}

// WaitType waits until a turn's log has an event of type typ and returns
// the first one.
func WaitType(t testing.TB, js jetstream.JetStream, turn string, typ events.Type) events.Envelope {
	t.Helper()
	var found events.Envelope
	WaitFor(t, "a "+string(typ)+" in turn "+turn, func() bool {
		for _, e := range Log(t, js, turn) {
			if e.Type == typ {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// Of decodes the data of the events of one type in a log.
func Of[T any](t testing.TB, log []events.Envelope, typ events.Type) []T {
	t.Helper()
	var out []T
	for _, e := range log {
		if e.Type != typ {
			continue
		}
		var d T
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("%s at seq %d: %v", typ, e.Seq, err)
		}
		out = append(out, d)
	}
	return out
}

// Dump shows a log one event a line, for a failure's message.
func Dump(log []events.Envelope) string {
	var out []byte
	for _, e := range log {
		b, err := json.Marshal(e)
		if err != nil {
			b = []byte(err.Error())
		}
		out = append(append(out, b...), '\n')
	}
	return string(out)
}
