package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// effects are what a decision makes happen beyond its log: the jobs and
// wake-ups its state waits on and its deadlines (here), the relatives its
// end concerns — parent, children, workflow (subagents.go, workflows.go) —,
// a workflow's checkpoint, the live index and the session history cache.
// The loop's machines and the re-arm reach them through it, never through
// the Orchestrator.
type effects struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	store   *logstore.Store
	owner   *ownership
	obs     *observer
	calls   *calls
	timers  *timers
	history *historyCache
	index   *liveIndex
	// checkpoints is KV JETLOOP_CHECKPOINTS, the workflows' last checkpoints.
	checkpoints jetstream.KeyValue
	// runner makes model calls in this process: nil with no model
	// runners, and until they are made, before serving starts.
	runner *modelRunners
}

// look asks the owner of a turn's partition to decide the turn again with
// a wake-up: it publishes the jobs the turn waits on that it did not
// publish or begin itself (turns.publish).
func (ef *effects) look(ctx context.Context, turn string) error {
	return ef.publishTimer(ctx, events.Timer{TurnID: turn, Kind: events.TimerWake, At: time.Now().UTC()})
}

// publishTimer sends a turn a deadline's message now, through its
// partition of the inbox.
func (ef *effects) publishTimer(ctx context.Context, tm events.Timer) error {
	data, err := events.Marshal(tm)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: events.TimerSubject(tm.TurnID), Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, events.TimerID(tm))
	_, err = ef.js.PublishMsg(ctx, msg)
	return err
}

// publishJobs publishes the jobs a turn's state waits on.
func (ef *effects) publishJobs(ctx context.Context, st *fsm.State) error {
	jobs := fsm.Jobs(st)
	if slices.ContainsFunc(jobs, func(j fsm.Job) bool { return j.Model != nil }) {
		// A model call's conversation includes the session's earlier turns.
		if err := ef.history.fill(ctx, st); err != nil {
			return err
		}
		jobs = fsm.Jobs(st)
	}
	for _, j := range jobs {
		// A call this process began itself, deciding a redelivered input
		// of the partition while this ran, is not made again as a job.
		if j.Model != nil && ef.runner != nil && ef.runner.begun.mark(j.ID, func() bool { return false }) {
			continue
		}
		// A tool job is published again only while the jobs stream would
		// drop it as a copy: past that, one its worker ran long ago, whose
		// result waits in the inbox, would run a second time. (A job
		// never published then is answered by the call's deadline.)
		if j.Tool != nil && !requestedWithin(st, j.Tool.CallID, bus.JobsDuplicates-time.Minute) {
			continue
		}
		if err := ef.publishJob(ctx, j); err != nil {
			return err
		}
	}
	return nil
}

// requestedWithin reports whether a turn's call was requested within d.
func requestedWithin(st *fsm.State, callID string, d time.Duration) bool {
	for _, c := range st.Calls {
		if c.CallID == callID {
			return time.Since(c.Requested) < d
		}
	}
	return false
}

// callHere makes a model call of a turn this process owns in this process,
// without a job, when a runner is free; fresh says whether the decision
// asking for it appended the events that do.
func (ef *effects) callHere(j fsm.Job, fresh bool) bool {
	return ef.runner != nil && ef.inProcessCalls() && ef.owner.owned(j.Model.TurnID) &&
		ef.runner.local(j.Model, j.ID, fresh)
}

// inProcessCalls reports whether the deployment makes model calls in the
// processes that own their turns: on a single server, not on a cluster.
// Every orchestrator of a deployment shares the events stream, so all
// agree, those without runners included. On a cluster every call goes as a
// job: the cluster test (a node and an orchestrator lost under 300 turns)
// still saw, rarely, a call made twice or a turn left waiting with calls
// made in-process, and a job's id and redelivery are what it was proven
// with.
func (ef *effects) inProcessCalls() bool { return !ef.store.Replicated() }

// publishJob publishes one job. A model call is held for this process's
// runners, which would otherwise derive it from the turn's log.
func (ef *effects) publishJob(ctx context.Context, j fsm.Job) error {
	data, err := encodeJob(j)
	if err != nil {
		return fmt.Errorf("orchestrator: encode job %s: %w", j.ID, err)
	}
	if j.Model != nil {
		ef.calls.put(j.ID, j.Model)
	}
	if _, err := bus.PublishAgain(ctx, ef.js, &nats.Msg{Subject: j.Subject, Data: data, Header: ef.obs.jobHeader(j)}, jetstream.WithMsgID(j.ID)); err != nil {
		return fmt.Errorf("orchestrator: publish job %s: %w", j.ID, err)
	}
	return nil
}
