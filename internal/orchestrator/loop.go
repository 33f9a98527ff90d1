package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
)

// The runtime loop: load a log's state, decide an input on it, append the
// decision's events, make them effective, and let the caller acknowledge
// the input. Turns and workflows both go through advance; what differs
// between them is a machine.

// entry is a log's state as a shard caches it between inputs.
type entry[S any] struct {
	state S
	seq   uint64 // the stream sequence of the log's last event
	gen   uint64 // of the log's partition when cached (Orchestrator.gens)
	// published are the ids of a turn's jobs known to be published: nil
	// after a fold, since whoever wrote the log may have died before
	// publishing them.
	published map[string]bool
	// checkpoint is the revision of the workflow's checkpoint key this
	// process wrote last (0: unknown).
	checkpoint uint64
}

// judgement is how the loop takes a machine's answer to an input.
type judgement int

const (
	taken judgement = iota
	// finished: the log has ended and the input changes nothing, but may be
	// a repeat of one whose handling died before all its effects.
	finished
	// unknownLog: there is no such log.
	unknownLog
	// refused: the input cannot apply to the state (*machine.InputError).
	refused
	// passed: the caller judges the error (a workflow that exists).
	passed
	// broken: the machine refused its own log or input, a bug, never a
	// reason to lose the input: it is retried.
	broken
)

// decision is what a machine decided: the state after, the events that
// make it, and the warnings to log before they are appended.
type decision[S any] struct {
	state    S
	events   []events.Envelope
	warnings []string
}

// step is one decision on its way through the loop.
type step[S, I any] struct {
	id          string
	in          I
	prev        *entry[S] // the state the input was decided on
	next        decision[S]
	seq         uint64 // the log's last sequence after the append
	redelivered bool
	// published are the ids of a turn's jobs this step published or knew
	// published.
	published map[string]bool
}

// fresh reports whether the decision appended anything.
func (st *step[S, I]) fresh() bool { return len(st.next.events) > 0 }

// A logMachine is one kind of log as the runtime loop sees it: how its
// state is read and decided, and what a decision makes happen. Its methods
// run in the lane of the log's shard, one input at a time.
type logMachine[S, I any] interface {
	// noun names the kind of log in reasons: "turn", "workflow".
	noun() string
	// cache keeps states between inputs.
	cache() *locked[*entry[S]]
	// fold reads a state from the log.
	fold(ctx context.Context, id string) (*entry[S], error)
	// decide is the pure machine's decision; judge classifies its errors.
	decide(st S, in I) (decision[S], error)
	judge(err error) judgement
	exists(st S) bool
	// again repairs what an input of a finished log may have left undone.
	again(ctx context.Context, log *slog.Logger, st S) error
	// prepare runs before the append, with current telling whether the
	// state decided on is still the log's last.
	prepare(ctx context.Context, log *slog.Logger, st *step[S, I], current func() (bool, error)) error
	// publish makes an appended decision effective before the input is
	// acknowledged: jobs and indexes; an *unstorableError ends the log.
	publish(ctx context.Context, log *slog.Logger, st *step[S, I]) error
	// settle arms timers and closes a finished log; it returns the entry to
	// cache, nil for none.
	settle(ctx context.Context, log *slog.Logger, st *step[S, I]) (*entry[S], error)
	// follow is the input the machine takes at once after a settled step,
	// if any (a workflow's gate).
	follow(ctx context.Context, st *step[S, I], cached *entry[S]) (I, bool, error)
	// fail is the input that ends the log for reason; false when in is one.
	fail(id string, in I, reason string) (I, bool)
	// unstorable is the reason a log ends when what it did cannot be
	// stored; started is false when the log does not exist yet.
	unstorable(err error, started bool) string
}

// attempts bounds the decisions of one input: a lost race for the log, a
// stale cache or a workflow's gate each take one.
const attempts = 8

// errDoubt is an early result (applyEarly) that only a read of the log
// could judge: its stored copy will be judged so, and one read is enough.
var errDoubt = errors.New("orchestrator: judged on the stored copy")

// advance takes in through the loop for log id. In early mode it gives up
// with errDoubt where it would read the log to judge an input the cached
// state refuses or calls a repeat. Its error is nil (acknowledge), a
// *retry, a *deadLetter, errCrashed or errDoubt, or one the caller judges
// (judgement passed).
func advance[S, I any](ctx context.Context, s *shard, m logMachine[S, I], log *slog.Logger, id string, in I, redelivered, early bool) error {
	cache := m.cache()
	err := func() error {
		for range attempts {
			e, cached, err := load(ctx, s, m, id)
			if err != nil {
				return err
			}
			d, err := m.decide(e.state, in)
			switch v := m.judge(err); {
			case v == finished:
				if err := m.again(ctx, log, e.state); err != nil {
					return &retry{err: err}
				}
				return nil
			case cached && (v == unknownLog || v == refused):
				if early {
					return errDoubt
				}
				// Another orchestrator may have moved the log on: judge
				// the input against the log, not this process's memory.
				cache.Delete(id)
				continue
			case v == unknownLog:
				return &deadLetter{fmt.Sprintf("no %s %q", m.noun(), id)}
			case v == refused:
				var ie *machine.InputError
				errors.As(err, &ie)
				return &deadLetter{ie.Reason}
			case v == passed:
				return err
			case err != nil:
				return &retry{err: err}
			}
			current := func() (bool, error) {
				if !cached {
					return true, nil
				}
				_, seq, _, err := s.store.Last(ctx, id)
				return seq == e.seq, err
			}
			if cached && len(d.events) == 0 {
				if early {
					return errDoubt
				}
				// The cached state calls the input a repeat. Another
				// orchestrator may have moved the log on since, and the
				// input be new there: acknowledging it on a stale state
				// would lose it. Appends are fenced by their expected
				// sequence; this is not.
				ok, err := current()
				if err != nil {
					return &retry{err: err}
				}
				if !ok {
					cache.Delete(id)
					continue
				}
			}
			st := &step[S, I]{id: id, in: in, prev: e, next: d, redelivered: redelivered}
			if err := m.prepare(ctx, log, st, current); errors.Is(err, bus.ErrConflict) {
				cache.Delete(id)
				continue
			} else if err != nil {
				return err
			}
			err = perform(ctx, s, m, log, st)
			var u *unstorableError
			switch {
			case err == nil:
			case errors.Is(err, bus.ErrConflict):
				s.obs.metrics.AppendConflict()
				log.Debug("lost the race for the log; deciding again", "err", err)
				cache.Delete(id)
				continue
			case errors.As(err, &u):
				cache.Delete(id)
				if !m.exists(e.state) && st.seq == 0 {
					// Nothing of the log is stored: a submission that
					// cannot even start is a dead letter.
					return &deadLetter{m.unstorable(u.err, false)}
				}
				next, ok := m.fail(id, in, m.unstorable(u.err, true))
				if !ok {
					return &retry{err: u.err}
				}
				log.Error("ending the "+m.noun()+": what it did cannot be stored", "err", u.err)
				in = next
				continue
			default:
				return err
			}
			kept, err := m.settle(ctx, log, st)
			if err != nil {
				return err
			}
			keep(s, cache, id, kept)
			next, ok, err := m.follow(ctx, st, kept)
			if err != nil || !ok {
				return err
			}
			in = next
		}
		return &retry{err: fmt.Errorf("orchestrator: %s %s: the log kept moving", m.noun(), id)}
	}()
	if err != nil && !errors.Is(err, errDoubt) {
		// Whatever stopped the input may have left the log ahead of the
		// cached state: the next input reads it.
		cache.Delete(id)
	}
	return err
}

// load returns the cached state of a log, or folds it from the log;
// cached says which.
func load[S, I any](ctx context.Context, s *shard, m logMachine[S, I], id string) (e *entry[S], cached bool, err error) {
	cache := m.cache()
	if e, ok := cache.Get(id); ok {
		if e.gen == s.owner.gen(id) {
			return e, true, nil
		}
		cache.Delete(id) // another process owned the log since
	}
	e, err = m.fold(ctx, id)
	return e, false, err
}

// perform makes a decision durable and effective, in the order that makes
// a crash at any point harmless: the events, then what they make happen.
func perform[S, I any](ctx context.Context, s *shard, m logMachine[S, I], log *slog.Logger, st *step[S, I]) error {
	seq, err := s.append(ctx, st.prev.seq, st.next.events)
	switch {
	case errors.Is(err, bus.ErrConflict):
		return err
	case err != nil && unstorable(err):
		return &unstorableError{err}
	case err != nil:
		return &retry{err: err}
	}
	st.seq = seq
	if err := s.crash(StageAppended); err != nil {
		return err
	}
	if err := m.publish(ctx, log, st); err != nil {
		return err
	}
	return s.crash(StagePublished)
}

// keep caches a log's state when this process owns its partition, or
// forgets it (e nil): the log's next input goes to its owner.
func keep[S any](s *shard, cache *locked[*entry[S]], id string, e *entry[S]) {
	if e == nil || !s.owner.owned(id) {
		cache.Delete(id)
		return
	}
	e.gen = s.owner.gen(id)
	cache.Put(id, e)
}
