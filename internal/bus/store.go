package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict is an append that lost the optimistic-concurrency race: another
// writer extended the turn first. Reload, decide again, retry.
var ErrConflict = errors.New("bus: the turn's log moved on")

// Codes of the wrong-last-sequence error of an expected-sequence publish on a
// single-replica (10071) and a clustered (10164) stream, and of the
// wrong-last-message-id error of an expected-last-id publish.
const (
	codeWrongLastSeq        = 10071
	codeWrongLastSeqCluster = 10164
	codeWrongLastMsgID      = 10070
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

// Store reads and appends turn logs in the events streams of the
// deployment's layout (events.Layout): JETLOOP_EVENTS, or the streams
// JETLOOP_EVENTS_<k>, each log in the one its turn's id maps to.
type Store struct {
	js     jetstream.JetStream
	layout events.Layout
	// streams are the layout's streams, by index; reads the handles turn
	// logs are read with: the stream itself on a single replica, one whose
	// gets the stream's leader answers on a cluster (see leaderReads).
	streams []jetstream.Stream
	reads   []jetstream.Stream
	// replicated: the streams have more than one replica, so a decision's
	// events are not sent together (see Append); mu keeps one decision's
	// sends together on the connection.
	replicated bool
	mu         sync.Mutex
	// Grouped stores a decision's events as one message (see Append); set
	// by NewStore. Off, each event is a message of its own, the layout
	// every reader also reads.
	Grouped bool
}

// NewStore binds the events streams, which must exist, in the layout they
// have (FindLayout).
func NewStore(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	layout, err := FindLayout(ctx, js)
	if err != nil {
		return nil, err
	}
	s := &Store{js: js, layout: layout, Grouped: true}
	for _, name := range layout.Names() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("bus: bind %s: %w", name, err)
		}
		s.streams = append(s.streams, st)
		s.replicated = s.replicated || st.CachedInfo().Config.Replicas > 1
	}
	s.reads = s.streams
	if s.replicated {
		s.reads = make([]jetstream.Stream, len(s.streams))
		for k, name := range layout.Names() {
			if s.reads[k], err = leaderReads(ctx, js, name); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// ErrNoEvents: the server has no events stream in any layout.
var ErrNoEvents = fmt.Errorf("bus: no events stream (%s or %s): %w", events.StreamEvents, events.PartitionedStream(0), jetstream.ErrStreamNotFound)

// FindLayout learns the layout of the logs from the streams that exist:
// JETLOOP_EVENTS is the one-stream layout; otherwise JETLOOP_EVENTS_0's
// subjects say how many streams there are. A reader needs nothing but
// stream info to learn it, so no setting has to agree across processes.
func FindLayout(ctx context.Context, js jetstream.JetStream) (events.Layout, error) {
	_, err := js.Stream(ctx, events.StreamEvents)
	if err == nil {
		return events.OneStream, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return events.Layout{}, fmt.Errorf("bus: bind %s: %w", events.StreamEvents, err)
	}
	first, err := js.Stream(ctx, events.PartitionedStream(0))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return events.Layout{}, ErrNoEvents
	}
	if err != nil {
		return events.Layout{}, fmt.Errorf("bus: bind %s: %w", events.PartitionedStream(0), err)
	}
	subjects := first.CachedInfo().Config.Subjects
	layout, ok := events.LayoutOf(0, subjects)
	if !ok {
		return events.Layout{}, fmt.Errorf("bus: %s takes %v, which is no layout of the logs (docs/protocol.md, \"Where a log is stored\")",
			events.PartitionedStream(0), subjects)
	}
	return layout, nil
}

// Layout is how the store's logs are laid out.
func (s *Store) Layout() events.Layout { return s.layout }

// ReadsOf is the handle the log of id is read with.
func (s *Store) ReadsOf(id string) jetstream.Stream { return s.reads[s.index(id)] }

// Reads is the handle the stream named name, one of the layout's, is read
// with.
func (s *Store) Reads(name string) jetstream.Stream {
	for k, n := range s.layout.Names() {
		if n == name {
			return s.reads[k]
		}
	}
	panic("bus: " + name + " is not an events stream of the layout")
}

func (s *Store) index(id string) int {
	if !s.layout.Partitioned() {
		return 0
	}
	return events.Partition(id) % s.layout.Streams
}

// leaderReads binds a stream with a handle whose gets its leader answers.
//
// A direct get may be answered by a follower only 90 % caught up, so a log
// read that way can miss acknowledged appends; an append fences a decision,
// but nothing fences what a read alone concludes (a job taken for one nobody
// waits for). The leader stores an append before acknowledging it. nats.go
// picks direct gets by the handle's cached config, so this handle's has
// none; use it for gets only, as Info would cache the server's config again.
func leaderReads(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bus: bind %s: %w", name, err)
	}
	st.CachedInfo().Config.AllowDirect = false
	return st, nil
}

// Last returns a turn's last event and its stream sequence; ok is false when
// the turn has no log.
func (s *Store) Last(ctx context.Context, turn string) (e events.Envelope, seq uint64, ok bool, err error) {
	m, err := s.get(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return s.ReadsOf(turn).GetLastMsgForSubject(ctx, s.layout.TurnFilter(turn))
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.Envelope{}, 0, false, nil
	}
	if err != nil {
		return events.Envelope{}, 0, false, fmt.Errorf("bus: last event of %s: %w", turn, err)
	}
	// The last message may store a decision's events: its last is the
	// turn's last event.
	if e, err = events.LastOf(m.Data); err != nil {
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
	log, err := s.readSubject(ctx, s.ReadsOf(turn), s.layout.Subject(last.SessionID, turn), seq)
	if err != nil {
		return nil, 0, err
	}
	return log.events, log.lastSeq, nil
}

// get makes one read of the events stream. On a cluster, a get sent while
// the stream has no leader (a node lost, an election under way) is
// answered by nobody: it is sent again every readAttempt, to the leader
// elected since, rather than wait out the caller's whole deadline, which
// held inputs and model jobs many seconds past an election.
func (s *Store) get(ctx context.Context, read func(context.Context) (*jetstream.RawStreamMsg, error)) (*jetstream.RawStreamMsg, error) {
	if !s.replicated {
		return read(ctx)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, readAttempt)
		m, err := read(actx)
		cancel()
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return m, err
		}
	}
}

// readAttempt bounds one read on a cluster (see get).
const readAttempt = 2 * time.Second

// readSubject reads a subject's messages up to stream sequence upTo, one
// get of the next message on the subject at a time (direct on a single
// server): no consumer is created, so frequent reads leave nothing behind
// on the server.
func (s *Store) readSubject(ctx context.Context, reads jetstream.Stream, subject string, upTo uint64) (logWithSeq, error) {
	var out logWithSeq
	for next := uint64(1); next <= upTo; {
		m, err := s.get(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return reads.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subject))
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return logWithSeq{}, fmt.Errorf("bus: read %s: log ends before sequence %d", subject, upTo)
		}
		if err != nil {
			return logWithSeq{}, fmt.Errorf("bus: read %s: %w", subject, err)
		}
		if err := events.Each(m.Data, func(e events.Envelope) error {
			out.events = append(out.events, e)
			return nil
		}); err != nil {
			return logWithSeq{}, fmt.Errorf("bus: read %s: message at %d: %w", subject, m.Sequence, err)
		}
		out.lastSeq = m.Sequence
		next = m.Sequence + 1
	}
	return out, nil
}

type logWithSeq struct {
	events  []events.Envelope
	lastSeq uint64
}

// Append writes a decision's events to a turn's log, expecting the turn's
// last stream sequence (optimistic concurrency), and returns the stream
// sequence of the last message written.
//
// A decision that fits is one message (docs/protocol.md, "Reading a log"):
// one fsync under sync_interval: always (docs/durability.md), stored all or
// nothing, and dropped when retried (its Nats-Msg-Id is the first event's
// id). A bigger one is one event per message, a partial append repaired by
// the machine on the retry; atomic batches would cost more and be fsynced
// message by message all the same.
//
// On a single-replica stream those messages go out without waiting for each
// ack, each expecting the one before it as the stream's last
// (Nats-Expected-Last-Msg-Id), which the first one's check fenced; if
// another append came between, the rest are appended one by one. A
// clustered stream refuses that with a message in flight, so there they
// always go one by one.
func (s *Store) Append(ctx context.Context, last uint64, evs []events.Envelope) (uint64, error) {
	if s.Grouped && len(evs) > 1 {
		if last, ok, err := s.appendGroup(ctx, last, evs); ok || err != nil {
			return last, err
		}
	}
	data := make([][]byte, len(evs))
	for i, e := range evs {
		var err error
		if data[i], err = events.AppendEnvelope(nil, e); err != nil {
			return last, fmt.Errorf("bus: encode %s: %w", e.Type, err)
		}
		if limit := s.js.Conn().MaxPayload(); int64(len(data[i]))+headerRoom > limit {
			return last, &TooBigError{What: "event " + string(e.Type), Size: len(data[i]), Max: limit}
		}
	}
	if !s.replicated && len(evs) > 1 {
		return s.appendTogether(ctx, last, evs, data)
	}
	return s.appendEach(ctx, last, evs, data)
}

// Replicated reports whether the events streams have more than one replica:
// jetloop runs on a cluster.
func (s *Store) Replicated() bool { return s.replicated }

// eventMsg is an event's message, with no publish options set yet.
func (s *Store) eventMsg(e events.Envelope, data []byte) *nats.Msg {
	msg := &nats.Msg{Subject: s.layout.Subject(e.SessionID, e.TurnID), Data: data, Header: nats.Header{}}
	msg.Header.Set(events.HeaderType, string(e.Type))
	return msg
}

// appendGroup stores a decision's events as one message; ok is false,
// with nothing sent, when they do not fit in one.
func (s *Store) appendGroup(ctx context.Context, last uint64, evs []events.Envelope) (uint64, bool, error) {
	data, err := events.AppendGroup(nil, evs)
	if err != nil {
		return last, false, fmt.Errorf("bus: encode %s: %w", evs[0].Type, err)
	}
	if int64(len(data))+headerRoom > s.js.Conn().MaxPayload() {
		return last, false, nil
	}
	first, final := evs[0], evs[len(evs)-1]
	msg := &nats.Msg{Subject: s.layout.Subject(first.SessionID, first.TurnID), Data: data, Header: nats.Header{}}
	msg.Header.Set(events.HeaderType, string(final.Type))
	msg.Header.Set(events.HeaderEvents, strconv.Itoa(len(evs)))
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgID(first.ID))
	if err != nil {
		return last, true, appendError(msg.Subject, first, err)
	}
	return ack.Sequence, true, nil
}

func (s *Store) appendEach(ctx context.Context, last uint64, evs []events.Envelope, data [][]byte) (uint64, error) {
	for i, e := range evs {
		msg := s.eventMsg(e, data[i])
		ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgID(e.ID))
		if err != nil {
			return last, appendError(msg.Subject, e, err)
		}
		last = ack.Sequence
	}
	return last, nil
}

func (s *Store) appendTogether(ctx context.Context, last uint64, evs []events.Envelope, data [][]byte) (uint64, error) {
	acks := make([]jetstream.PubAckFuture, 0, len(evs))
	s.mu.Lock()
	for i, e := range evs {
		expect := jetstream.WithExpectLastSequencePerSubject(last)
		if i > 0 {
			expect = jetstream.WithExpectLastMsgID(evs[i-1].ID)
		}
		ack, err := s.js.PublishMsgAsync(s.eventMsg(e, data[i]), expect, jetstream.WithMsgID(e.ID))
		if err != nil {
			break // the ones sent are awaited; the rest go one by one
		}
		acks = append(acks, ack)
	}
	s.mu.Unlock()
	for i, ack := range acks {
		select {
		case a := <-ack.Ok():
			last = a.Sequence
		case err := <-ack.Err():
			var apiErr *jetstream.APIError
			if i > 0 && errors.As(err, &apiErr) && apiErr.ErrorCode == codeWrongLastMsgID {
				// Another append came between: the rest, one by one,
				// fenced by this turn's last sequence again.
				return s.appendEach(ctx, last, evs[i:], data[i:])
			}
			return last, appendError(ack.Msg().Subject, evs[i], err)
		case <-ctx.Done():
			return last, fmt.Errorf("bus: append %s: %w", ack.Msg().Subject, ctx.Err())
		}
	}
	if n := len(acks); n < len(evs) {
		return s.appendEach(ctx, last, evs[n:], data[n:])
	}
	return last, nil
}

// appendError names an append's failure; a lost race is ErrConflict.
func appendError(subject string, e events.Envelope, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == codeWrongLastSeq || apiErr.ErrorCode == codeWrongLastSeqCluster) {
		return fmt.Errorf("%w: %s at seq %d", ErrConflict, e.TurnID, e.Seq)
	}
	return fmt.Errorf("bus: append %s: %w", subject, err)
}

// Subjects lists the subjects of the events streams that match filter, with
// their message counts: one subject per turn. Take the filter from the
// store's Layout.
func (s *Store) Subjects(ctx context.Context, filter string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, st := range s.streams {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return nil, fmt.Errorf("bus: list %s in %s: %w", filter, st.CachedInfo().Config.Name, err)
		}
		maps.Copy(out, info.State.Subjects)
	}
	return out, nil
}

// PurgeThrough removes a turn's messages up to and including seq: the
// orchestrator's one purge, which replaces a turn's rejection by its start.
func (s *Store) PurgeThrough(ctx context.Context, session, turn string, seq uint64) error {
	return s.streams[s.index(turn)].Purge(ctx, jetstream.WithPurgeSubject(s.layout.Subject(session, turn)), jetstream.WithPurgeSequence(seq+1))
}

// TurnOf returns the turn id of an events subject.
func TurnOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
