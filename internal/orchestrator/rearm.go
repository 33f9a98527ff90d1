package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// takeOver makes this process the owner of partition p: what a dead owner
// held of its inputs is handed back at once (an owner still alive, giving p
// up to this one, drains its own) and cached states of p become stale. It
// reports whether p's owner before was dead (or there was none). The
// timers of p's unfinished turns and workflows are armed next, by rearm.
// An owner under this process's own name is its predecessor, dead.
func (o *Orchestrator) takeOver(ctx context.Context, p int, before, now []string, c jetstream.Consumer) (orphaned bool, err error) {
	if prev := bus.Owner(p, before); prev == "" || prev == o.owner.name || !slices.Contains(now, prev) {
		if err := o.reclaim(ctx, events.StreamInbox, c); err != nil {
			return false, err
		}
		orphaned = true
	}
	o.owner.take(p)
	return orphaned, nil
}

// reclaim hands back at once what a process that died held: inputs and model
// jobs it took and never acknowledged would otherwise wait for their ack
// wait (30 s by default) before anyone takes them again. It is called only
// on consumers no live orchestrator pulls from: the shared ones when no
// other orchestrator is alive, a partition's when its owner died; so a lone
// orchestrator restarted after a crash goes on at once. Whatever comes again is handled
// as a redelivery: appends are fenced, jobs deduplicated, decisions
// idempotent. A replica so loaded that it had no pull waiting on the inbox
// at that moment may see some inputs or model calls done twice, never lost.
func (o *Orchestrator) reclaim(ctx context.Context, stream string, c jetstream.Consumer) error {
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("orchestrator: consumer %s: %w", c.CachedInfo().Name, err)
	}
	if info.NumAckPending == 0 {
		return nil
	}
	if _, err := o.js.ResetConsumer(ctx, stream, info.Name); err != nil {
		return fmt.Errorf("orchestrator: hand back the pending messages of %s: %w", info.Name, err)
	}
	o.log.Info("took back what a stopped process held", "consumer", info.Name, "pending", info.NumAckPending)
	return nil
}

// rearm arms the timers of partition p's unfinished turns and workflows,
// read from the index (not from every subject of the log, which grows with
// all history), and caches nothing: a turn is folded again when its next
// input comes. When p was orphaned, the jobs its turns wait on are
// published: their owner made model calls in its process and applied their
// answers there, so neither a call nor the jobs its answer called for may
// be anywhere but in the log. (Their ids make a copy of a stored job
// nothing. An owner alive that gave p up sends the answers of its calls
// through the inbox.)
//
// It returns the turns and workflows it could not re-arm, a read or a
// publish having failed (the server away, a node failing over, a full
// store), for rearmRetrying.
func (ef *effects) rearm(ctx context.Context, p int, orphaned bool) (n, paused int, failed []string, err error) {
	ids, err := ef.index.ids(ctx, p)
	if err != nil {
		return 0, 0, nil, err
	}
	n, paused, failed = ef.rearmIDs(ctx, ids, orphaned)
	return n, paused, failed, nil
}

// rearmIDs is rearm of the turns and workflows ids.
func (ef *effects) rearmIDs(ctx context.Context, ids []string, orphaned bool) (n, paused int, failed []string) {
	for _, id := range ids {
		turn, isPaused, err := ef.rearmOne(ctx, id, orphaned)
		if err != nil {
			ef.log.Warn("cannot re-arm a turn or workflow; trying again", "turn", id, "err", err)
			failed = append(failed, id)
			continue
		}
		n += b2i(turn)
		paused += b2i(isPaused)
	}
	return n, paused, failed
}

// rearmOne re-arms one turn or workflow of the index. It reports whether
// it is an unfinished turn, and a paused one.
func (ef *effects) rearmOne(ctx context.Context, id string, orphaned bool) (turn, paused bool, err error) {
	last, _, ok, err := ef.store.Last(ctx, id)
	if err != nil {
		return false, false, err
	}
	if ok && last.Type == events.TurnFinished {
		// The handling that finished it stopped short of leaving the
		// index, maybe of telling its workflow too.
		if err := ef.notifyFinished(ctx, id); err != nil {
			return false, false, fmt.Errorf("tell its workflow it finished: %w", err)
		}
	}
	if !ok || last.Type == events.TurnFinished || last.Type == events.WorkflowFinished {
		ef.index.done(ctx, id)
		return false, false, nil
	}
	if last.Type.Workflow() {
		st, _, err := ef.store.LoadWorkflow(ctx, id)
		if err != nil {
			return false, false, err
		}
		ef.timers.arm(st.ID, workflow.Timers(st))
		return false, false, nil
	}
	st, _, err := ef.store.Load(ctx, id)
	if err != nil {
		return false, false, err
	}
	ef.timers.set(st)
	if orphaned {
		if err := ef.publishJobs(ctx, st); err != nil {
			return false, false, fmt.Errorf("publish the jobs it waits on: %w", err)
		}
		if err := ef.nudge(ctx, st); err != nil {
			return false, false, fmt.Errorf("complete its last decision: %w", err)
		}
	}
	return true, st.Phase == fsm.PhasePaused, nil
}

// rearmRetrying re-arms ids of partition p (nil: the whole partition, from
// the index), and tries again what it could not, until it succeeds, p is
// given up (its new owner re-arms it) or ctx ends. (A tool job whose
// publish failed may have been stored: publishJobs publishes one again
// only within the jobs stream's deduplication window.)
func (ef *effects) rearmRetrying(ctx context.Context, p int, ids []string, orphaned bool) {
	retry := backoff.Policy{First: 500 * time.Millisecond, Max: 10 * time.Second}
	if ids != nil && !backoff.Sleep(ctx, retry.First) { // they failed a moment ago
		return
	}
	_ = retry.Do(ctx, func(int) error {
		if !ef.owner.holds(p) {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if ids == nil {
			var err error
			if _, _, ids, err = ef.rearm(rctx, p, orphaned); err != nil {
				ids = nil
				ef.log.Warn("cannot read the index of a partition's unfinished turns; trying again", "partition", p, "err", err)
				return err
			}
		} else {
			_, _, ids = ef.rearmIDs(rctx, ids, orphaned)
		}
		if len(ids) > 0 {
			return fmt.Errorf("%d turns or workflows not re-armed", len(ids))
		}
		return nil
	})
}

// notifyFinished tells the workflow of a finished turn, if it is a task,
// that it finished. Its id makes a notice sent before nothing.
func (ef *effects) notifyFinished(ctx context.Context, turn string) error {
	st, _, err := ef.store.Load(ctx, turn)
	if err != nil {
		return err
	}
	if err := ef.ended(ctx, ef.log.With("turn", turn), st); err != nil {
		return err
	}
	if st.Workflow == nil || st.Finished == nil {
		return nil
	}
	return ef.notifyTask(ctx, st.Workflow, turn, *st.Finished)
}

// nudge completes a decision a dead owner left half-appended. Such a
// decision is completed by the next input of its turn (Decide writes what
// the state alone implies first); the input that caused it comes again
// when it is an inbox message, but not when it was the answer of a model
// call made in the dead process: a wake-up is sent instead.
func (ef *effects) nudge(ctx context.Context, st *fsm.State) error {
	tm := events.Timer{TurnID: st.TurnID, Kind: events.TimerWake, At: time.Now().UTC()}
	if d, err := fsm.Decide(st, fsm.Tick(tm), env()); err != nil || len(d.Events) == 0 {
		return nil
	}
	return ef.publishTimer(ctx, tm)
}
