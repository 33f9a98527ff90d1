package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict is an append that lost the optimistic-concurrency race: another
// writer extended the turn first. Reload, decide again, retry.
var ErrConflict = errors.New("bus: the turn's log moved on")

// Codes of the wrong-last-sequence error of an expected-sequence publish on a
// single-replica (10071) and a clustered (10164) stream.
const (
	codeWrongLastSeq        = 10071
	codeWrongLastSeqCluster = 10164
)

// TooBigError is something a turn did that cannot be stored: bigger, once
// encoded, than the server's max payload. It ends the turn with an error
// that names the size instead of an append that fails for ever.
type TooBigError struct {
	What string
	Size int
	Max  int64
}

func (e *TooBigError) Error() string {
	return fmt.Sprintf("%s of %d bytes exceeds the server's max payload (%d bytes)", e.What, e.Size, e.Max)
}

// headerRoom is what the headers and protocol add to an event's bytes.
const headerRoom = 512

// Store reads and appends turn logs in JETLOOP_EVENTS.
type Store struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// NewStore binds the events stream, which must exist.
func NewStore(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	st, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("bus: bind %s: %w", events.StreamEvents, err)
	}
	return &Store{js: js, stream: st}, nil
}

// Last returns a turn's last event and its stream sequence; ok is false when
// the turn has no log.
func (s *Store) Last(ctx context.Context, turn string) (e events.Envelope, seq uint64, ok bool, err error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, events.TurnEventsFilter(turn))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.Envelope{}, 0, false, nil
	}
	if err != nil {
		return events.Envelope{}, 0, false, fmt.Errorf("bus: last event of %s: %w", turn, err)
	}
	if err := events.DecodeEnvelope(m.Data, &e); err != nil {
		return events.Envelope{}, 0, false, fmt.Errorf("bus: last event of %s: %w", turn, err)
	}
	return e, m.Sequence, true, nil
}

// Read returns a turn's whole log and the stream sequence of its last event
// (0 and no events when the turn has none).
func (s *Store) Read(ctx context.Context, turn string) ([]events.Envelope, uint64, error) {
	last, seq, ok, err := s.Last(ctx, turn)
	if err != nil || !ok {
		return nil, 0, err
	}
	log, err := s.readSubject(ctx, events.EventsSubject(last.SessionID, turn), seq)
	if err != nil {
		return nil, 0, err
	}
	return log.events, log.lastSeq, nil
}

// readSubject reads a subject's messages up to stream sequence upTo, one
// direct get of the next message on the subject at a time: no consumer is
// created, so frequent reads leave nothing behind on the server.
func (s *Store) readSubject(ctx context.Context, subject string, upTo uint64) (logWithSeq, error) {
	var out logWithSeq
	for next := uint64(1); next <= upTo; {
		m, err := s.stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return logWithSeq{}, fmt.Errorf("bus: read %s: log ends before sequence %d", subject, upTo)
		}
		if err != nil {
			return logWithSeq{}, fmt.Errorf("bus: read %s: %w", subject, err)
		}
		var e events.Envelope
		if err := events.DecodeEnvelope(m.Data, &e); err != nil {
			return logWithSeq{}, fmt.Errorf("bus: read %s: event at %d: %w", subject, m.Sequence, err)
		}
		out.events = append(out.events, e)
		out.lastSeq = m.Sequence
		next = m.Sequence + 1
	}
	return out, nil
}

type logWithSeq struct {
	events  []events.Envelope
	lastSeq uint64
}

// ErrIsWorkflow: the id names a workflow's log, not a turn's (the two share
// one namespace).
var ErrIsWorkflow = errors.New("bus: the id is a workflow's")

// LoadWorkflow folds a workflow's log into its state and returns the stream
// sequence of its last event. A workflow without a log is workflow.New; a
// turn's log is ErrIsTurn.
func (s *Store) LoadWorkflow(ctx context.Context, id string) (*workflow.State, uint64, error) {
	log, lastSeq, err := s.Read(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if len(log) > 0 && !log[0].Type.Workflow() {
		return nil, 0, fmt.Errorf("%w: %s", ErrIsTurn, id)
	}
	st, err := workflow.Fold(log)
	if err != nil {
		return nil, 0, fmt.Errorf("bus: fold workflow %s: %w", id, err)
	}
	if st.ID == "" {
		st = workflow.New(id)
	}
	return st, lastSeq, nil
}

// ErrIsTurn: the id names a turn's log, not a workflow's.
var ErrIsTurn = errors.New("bus: the id is a turn's")

// Load folds a turn's log into its state and returns the stream sequence of
// its last event. A turn without a log is fsm.New.
func (s *Store) Load(ctx context.Context, turn string) (*fsm.State, uint64, error) {
	log, lastSeq, err := s.Read(ctx, turn)
	if err != nil {
		return nil, 0, err
	}
	if len(log) > 0 && log[0].Type.Workflow() {
		return nil, 0, fmt.Errorf("%w: %s", ErrIsWorkflow, turn)
	}
	st, err := fsm.Fold(log)
	if err != nil {
		return nil, 0, fmt.Errorf("bus: fold %s: %w", turn, err)
	}
	if st.TurnID == "" {
		st = fsm.New(turn)
	}
	return st, lastSeq, nil
}

// Append writes events to a turn's log one by one, each expecting the
// previous one's stream sequence (optimistic concurrency) and carrying its
// event id as Nats-Msg-Id (a retried publish is dropped). It returns the
// stream sequence of the last event written. Atomic batches cost more than
// sequential appends on these servers, and a partial append is repaired by
// the machine on the retry.
func (s *Store) Append(ctx context.Context, last uint64, evs []events.Envelope) (uint64, error) {
	var buf []byte // the client copies each event out before its publish returns
	for _, e := range evs {
		data, err := events.AppendEnvelope(buf[:0], e)
		buf = data
		if err != nil {
			return last, fmt.Errorf("bus: encode %s: %w", e.Type, err)
		}
		msg := &nats.Msg{Subject: events.EventsSubject(e.SessionID, e.TurnID), Data: data, Header: nats.Header{}}
		msg.Header.Set(events.HeaderType, string(e.Type))
		if limit := s.js.Conn().MaxPayload(); int64(len(data))+headerRoom > limit {
			return last, &TooBigError{What: "event " + string(e.Type), Size: len(data), Max: limit}
		}
		ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgID(e.ID))
		if err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == codeWrongLastSeq || apiErr.ErrorCode == codeWrongLastSeqCluster) {
				return last, fmt.Errorf("%w: %s at seq %d", ErrConflict, e.TurnID, e.Seq)
			}
			return last, fmt.Errorf("bus: append %s: %w", msg.Subject, err)
		}
		last = ack.Sequence
	}
	return last, nil
}

// Subjects lists the subjects of the events stream that match filter, with
// their message counts: one subject per turn.
func (s *Store) Subjects(ctx context.Context, filter string) (map[string]uint64, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("bus: list %s: %w", filter, err)
	}
	return info.State.Subjects, nil
}

// PurgeThrough removes a subject's messages up to and including seq: the
// orchestrator's one purge, which replaces a turn's rejection by its start.
func (s *Store) PurgeThrough(ctx context.Context, subject string, seq uint64) error {
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq+1))
}

// TurnOf returns the turn id of an events subject.
func TurnOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
