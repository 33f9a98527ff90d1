package orchestrator

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// turns is the turn machine (internal/fsm) as the runtime loop runs it.
type turns struct{ s *shard }

// apply takes an input of a turn through the runtime loop.
func (s *shard) apply(ctx context.Context, log *slog.Logger, turn string, in fsm.Input, redelivered bool) error {
	return advance(ctx, s, turns{s}, log, turn, in, redelivered, false)
}

func (turns) noun() string { return "turn" }

func (t turns) cache() *locked[*entry[*fsm.State]] { return t.s.cache }

func (t turns) fold(ctx context.Context, turn string) (*entry[*fsm.State], error) {
	if p, ok := t.s.preloaded.Get(turn); ok {
		t.s.preloaded.Delete(turn) // a second load (a lost race) reads the log again
		return p.e, p.err
	}
	return t.s.starter.loadEntry(ctx, turn)
}

func (turns) decide(st *fsm.State, in fsm.Input) (decision[*fsm.State], error) {
	d, err := fsm.Decide(st, in, env())
	return decision[*fsm.State]{state: d.State, events: d.Events, warnings: d.Warnings}, err
}

func (turns) judge(err error) judgement {
	var ie *fsm.InputError
	switch {
	case err == nil:
		return taken
	case errors.Is(err, fsm.ErrTurnFinished):
		return finished
	case errors.Is(err, fsm.ErrUnknownTurn):
		return unknownLog
	case errors.As(err, &ie):
		return refused
	}
	return broken
}

func (turns) exists(st *fsm.State) bool { return st.Exists() }

// again tells a finished turn's workflow and the live index again: the
// handling that finished the turn may have died before. Whether an input
// is a redelivery cannot be told after a restart reset the inbox consumer.
func (t turns) again(ctx context.Context, log *slog.Logger, st *fsm.State) error {
	if st.Workflow != nil && st.Finished != nil {
		if err := t.s.eff.notifyTask(ctx, st.Workflow, st.TurnID, *st.Finished); err != nil {
			return err
		}
	}
	return t.s.eff.ended(ctx, log, st)
}

func (turns) prepare(_ context.Context, log *slog.Logger, st *step[*fsm.State, fsm.Input], _ func() (bool, error)) error {
	for _, w := range st.next.warnings {
		log.Warn(w, "step", st.next.state.Step)
	}
	return nil
}

// publish publishes the jobs the turn waits on and indexes a started turn.
//
// A model call a fresh decision asks for (one that appended the events
// that do) is made in this process when it owns the turn's partition
// (callHere). A submission is decided by whichever orchestrator takes it,
// and may be decided again by another when it is delivered again: such a
// decision, taken by a process that does not own the turn, cannot tell
// whether the owner is making the call in its process or whether the
// process that decided it first died before publishing its job. It asks
// the owner to look at the turn instead, which publishes the job unless it
// began the call itself.
func (t turns) publish(ctx context.Context, log *slog.Logger, st *step[*fsm.State, fsm.Input]) error {
	eff, turn, state := t.s.eff, st.id, st.next.state
	t.s.obs.observe(st.prev.state, fsm.Decision{State: state, Events: st.next.events})
	_, start := st.in.(fsm.Start)
	// Jobs carry deterministic ids, so publishing one twice runs it once;
	// publish only the new ones unless an earlier attempt may have failed
	// before publishing its own.
	jobs := fsm.Jobs(state)
	st.published = make(map[string]bool, len(jobs))
	look := false
	for _, j := range jobs {
		st.published[j.ID] = true
		if st.prev.published[j.ID] && !st.redelivered {
			continue
		}
		if j.Model != nil && eff.callHere(j, st.fresh()) {
			continue
		}
		if j.Model != nil && start && !st.fresh() && eff.inProcessCalls() && !eff.owner.owned(turn) {
			look = true
			continue
		}
		if err := eff.publishJob(ctx, j); err != nil {
			if unstorable(err) {
				return &unstorableError{err}
			}
			return &retry{err: err}
		}
	}
	if look {
		if err := eff.look(ctx, turn); err != nil {
			return &retry{err: err}
		}
	}
	if start && !state.Done() {
		// After the start's events and its first call, so neither waits
		// for the index; before the submission is acknowledged, so a crash
		// between the two is mended by the submission's coming again.
		if err := eff.index.started(ctx, turn); err != nil {
			if unstorable(err) {
				// A turn no restart could find is ended, as one whose
				// jobs cannot be stored is.
				return &unstorableError{err}
			}
			return &retry{err: err}
		}
	}
	return nil
}

// settle arms the turn's deadlines or, when it finished, tells its
// workflow, the live index and its calls' workers.
func (t turns) settle(ctx context.Context, log *slog.Logger, st *step[*fsm.State, fsm.Input]) (*entry[*fsm.State], error) {
	eff, turn, state := t.s.eff, st.id, st.next.state
	eff.timers.set(state)
	if !state.Done() {
		return &entry[*fsm.State]{state: state, seq: st.seq, published: st.published}, nil
	}
	if st.fresh() || st.redelivered {
		// Before the input is acknowledged: a crash here has the input
		// come again, and the turn, finished, does this again.
		if err := t.again(ctx, log, state); err != nil {
			return nil, &retry{err: err}
		}
	}
	if st.fresh() && st.prev.state.Exists() {
		eff.history.finished(turn, st.seq, state.LastTime, state.Transcript())
		eff.index.done(ctx, turn)
	}
	if r := state.Finished.StopReason; r == events.StopAborted || r == events.StopTimeout {
		if err := eff.nc.Publish(events.CancelSubject(turn), nil); err != nil {
			log.Warn("cannot broadcast the cancel", "err", err)
		}
	}
	if st.fresh() {
		log.Info("turn finished", "stop_reason", state.Finished.StopReason, "steps", state.Step)
	}
	return nil, nil
}

func (turns) follow(context.Context, *step[*fsm.State, fsm.Input], *entry[*fsm.State]) (fsm.Input, bool, error) {
	return nil, false, nil
}

func (turns) fail(turn string, in fsm.Input, reason string) (fsm.Input, bool) {
	if _, failing := in.(fsm.Fail); failing {
		return nil, false
	}
	return fsm.Fail{TurnID: turn, Reason: reason}, true
}

func (turns) unstorable(err error, started bool) string {
	var tb *bus.TooBigError
	if errors.As(err, &tb) {
		return "cannot store what the turn did: " + tb.Error()
	}
	return "cannot store what the turn did: " + err.Error()
}
