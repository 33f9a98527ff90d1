package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CheckLogs reads every turn log on the server and fails the test for each
// that breaks the log's invariants (events.CheckLog), whose events fail
// their schemas, or that today's machine would not have written
// (fsm.Verify, workflow.Verify). Every test that runs turns ends with it.
func CheckLogs(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// On a cluster whose node was just killed or restarted, the JetStream
	// API may not answer for a moment ("no responders"): ask again until
	// the deadline.
	again := func(op func() error) error {
		return backoff.Policy{First: 100 * time.Millisecond, Max: time.Second}.Do(ctx, func(int) error {
			err := op()
			if err != nil && !errors.Is(err, nats.ErrNoResponders) {
				return backoff.Permanent(err)
			}
			return err
		})
	}
	var layout events.Layout
	err := again(func() (err error) { layout, err = bus.FindLayout(ctx, js); return err })
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err != nil {
		t.Errorf("check logs: %v", err)
		return
	}
	logs := map[string][]events.Envelope{}
	for _, name := range layout.Names() {
		if err := readLogs(ctx, t, js, again, name, layout, logs); err != nil {
			t.Errorf("check logs: %s: %v", name, err)
			return
		}
	}
	for subject, log := range logs {
		if err := events.CheckLog(log); err != nil {
			var dump []byte
			for _, e := range log {
				line, _ := json.Marshal(e)
				dump = append(append(dump, line...), '\n')
			}
			t.Errorf("%s breaks the log invariants: %v\n%s", subject, err, dump)
			continue
		}
		if log[0].Type.Workflow() {
			if _, err := workflow.Verify(log); err != nil {
				t.Errorf("%s does not verify against today's workflow machine: %v", subject, err)
			}
			continue
		}
		if _, err := fsm.Verify(log); err != nil {
			t.Errorf("%s does not verify against today's machine: %v", subject, err)
		}
	}
}

// readLogs adds the events of stream to their logs, checking each message.
func readLogs(ctx context.Context, t testing.TB, js jetstream.JetStream, again func(func() error) error,
	name string, layout events.Layout, logs map[string][]events.Envelope) error {
	t.Helper()
	var stream jetstream.Stream
	if err := again(func() (err error) { stream, err = js.Stream(ctx, name); return err }); err != nil {
		return err
	}
	var info *jetstream.StreamInfo
	if err := again(func() (err error) { info, err = stream.Info(ctx); return err }); err != nil {
		return err
	}
	// Read with a consumer: on a cluster a direct get may be answered by a
	// follower still catching up, and leave a hole in a log. A consumer
	// reads one replica's store in order, and a fetch for as many messages
	// as the stream holds waits for that replica to catch up.
	var cons jetstream.Consumer
	err := again(func() (err error) {
		cons, err = stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		return err
	})
	if err != nil {
		return err
	}
	for read := uint64(0); read < info.State.Msgs; {
		var batch jetstream.MessageBatch
		if err := again(func() (err error) {
			batch, err = cons.Fetch(int(min(1000, info.State.Msgs-read)), jetstream.FetchMaxWait(5*time.Second))
			return err
		}); err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			checkEvent(t, layout, md.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data(), logs)
		}
		read += uint64(n)
		err := batch.Error()
		if errors.Is(err, nats.ErrNoResponders) && backoff.Sleep(ctx, 250*time.Millisecond) {
			// The consumer's node is coming back: the ordered consumer
			// goes on from its last message.
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			break // the rest was removed since the stream's info was read
		}
	}
	return nil
}

// checkEvent checks one stored message — one event, or a decision's events
// (docs/protocol.md, "Reading a log") — and adds its events to their log.
func checkEvent(t testing.TB, layout events.Layout, seq uint64, subject string, hdr nats.Header, data []byte, logs map[string][]events.Envelope) {
	t.Helper()
	parts, err := events.Split(data)
	if err != nil {
		t.Errorf("message at stream seq %d (%s): %v", seq, subject, err)
		return
	}
	if n := hdr.Get(events.HeaderEvents); len(parts) > 1 && n != strconv.Itoa(len(parts)) || len(parts) == 1 && n != "" {
		t.Errorf("message at stream seq %d (%s) stores %d events with %s %q", seq, subject, len(parts), events.HeaderEvents, n)
	}
	for i, part := range parts {
		if err := events.ValidateEvent(part); err != nil {
			t.Errorf("event at stream seq %d (%s) fails its schema: %v", seq, subject, err)
		}
		var e events.Envelope
		if err := json.Unmarshal(part, &e); err != nil {
			t.Errorf("event at stream seq %d: %v", seq, err)
			return
		}
		if got := layout.Subject(e.SessionID, e.TurnID); got != subject {
			t.Errorf("event of %s/%s stored on %s", e.SessionID, e.TurnID, subject)
		}
		// A group's headers speak for it (docs/protocol.md, "Reading a log").
		if len(parts) > 1 && i == 0 && hdr.Get(jetstream.MsgIDHeader) != e.ID {
			t.Errorf("message at stream seq %d has Nats-Msg-Id %q, its first event's id is %q", seq, hdr.Get(jetstream.MsgIDHeader), e.ID)
		}
		if len(parts) > 1 && i == len(parts)-1 && hdr.Get(events.HeaderType) != string(e.Type) {
			t.Errorf("message at stream seq %d has %s %q, its last event is %s", seq, events.HeaderType, hdr.Get(events.HeaderType), e.Type)
		}
		logs[subject] = append(logs[subject], e)
	}
}
