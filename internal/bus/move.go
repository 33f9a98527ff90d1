package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pivotSubjects are JETLOOP_EVENTS's subjects while a move is under way:
// the one-stream layout's logs, two tokens, which overlap no partitioned
// stream's three (the server refuses streams whose subjects overlap).
const pivotSubjects = "jetloop.events.*.*"

// Metadata of JETLOOP_EVENTS while a move is under way: the number of
// streams it moves the logs to, and whether JETLOOP_EVENTS is still being
// filled from partitioned streams (its copy is not whole yet).
const (
	metaMoveTo  = "jetloop_move_to"
	metaFilling = "jetloop_move_filling"
	copyWindow  = 256
)

// OrchestratorsLiveError: a move of the logs was refused because
// orchestrators are live.
type OrchestratorsLiveError struct{ Names []string }

func (e *OrchestratorsLiveError) Error() string {
	return fmt.Sprintf("bus: %d orchestrator(s) live (%s in %s): stop them all before moving the logs; a stopped one's key expires %s after it stops",
		len(e.Names), strings.Join(e.Names, ", "), BucketOrchestrators, OrchestratorsTTL)
}

// MoveUnfinishedError: a move of the logs stopped half-way (JETLOOP_EVENTS
// takes the pivot's subjects); no process runs on the logs until it is
// finished.
type MoveUnfinishedError struct{ To int }

func (e *MoveUnfinishedError) Error() string {
	to := "N"
	if e.To > 0 {
		to = strconv.Itoa(e.To)
	}
	return fmt.Sprintf("bus: a move of the logs (to %s events stream(s)) is unfinished: run `jetloop streams move --event-streams %s` again (docs/scaling.md, \"Moving the logs\")", to, to)
}

// unfinishedMove returns a *MoveUnfinishedError when JETLOOP_EVENTS takes
// the pivot's subjects, which only a move leaves it with.
func unfinishedMove(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, events.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bus: stream %s: %w", events.StreamEvents, err)
	}
	cfg := s.CachedInfo().Config
	if !slices.Equal(cfg.Subjects, []string{pivotSubjects}) {
		return nil
	}
	to, _ := strconv.Atoi(cfg.Metadata[metaMoveTo])
	return &MoveUnfinishedError{To: to}
}

// MoveLogs moves every turn's log from the layout the server has to
// p.Layout(), reporting each step to progress. The new streams keep the old
// ones' replicas, age and (shared out) bound; p gives only the layout.
//
// Layouts' subjects overlap, so the move pivots on JETLOOP_EVENTS taking
// jetloop.events.*.* (pivotSubjects). From one stream to P: JETLOOP_EVENTS
// takes the pivot, the P streams are made, every message is copied to them,
// the counts of every log are compared, and JETLOOP_EVENTS is deleted. From
// P streams to one: JETLOOP_EVENTS is made on the pivot, marked as being
// filled (metaFilling), the messages copied in the order they were first
// stored, the counts compared, the mark taken off, the P streams deleted and
// JETLOOP_EVENTS given jetloop.events.> again. P to P' is P to 1, then 1 to P'.
//
// A move that stopped half-way is finished by running it again: while
// JETLOOP_EVENTS takes the pivot, it is the whole copy of the logs unless
// marked as being filled, when the partitioned streams are; a copy skips
// what its target already holds of each log (a prefix: each message sent
// expects the previous one as its stream's last). Until it is finished,
// FindLayout says one stream, which is whole except while being filled, and
// EnsureStreams, Apply and Check refuse with a *MoveUnfinishedError, so no
// orchestrator starts on half-moved logs.
//
// It refuses while any orchestrator is live (an *OrchestratorsLiveError): one
// appending to a log being copied would lose what it appended.
func MoveLogs(ctx context.Context, js jetstream.JetStream, p Provision, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if err := p.Layout().Check(); err != nil {
		return err
	}
	m := &mover{js: js, p: p, want: p.Layout(), progress: progress}
	st, err := m.look(ctx)
	if err != nil {
		return err
	}
	switch {
	case st.one == nil && len(st.parts) == 0:
		return ErrNoEvents
	case st.one == nil && st.whole() == nil && st.layout == m.want:
		progress(fmt.Sprintf("the logs are in %d streams already: nothing to do", m.want.Streams))
		return nil
	case st.one != nil && m.want == events.OneStream && slices.Equal(st.one.CachedInfo().Config.Subjects, events.OneStream.StreamSubjects(0)):
		progress("the logs are in " + events.StreamEvents + " already: nothing to do")
		return nil
	}
	if err := m.noOrchestrators(ctx); err != nil {
		return err
	}
	if st.one == nil {
		if err := st.whole(); err != nil {
			return err
		}
		return m.toOne(ctx, st)
	}
	cfg := st.one.CachedInfo().Config
	switch {
	case slices.Equal(cfg.Subjects, events.OneStream.StreamSubjects(0)):
		return m.fromOne(ctx, st)
	case !slices.Equal(cfg.Subjects, []string{pivotSubjects}):
		return fmt.Errorf("bus: %s takes %v, which no layout of the logs or move gives", events.StreamEvents, cfg.Subjects)
	case cfg.Metadata[metaFilling] == "":
		return m.fromOne(ctx, st)
	}
	// JETLOOP_EVENTS was being filled from the partitioned streams, which
	// are whole.
	if err := st.whole(); err != nil {
		return fmt.Errorf("%w, and %s holds only part of the logs: restore the streams from a backup", err, events.StreamEvents)
	}
	if st.layout == m.want {
		if err := m.deleteStream(ctx, events.StreamEvents); err != nil {
			return err
		}
		progress(fmt.Sprintf("deleted the part copy in %s: the logs stay in %d streams", events.StreamEvents, m.want.Streams))
		return nil
	}
	return m.toOne(ctx, st)
}

type mover struct {
	js       jetstream.JetStream
	p        Provision
	want     events.Layout
	progress func(string)
}

// moveState is what events streams the server has.
type moveState struct {
	one    jetstream.Stream         // JETLOOP_EVENTS, or nil
	parts  map[int]jetstream.Stream // JETLOOP_EVENTS_<k> that exist
	layout events.Layout            // the partitioned streams' layout
}

// whole reports an error unless every stream of the partitioned layout is
// there.
func (st moveState) whole() error {
	if _, ok := st.parts[0]; !ok {
		return fmt.Errorf("bus: %s is missing", events.PartitionedStream(0))
	}
	for k := range st.layout.Streams {
		if _, ok := st.parts[k]; !ok {
			return fmt.Errorf("bus: %s of the %d-stream layout is missing", events.PartitionedStream(k), st.layout.Streams)
		}
	}
	return nil
}

func (st moveState) partNames() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(st.parts)) {
		out = append(out, events.PartitionedStream(k))
	}
	return out
}

func (m *mover) look(ctx context.Context) (moveState, error) {
	st := moveState{parts: map[int]jetstream.Stream{}}
	s, err := m.js.Stream(ctx, events.StreamEvents)
	switch {
	case err == nil:
		st.one = s
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return st, fmt.Errorf("bus: stream %s: %w", events.StreamEvents, err)
	}
	for k := range events.Partitions {
		s, err := m.js.Stream(ctx, events.PartitionedStream(k))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("bus: stream %s: %w", events.PartitionedStream(k), err)
		}
		st.parts[k] = s
	}
	if s, ok := st.parts[0]; ok {
		subjects := s.CachedInfo().Config.Subjects
		layout, ok := events.LayoutOf(0, subjects)
		if !ok {
			return st, fmt.Errorf("bus: %s takes %v, which is no layout of the logs", events.PartitionedStream(0), subjects)
		}
		st.layout = layout
	}
	return st, nil
}

func (m *mover) noOrchestrators(ctx context.Context) error {
	kv, err := m.js.KeyValue(ctx, BucketOrchestrators)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bus: bucket %s: %w", BucketOrchestrators, err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("bus: list %s: %w", BucketOrchestrators, err)
	}
	var live []string
	for k := range keys.Keys() {
		live = append(live, k)
	}
	// The lister stops itself once it has listed every key.
	_ = keys.Stop()
	if len(live) > 0 {
		slices.Sort(live)
		return &OrchestratorsLiveError{Names: live}
	}
	return nil
}

// inherit takes the settings of the streams the logs are in now.
func (m *mover) inherit(streams []jetstream.Stream) {
	first := streams[0].CachedInfo().Config
	m.p.Replicas, m.p.EventsMaxAge = max(first.Replicas, 1), first.MaxAge
	var total int64
	for _, s := range streams {
		b := s.CachedInfo().Config.MaxBytes
		if b <= 0 {
			total = -1
			break
		}
		total += b
	}
	m.p.EventsMaxBytes = total
}

// fromOne moves the logs from JETLOOP_EVENTS, which holds them all, to the
// wanted layout.
func (m *mover) fromOne(ctx context.Context, st moveState) error {
	m.inherit([]jetstream.Stream{st.one})
	cfg := st.one.CachedInfo().Config
	if !slices.Equal(cfg.Subjects, []string{pivotSubjects}) || cfg.Metadata[metaMoveTo] != strconv.Itoa(m.want.Streams) {
		if err := m.placeable(ctx, st.one); err != nil {
			return err
		}
		cfg.Subjects = []string{pivotSubjects}
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		cfg.Metadata[metaMoveTo] = strconv.Itoa(m.want.Streams)
		if err := m.update(ctx, cfg); err != nil {
			return err
		}
		m.progress(fmt.Sprintf("%s takes %s while the logs move", events.StreamEvents, pivotSubjects))
		// One that started before: no orchestrator starts from now on.
		if err := m.noOrchestrators(ctx); err != nil {
			return err
		}
	}
	if m.want == events.OneStream {
		// Streams left by a move from them that stopped before deleting
		// them: JETLOOP_EVENTS, not being filled, holds every log.
		for _, name := range st.partNames() {
			if err := m.deleteStream(ctx, name); err != nil {
				return err
			}
			m.progress("deleted stream " + name + " (its logs were copied)")
		}
		return m.settle(ctx)
	}
	// Streams of the wanted layout are a copy under way, kept; those of
	// another hold nothing JETLOOP_EVENTS does not.
	keep := st.layout == m.want
	for _, k := range slices.Sorted(maps.Keys(st.parts)) {
		if keep && k < m.want.Streams {
			continue
		}
		if err := m.deleteStream(ctx, events.PartitionedStream(k)); err != nil {
			return err
		}
		m.progress("deleted stream " + events.PartitionedStream(k) + " (" + events.StreamEvents + " holds every log)")
	}
	p := m.p
	p.EventStreams = m.want.Streams
	for k, c := range p.EventsConfigs() {
		if _, ok := st.parts[k]; ok && keep {
			continue
		}
		if err := create(ctx, m.js, c); err != nil {
			return fmt.Errorf("bus: create stream %s: %w", c.Name, err)
		}
		m.progress("created stream " + c.Name)
	}
	if err := m.copyAndVerify(ctx, []string{events.StreamEvents}, events.OneStream, m.want); err != nil {
		return err
	}
	if err := m.deleteStream(ctx, events.StreamEvents); err != nil {
		return err
	}
	m.progress(fmt.Sprintf("deleted stream %s: the logs are in %d streams", events.StreamEvents, m.want.Streams))
	return nil
}

// toOne copies the logs from the partitioned streams, which hold them all,
// to JETLOOP_EVENTS, and goes on from there when more than one is wanted.
func (m *mover) toOne(ctx context.Context, st moveState) error {
	var sources []jetstream.Stream
	for k := range st.layout.Streams {
		sources = append(sources, st.parts[k])
	}
	m.inherit(sources)
	if st.one == nil {
		p := m.p
		p.EventStreams = 1
		cfg := p.EventsConfigs()[0]
		cfg.Subjects = []string{pivotSubjects}
		cfg.Metadata = map[string]string{metaMoveTo: strconv.Itoa(m.want.Streams), metaFilling: "true"}
		if err := create(ctx, m.js, cfg); err != nil {
			return fmt.Errorf("bus: create stream %s: %w", cfg.Name, err)
		}
		m.progress(fmt.Sprintf("created stream %s on %s to gather the logs", events.StreamEvents, pivotSubjects))
		if err := m.noOrchestrators(ctx); err != nil {
			return err
		}
	}
	if err := m.copyAndVerify(ctx, st.layout.Names(), st.layout, events.OneStream); err != nil {
		return err
	}
	one, err := m.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return fmt.Errorf("bus: stream %s: %w", events.StreamEvents, err)
	}
	cfg := one.CachedInfo().Config
	cfg.Metadata = maps.Clone(cfg.Metadata)
	delete(cfg.Metadata, metaFilling)
	if err := m.update(ctx, cfg); err != nil {
		return err
	}
	for _, name := range st.layout.Names() {
		if err := m.deleteStream(ctx, name); err != nil {
			return err
		}
		m.progress("deleted stream " + name)
	}
	if m.want == events.OneStream {
		return m.settle(ctx)
	}
	st, err = m.look(ctx)
	if err != nil {
		return err
	}
	return m.fromOne(ctx, st)
}

// settle gives JETLOOP_EVENTS, which holds every log and is the only
// events stream left, the one-stream layout's subjects.
func (m *mover) settle(ctx context.Context) error {
	one, err := m.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return fmt.Errorf("bus: stream %s: %w", events.StreamEvents, err)
	}
	cfg := one.CachedInfo().Config
	cfg.Subjects = events.OneStream.StreamSubjects(0)
	cfg.Metadata = maps.Clone(cfg.Metadata)
	delete(cfg.Metadata, metaMoveTo)
	delete(cfg.Metadata, metaFilling)
	if err := m.update(ctx, cfg); err != nil {
		return err
	}
	m.progress(fmt.Sprintf("%s takes %s: the logs are in 1 stream", events.StreamEvents, cfg.Subjects[0]))
	return nil
}

// placeable refuses, before anything changes, a JETLOOP_EVENTS holding
// messages on subjects that are no log's (jetloop.events.> takes any):
// they have no place in another layout.
func (m *mover) placeable(ctx context.Context, one jetstream.Stream) error {
	info, err := one.Info(ctx, jetstream.WithSubjectFilter("jetloop.events.>"))
	if err != nil {
		return fmt.Errorf("bus: list the subjects of %s: %w", events.StreamEvents, err)
	}
	var odd []string
	for subj := range info.State.Subjects {
		if _, _, ok := parseLog(subj, events.OneStream); !ok {
			odd = append(odd, subj)
		}
	}
	if len(odd) > 0 {
		slices.Sort(odd)
		return fmt.Errorf("bus: %s holds messages on %d subject(s) that are no turn's log (%s): purge them (nats stream purge %s --subject ...) before moving the logs",
			events.StreamEvents, len(odd), strings.Join(odd[:min(len(odd), 5)], ", "), events.StreamEvents)
	}
	return nil
}

// parseLog returns the session and turn of a log's subject in layout l.
func parseLog(subject string, l events.Layout) (session, turn string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "jetloop.events.")
	if !ok {
		return "", "", false
	}
	tokens := strings.Split(rest, ".")
	want := 2
	if l.Partitioned() {
		want = 3
	}
	if len(tokens) != want || slices.Contains(tokens, "") {
		return "", "", false
	}
	return tokens[want-2], tokens[want-1], true
}

func (m *mover) update(ctx context.Context, cfg jetstream.StreamConfig) error {
	// The server keeps metadata of its own under _nats., which it sets.
	for k := range cfg.Metadata {
		if strings.HasPrefix(k, "_nats.") {
			delete(cfg.Metadata, k)
		}
	}
	if err := tryAgain(ctx, func(tctx context.Context) error {
		_, err := m.js.UpdateStream(tctx, cfg)
		return err
	}); err != nil {
		return fmt.Errorf("bus: update stream %s: %w", cfg.Name, err)
	}
	return nil
}

func (m *mover) deleteStream(ctx context.Context, name string) error {
	err := tryAgain(ctx, func(tctx context.Context) error {
		err := m.js.DeleteStream(tctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bus: delete stream %s: %w", name, err)
	}
	return nil
}

// copyAndVerify copies every message of the streams from (in layout
// fromL) that the streams of layout to do not hold yet, then compares the
// number of messages of every log in both.
func (m *mover) copyAndVerify(ctx context.Context, from []string, fromL, to events.Layout) error {
	held, err := m.counts(ctx, to.Names(), to, nil)
	if err != nil {
		return err
	}
	skip := maps.Clone(held)
	var readers []*reader
	defer func() {
		for _, r := range readers {
			r.close()
		}
	}()
	for _, name := range from {
		r, err := m.openReader(ctx, name)
		if err != nil {
			return err
		}
		readers = append(readers, r)
	}
	w := &writer{js: m.js, last: map[string]string{}, window: copyWindow}
	if m.p.Replicas > 1 {
		// A clustered stream refuses an expected last id with a message
		// in flight.
		w.window = 1
	}
	var copied, skipped int
	for {
		// The oldest message of any source next: merged, the logs keep
		// the order they were stored in, which a session's history follows.
		var next *reader
		for _, r := range readers {
			msg, err := r.peek(ctx)
			if err != nil {
				return err
			}
			if msg != nil && (next == nil || r.time.Before(next.time)) {
				next = r
			}
		}
		if next == nil {
			break
		}
		msg, _ := next.peek(ctx)
		next.pop()
		session, turn, ok := parseLog(msg.Subject(), fromL)
		if !ok {
			return fmt.Errorf("bus: %s holds a message on %s, which is no turn's log", next.name, msg.Subject())
		}
		subject := to.Subject(session, turn)
		if skip[subject] > 0 {
			skip[subject]--
			skipped++
			continue
		}
		if err := w.send(ctx, to.Stream(turn), copyMsg(subject, msg)); err != nil {
			return err
		}
		copied++
		if copied%10000 == 0 {
			m.progress(fmt.Sprintf("copied %d messages...", copied))
		}
	}
	if err := w.flush(ctx); err != nil {
		return err
	}
	line := fmt.Sprintf("copied %d messages from %s", copied, strings.Join(from, ", "))
	if skipped > 0 {
		line += fmt.Sprintf(" (%d were there from a move before)", skipped)
	}
	m.progress(line)

	want, err := m.counts(ctx, from, fromL, &to)
	if err != nil {
		return err
	}
	have, err := m.counts(ctx, to.Names(), to, nil)
	if err != nil {
		return err
	}
	all := maps.Clone(want)
	maps.Copy(all, have)
	var wrong []string
	for _, subj := range slices.Sorted(maps.Keys(all)) {
		if want[subj] != have[subj] {
			wrong = append(wrong, fmt.Sprintf("%s has %d, want %d", subj, have[subj], want[subj]))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("bus: the copy of %d log(s) differs from the original (nothing was deleted): %s", len(wrong), strings.Join(wrong[:min(len(wrong), 5)], "; "))
	}
	m.progress(fmt.Sprintf("verified %d logs: each has as many messages as before", len(want)))
	return nil
}

// counts returns the number of messages of every log in the streams names
// of layout l, under its subject in layout as when as is not nil.
func (m *mover) counts(ctx context.Context, names []string, l events.Layout, as *events.Layout) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, name := range names {
		s, err := m.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("bus: stream %s: %w", name, err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(l.AllFilter()))
		if err != nil {
			return nil, fmt.Errorf("bus: list the subjects of %s: %w", name, err)
		}
		for subj, n := range info.State.Subjects {
			if as != nil {
				session, turn, ok := parseLog(subj, l)
				if !ok {
					return nil, fmt.Errorf("bus: %s holds a message on %s, which is no turn's log", name, subj)
				}
				subj = as.Subject(session, turn)
			}
			out[subj] += n
		}
	}
	return out, nil
}

// copyMsg is msg as it is stored anew under subject: its data and headers
// (its Nats-Msg-Id, its Jetloop- headers), without the expectations it was
// published with, which the server stores with it and would check again.
func copyMsg(subject string, msg jetstream.Msg) *nats.Msg {
	out := &nats.Msg{Subject: subject, Data: msg.Data(), Header: nats.Header{}}
	for k, v := range msg.Headers() {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "nats-expected-") || strings.HasPrefix(lk, "nats-batch-") || lk == "nats-rollup" || getHeaders[lk] {
			continue
		}
		out.Header[k] = slices.Clone(v)
	}
	return out
}

// getHeaders are those a get of a message adds to its answer: a message
// copied from one by hand may hold them, and a get of its copy would take
// them for its own.
var getHeaders = map[string]bool{"nats-stream": true, "nats-subject": true, "nats-sequence": true,
	"nats-time-stamp": true, "nats-last-sequence": true, "nats-num-pending": true}

// reader reads a stream from its start with an ordered consumer, which it
// deletes when closed.
type reader struct {
	js   jetstream.JetStream
	name string
	cons jetstream.Consumer
	buf  []jetstream.Msg
	time time.Time // when the next message was stored
	end  bool
}

func (m *mover) openReader(ctx context.Context, name string) (*reader, error) {
	cons, err := m.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("bus: read %s: %w", name, err)
	}
	return &reader{js: m.js, name: name, cons: cons}, nil
}

// peek returns the next message, or nil at the end of the stream.
func (r *reader) peek(ctx context.Context) (jetstream.Msg, error) {
	for len(r.buf) == 0 && !r.end {
		// No waiting for a full batch: nothing more is coming.
		batch, err := r.cons.FetchNoWait(copyWindow)
		if err != nil {
			return nil, fmt.Errorf("bus: read %s: %w", r.name, err)
		}
		for msg := range batch.Messages() {
			r.buf = append(r.buf, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("bus: read %s: %w", r.name, err)
		}
		if len(r.buf) > 0 {
			break
		}
		// Nothing came: the end, unless the consumer has more to deliver
		// (a slow server).
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bus: read %s: %w", r.name, err)
		}
		info, err := r.cons.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("bus: read %s: %w", r.name, err)
		}
		r.end = info.NumPending == 0
	}
	if len(r.buf) == 0 {
		return nil, nil
	}
	md, err := r.buf[0].Metadata()
	if err != nil {
		return nil, fmt.Errorf("bus: read %s: %w", r.name, err)
	}
	r.time = md.Timestamp
	return r.buf[0], nil
}

func (r *reader) pop() {
	if md, err := r.buf[0].Metadata(); err == nil {
		// Nothing is written to the logs meanwhile: none pending is the end.
		r.end = r.end || md.NumPending == 0 && len(r.buf) == 1
	}
	r.buf = r.buf[1:]
}

func (r *reader) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if info := r.cons.CachedInfo(); info != nil {
		_ = r.js.DeleteConsumer(ctx, r.name, info.Name)
	}
}

// writer publishes copies, a window of them at a time, each expecting the
// one sent before it to its stream as that stream's last: a copy that fails
// fails every one after it, so what a stream holds of a copy is always a
// prefix of it, which a move run again skips.
type writer struct {
	js       jetstream.JetStream
	window   int
	last     map[string]string // stream → Nats-Msg-Id of the last message sent to it
	inflight []jetstream.PubAckFuture
}

func (w *writer) send(ctx context.Context, stream string, msg *nats.Msg) error {
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(stream)}
	if prev := w.last[stream]; prev != "" {
		opts = append(opts, jetstream.WithExpectLastMsgID(prev))
	}
	id := msg.Header.Get(jetstream.MsgIDHeader)
	if id == "" {
		// Nothing to chain the next one to: this one lands first.
		if err := w.flush(ctx); err != nil {
			return err
		}
		if _, err := w.js.PublishMsg(ctx, msg, opts...); err != nil {
			return fmt.Errorf("bus: copy to %s: %w", msg.Subject, err)
		}
		delete(w.last, stream)
		return nil
	}
	f, err := w.js.PublishMsgAsync(msg, opts...)
	if err != nil {
		return fmt.Errorf("bus: copy to %s: %w", msg.Subject, err)
	}
	w.last[stream] = id
	w.inflight = append(w.inflight, f)
	if len(w.inflight) >= w.window {
		return w.flush(ctx)
	}
	return nil
}

func (w *writer) flush(ctx context.Context) error {
	defer func() { w.inflight = w.inflight[:0] }()
	for _, f := range w.inflight {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				return fmt.Errorf("bus: copy to %s: the server took message %s for a duplicate: the logs hold two messages with that id",
					f.Msg().Subject, f.Msg().Header.Get(jetstream.MsgIDHeader))
			}
		case err := <-f.Err():
			return fmt.Errorf("bus: copy to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return fmt.Errorf("bus: copy: %w", ctx.Err())
		}
	}
	return nil
}

// DescribeLayout says in one line which streams hold the logs and, on a
// cluster, each one's leader.
func DescribeLayout(ctx context.Context, js jetstream.JetStream) (string, error) {
	if err := unfinishedMove(ctx, js); err != nil {
		st, lerr := (&mover{js: js}).look(ctx)
		if lerr != nil {
			return "", lerr
		}
		return fmt.Sprintf("events: the logs are half-moved, in %s", strings.Join(append([]string{events.StreamEvents}, st.partNames()...), ", ")), nil
	}
	layout, err := FindLayout(ctx, js)
	if errors.Is(err, ErrNoEvents) {
		return "events: the logs have no streams yet", nil
	}
	if err != nil {
		return "", err
	}
	var names []string
	for _, name := range layout.Names() {
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			names = append(names, name+" (missing)")
			continue
		}
		if err != nil {
			return "", fmt.Errorf("bus: stream %s: %w", name, err)
		}
		if c := s.CachedInfo().Cluster; c != nil && c.Name != "" && c.Leader != "" {
			name += " (leader " + c.Leader + ")"
		}
		names = append(names, name)
	}
	plural := "s"
	if len(names) == 1 {
		plural = ""
	}
	return fmt.Sprintf("events: the logs are in %d stream%s: %s", len(names), plural, strings.Join(names, ", ")), nil
}
