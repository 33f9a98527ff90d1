package testkit

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Publish publishes data to subject and waits for the stream to store it,
// deduplicated by id unless id is empty.
func Publish(t testing.TB, js jetstream.JetStream, subject string, data []byte, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	if _, err := js.Publish(ctx, subject, data, opts...); err != nil {
		t.Fatalf("publish to %s: %v", subject, err)
	}
}

// Submit submits a turn to the inbox as a client does, with the turn's id
// as the message's.
func Submit(t testing.TB, js jetstream.JetStream, sub events.Submit) {
	t.Helper()
	Publish(t, js, events.SubjectSubmit, mustJSON(t, sub), sub.TurnID)
}

// Control sends a turn a control (cancel, approve, answer, …).
func Control(t testing.TB, js jetstream.JetStream, turn string, c events.Control) {
	t.Helper()
	Publish(t, js, events.ControlSubject(turn), mustJSON(t, c), "")
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
