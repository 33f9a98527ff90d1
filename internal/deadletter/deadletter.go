package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// headerSubject names the subject a dead letter was first sent to.
const headerSubject = "Jetloop-Subject"

// Letter is one dead letter as `jetloop dead --json` prints it.
type Letter struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Subject string    `json:"subject"` // where it was first sent
	Kind    string    `json:"kind"`    // submit, control, result, model, timer, job
	Turn    string    `json:"turn_id,omitempty"`
	Reason  string    `json:"reason"`
}

// Of describes the dead letter m.
func Of(m *jetstream.RawStreamMsg) Letter {
	l := Letter{Seq: m.Sequence, Time: m.Time.UTC(), Subject: m.Header.Get(headerSubject),
		Kind: strings.TrimPrefix(m.Subject, "jetloop.dead."), Reason: m.Header.Get(events.HeaderError)}
	var p struct {
		TurnID string `json:"turn_id"`
	}
	if json.Unmarshal(m.Data, &p) == nil && events.ValidID(p.TurnID) {
		l.Turn = p.TurnID
	} else if _, turn, ok := events.InboxKind(l.Subject); ok && events.ValidID(turn) {
		l.Turn = turn
	}
	return l
}

// List reads the dead letters of stream in order, one direct get of the
// next message at a time, skipping the gaps retries leave.
func List(ctx context.Context, stream jetstream.Stream) ([]Letter, error) {
	var out []Letter
	for next := uint64(1); ; {
		m, err := stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject("jetloop.dead.>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		out = append(out, Of(m))
		next = m.Sequence + 1
	}
}

// retrySchemas are the inputs a dead letter may be re-sent as: the kinds a
// client may send, each with the schema a re-sent payload must pass, so a
// payload still broken is refused here rather than becoming a new dead
// letter. Anything else a retry would send (a tool result, a model answer,
// a job, an event) would act for a worker, a model or the orchestrator.
var retrySchemas = map[string]string{
	"submit": "submit", "workflow": "workflow_submit", "control": "control",
}

// retryTarget is where dead letter m may be re-sent: the inbox subject it
// was taken from, which its Jetloop-Subject header names. It is believed
// only on a letter the trusted side wrote and only when it agrees with the
// letter's kind: a tool worker publishes jetloop.dead.job with headers of
// its choosing (docs/protocol.md, "Dead letters").
func retryTarget(m *jetstream.RawStreamMsg, fixed bool) (subject, kind string, err error) {
	kind = strings.TrimPrefix(m.Subject, "jetloop.dead.")
	if kind == "job" {
		return "", "", fmt.Errorf("dead letter %d is a tool worker's (%s): what it says of where it goes is the worker's word, so it is not re-sent", m.Sequence, m.Subject)
	}
	if _, ok := retrySchemas[kind]; !ok {
		return "", "", fmt.Errorf("dead letter %d is a %s input: only what a client may send (submit, workflow, control) is re-sent", m.Sequence, kind)
	}
	subject = m.Header.Get(headerSubject)
	if subject == "" {
		return "", "", fmt.Errorf("dead letter %d does not say where it was sent (no %s header)", m.Sequence, headerSubject)
	}
	got, turn, ok := events.InboxKind(subject)
	if !ok || got != kind || (kind == "control" && !events.ValidID(turn)) {
		return "", "", fmt.Errorf("dead letter %d of kind %s was not taken from %q: it is not re-sent", m.Sequence, kind, subject)
	}
	if m.Header.Get("Jetloop-Truncated") != "" && !fixed {
		return "", "", fmt.Errorf("dead letter %d keeps only part of its payload (%s bytes): pass the whole message with --file", m.Sequence, m.Header.Get("Jetloop-Truncated"))
	}
	return subject, kind, nil
}

// Resent is what became of a dead letter sent again: where it went, and
// whether it could be removed from the dead stream.
type Resent struct {
	Seq       uint64 `json:"seq"`
	Subject   string `json:"subject"`
	Kind      string `json:"kind"`              // of the subject: submit, control, result…
	Turn      string `json:"turn_id,omitempty"` // of a submission
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	// DeleteErr says why the letter is still listed: only admin may
	// delete a message of the dead stream.
	DeleteErr error `json:"-"`
}

// Resend re-sends dead letter seq of stream, or the fixed payload when it
// is not nil, to the subject it was taken from, and deletes it from the dead
// stream once the publish is acknowledged. Only what a client may send is
// re-sent, and only where the letter was taken from. Its Nats-Msg-Id names
// the dead letter, so running it again after a failure between the two
// does not send it twice.
func Resend(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, seq uint64, fixed []byte) (Resent, error) {
	m, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return Resent{}, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	subject, kind, err := retryTarget(m, fixed != nil)
	if err != nil {
		return Resent{}, err
	}
	data := m.Data
	if fixed != nil {
		data = fixed
	}
	if err := schemas.Validate(retrySchemas[kind], data); err != nil {
		return Resent{}, fmt.Errorf("dead letter %d would fail again: %w (fix it and pass --file)", seq, err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	for k, vs := range m.Header {
		if strings.HasPrefix(k, "Jetloop-") || strings.HasPrefix(k, "Nats-") {
			continue // the reason and routing of the failure, not of the message
		}
		msg.Header[k] = vs
	}
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(events.RetryID(seq)))
	if err != nil {
		return Resent{}, fmt.Errorf("re-send dead letter %d to %s: %w", seq, subject, err)
	}
	r := Resent{Seq: seq, Subject: subject, Kind: kind, Stream: ack.Stream, StreamSeq: ack.Sequence}
	if kind == "submit" {
		r.Turn = Of(m).Turn
		if fixed != nil {
			var p struct {
				TurnID string `json:"turn_id"`
			}
			_ = json.Unmarshal(data, &p)
			r.Turn = p.TurnID
		}
	}
	// Only admin may delete a message of the dead stream: a denied delete
	// gets no answer, so it is not given the whole command's time.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r.DeleteErr = stream.DeleteMsg(dctx, seq)
	return r, nil
}
