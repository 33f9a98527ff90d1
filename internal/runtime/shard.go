package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// entry is a cached turn: its state, the stream sequence of its last event,
// and the ids of the jobs of that state known to be published (nil after a
// fold: the process that wrote the log may have died before publishing).
type entry struct {
	state     *fsm.State
	seq       uint64
	published map[string]bool
	conv      *conversation // the encoded messages of its model jobs
}

// shard advances the turns that hash to it, one input at a time, and owns
// their cached states: no locks, and one turn's inputs stay in order.
type shard struct {
	o        *Orchestrator
	in       chan jetstream.Msg
	cache    map[string]*entry
	stopping *atomic.Bool // the process is stopping: hand inputs back
	dead     bool         // a crash hook fired: behave like a dead process
}

func (s *shard) run() {
	for msg := range s.in {
		switch {
		case s.dead:
		case s.stopping.Load():
			_ = msg.Nak() // not started: another process takes it now
		default:
			s.handle(msg)
		}
	}
}

// retry is an input that could not be handled now and comes back later.
type retry struct{ err error }

func (r *retry) Error() string { return r.err.Error() }
func (r *retry) Unwrap() error { return r.err }

// dead is an input that can never be handled: it becomes a dead letter.
type deadLetter struct{ reason string }

func (d *deadLetter) Error() string { return d.reason }

// errCrashed stops an input where a crash hook said the process died.
var errCrashed = errors.New("runtime: crash hook")

func (s *shard) handle(msg jetstream.Msg) {
	o := s.o
	// The input is finished even when the process is stopping: it was taken,
	// so it is completed or handed back, never half done.
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultIOTimeout)
	defer cancel()
	kind, turn, _ := events.InboxKind(msg.Subject())
	log := o.log.With("input", kind)
	if turn != "" {
		log = log.With("turn", turn)
	}
	err := s.dispatch(ctx, log, msg, kind, turn)
	var r *retry
	var d *deadLetter
	switch {
	case err == nil:
		if err := msg.Ack(); err != nil {
			log.Warn("ack failed; the input will come again and change nothing", "err", err)
		}
	case errors.Is(err, errCrashed):
		s.dead = true
	case errors.As(err, &d):
		log.Warn("dead letter", "reason", d.reason)
		if err := o.deadLetter(ctx, msg, kind, d.reason); err != nil {
			log.Error("cannot write the dead letter; the input comes again", "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.TermWithReason(d.reason)
	case errors.As(err, &r):
		log.Warn("input deferred", "err", r.err)
		_ = msg.NakWithDelay(backoff(msg))
	default:
		log.Error("input failed", "err", err)
		_ = msg.NakWithDelay(backoff(msg))
	}
}

// backoff delays a failed input more on each delivery, up to 10 s.
func backoff(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		n = md.NumDelivered
	}
	return min(time.Duration(n)*200*time.Millisecond, 10*time.Second)
}

func (s *shard) dispatch(ctx context.Context, log *slog.Logger, msg jetstream.Msg, kind, turn string) error {
	redelivered := false
	if md, err := msg.Metadata(); err == nil {
		redelivered = md.NumDelivered > 1
	}
	if kind != "submit" && !events.ValidID(turn) {
		return &deadLetter{fmt.Sprintf("invalid turn id in subject %q", msg.Subject())}
	}
	var in fsm.Input
	switch kind {
	case "submit":
		return s.submit(ctx, log, msg.Data(), redelivered)
	case "control":
		var c events.Control
		if err := decode("control", msg.Data(), &c); err != nil {
			return err
		}
		in = fsm.Command(c)
	case "result":
		r, err := decodeToolResult(msg.Data())
		if err != nil {
			return err
		}
		if r.TurnID != turn {
			return &deadLetter{fmt.Sprintf("result for turn %q sent to turn %q", r.TurnID, turn)}
		}
		in = fsm.ToolAnswer(r)
	case "model":
		r, err := decodeModelResult(msg.Data())
		if err != nil {
			return err
		}
		if r.TurnID != turn {
			return &deadLetter{fmt.Sprintf("model result for turn %q sent to turn %q", r.TurnID, turn)}
		}
		in = fsm.ModelAnswer(r)
	case "timer":
		var t events.Timer
		if err := decode("timer", msg.Data(), &t); err != nil {
			return err
		}
		in = fsm.Tick(t)
	default:
		return &deadLetter{fmt.Sprintf("no input kind %q", kind)}
	}
	return s.apply(ctx, log, turn, in, redelivered)
}

// load returns the cached state of a turn, or folds it from the log.
func (s *shard) load(ctx context.Context, turn string) (*entry, error) {
	if e, ok := s.cache[turn]; ok {
		return e, nil
	}
	st, seq, err := s.o.store.Load(ctx, turn)
	if err != nil {
		return nil, &retry{err}
	}
	if st.Exists() && !st.Done() {
		if err := s.o.history.fill(ctx, st); err != nil {
			return nil, &retry{err}
		}
	}
	return &entry{state: st, seq: seq}, nil
}

// apply decides an input and performs the decision: append, publish, arm,
// acknowledge (by returning nil). A lost race for the log is decided again
// on the fresh log.
func (s *shard) apply(ctx context.Context, log *slog.Logger, turn string, in fsm.Input, redelivered bool) error {
	for range 5 {
		_, cached := s.cache[turn]
		e, err := s.load(ctx, turn)
		if err != nil {
			return err
		}
		d, err := fsm.Decide(e.state, in, env())
		var ie *fsm.InputError
		switch {
		case errors.Is(err, fsm.ErrTurnFinished):
			return nil
		case cached && (errors.Is(err, fsm.ErrUnknownTurn) || errors.As(err, &ie)):
			// Another orchestrator may have moved the turn on: judge the
			// input against the log, not against this process's memory.
			delete(s.cache, turn)
			continue
		case errors.Is(err, fsm.ErrUnknownTurn):
			return &deadLetter{fmt.Sprintf("no turn %q", turn)}
		case err != nil:
			if errors.As(err, &ie) {
				return &deadLetter{ie.Reason}
			}
			// The machine refused its own log or input: a bug, never a
			// reason to lose the input.
			return &retry{err}
		}
		if cached && len(d.Events) == 0 {
			// The cached state calls this input a repeat. Another
			// orchestrator may have moved the turn on since, and the input
			// be new there: acknowledging it on a stale state would lose it.
			// Appends are fenced by their expected sequence; this is not.
			_, seq, _, err := s.o.store.Last(ctx, turn)
			if err != nil {
				return &retry{err}
			}
			if seq != e.seq {
				delete(s.cache, turn)
				continue
			}
		}
		err = s.perform(ctx, log, e, d, redelivered)
		if errors.Is(err, ErrConflict) {
			log.Debug("lost the race for the turn's log; deciding again", "err", err)
			delete(s.cache, turn)
			continue
		}
		return err
	}
	return &retry{fmt.Errorf("runtime: turn %s: the log kept moving", turn)}
}

// perform makes a decision durable and effective, in the order that makes a
// crash at any point harmless: events, then jobs, then timers and the cache.
func (s *shard) perform(ctx context.Context, log *slog.Logger, e *entry, d fsm.Decision, redelivered bool) error {
	o := s.o
	turn := d.State.TurnID
	for _, w := range d.Warnings {
		log.Warn(w, "step", d.State.Step)
	}
	seq, err := o.store.Append(ctx, e.seq, d.Events)
	if err != nil {
		delete(s.cache, turn)
		if errors.Is(err, ErrConflict) {
			return err
		}
		return &retry{err}
	}
	if err := s.crash(StageAppended); err != nil {
		return err
	}
	// Jobs carry deterministic ids, so publishing one twice runs it once;
	// publish only the new ones unless an earlier attempt may have failed
	// before publishing its own.
	jobs := fsm.Jobs(d.State)
	published := make(map[string]bool, len(jobs))
	conv := e.conv
	if conv == nil {
		conv = &conversation{}
	}
	for _, j := range jobs {
		published[j.ID] = true
		if e.published[j.ID] && !redelivered {
			continue
		}
		if err := o.publishJob(ctx, conv, d.State, j); err != nil {
			delete(s.cache, turn)
			return &retry{err}
		}
	}
	if err := s.crash(StagePublished); err != nil {
		return err
	}
	o.timers.set(d.State)
	if d.State.Done() {
		delete(s.cache, turn)
		if r := d.State.Finished.StopReason; r == events.StopAborted || r == events.StopTimeout {
			if err := o.nc.Publish(events.CancelSubject(turn), nil); err != nil {
				log.Warn("cannot broadcast the cancel", "err", err)
			}
		}
		if len(d.Events) > 0 {
			log.Info("turn finished", "stop_reason", d.State.Finished.StopReason, "steps", d.State.Step)
		}
		return nil
	}
	if d.State.Phase == fsm.PhasePaused {
		// A turn waiting for a person may wait long: it keeps no encoded
		// conversation, which its next model job encodes again.
		conv = nil
	}
	s.put(turn, &entry{state: d.State, seq: seq, published: published, conv: conv})
	return nil
}

func (s *shard) crash(stage string) error {
	if s.o.beforeAck == nil {
		return nil
	}
	if err := s.o.beforeAck(stage); err != nil {
		return errCrashed
	}
	return nil
}

// put caches a state, evicting an arbitrary other one when the shard is full:
// an evicted turn is folded again from its log on its next input.
func (s *shard) put(turn string, e *entry) {
	if _, ok := s.cache[turn]; !ok && len(s.cache) >= max(s.o.cacheSize/s.o.shards, 1) {
		for k := range s.cache {
			delete(s.cache, k)
			break
		}
	}
	s.cache[turn] = e
}

// publishJob publishes one job of st; conv keeps the encoded conversation of
// st's turn (nil: none kept).
func (o *Orchestrator) publishJob(ctx context.Context, conv *conversation, st *fsm.State, j fsm.Job) error {
	data, err := encodeJob(conv, st, j)
	if err != nil {
		return fmt.Errorf("runtime: encode job %s: %w", j.ID, err)
	}
	if _, err := o.js.Publish(ctx, j.Subject, data, jetstream.WithMsgID(j.ID)); err != nil {
		return fmt.Errorf("runtime: publish job %s: %w", j.ID, err)
	}
	return nil
}

// deadLetter keeps an input that cannot be handled, with the reason.
func (o *Orchestrator) deadLetter(ctx context.Context, msg jetstream.Msg, kind, reason string) error {
	return DeadLetter(ctx, o.js, msg, kind, reason)
}

// DeadLetter keeps a message that cannot be handled, with the reason in the
// Jetloop-Error header and its subject in Jetloop-Subject, where an operator
// can find, fix and re-send it. Its id is the message's place in its stream,
// so a dead letter retried after a crash is kept once.
func DeadLetter(ctx context.Context, js jetstream.JetStream, msg jetstream.Msg, kind, reason string) error {
	dm := &nats.Msg{Subject: events.DeadSubject(kind), Data: msg.Data(), Header: nats.Header{}}
	dm.Header.Set(events.HeaderError, reason)
	dm.Header.Set("Jetloop-Subject", msg.Subject())
	id := "dead:" + msg.Subject()
	if md, err := msg.Metadata(); err == nil {
		id = "dead:" + md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	if _, err := js.PublishMsg(ctx, dm, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("runtime: dead letter: %w", err)
	}
	return nil
}
