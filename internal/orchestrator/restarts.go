package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/nats-io/nats.go/jetstream"
)

// watchRestarts re-publishes, after each reconnection to the server, the
// jobs that the unfinished turns of this process's partitions wait on, when
// the jobs stream is kept in memory: a server restart loses its jobs, which
// the logs still call for. A job's id makes a copy the server still has
// nothing. (A call a worker finished just before the restart, whose result
// is not in the log yet, may run again: memory jobs trade that for speed.)
func (o *Orchestrator) watchRestarts(ctx context.Context) error {
	seen := o.nc.Stats().Reconnects
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		n := o.nc.Stats().Reconnects
		if n == seen || !o.nc.IsConnected() {
			continue
		}
		// Done only once every job is re-published: a server just
		// restarted may lose or not yet answer the first requests (its
		// JetStream still recovering), and the calls' deadlines run.
		if err := o.rederive(ctx); err != nil {
			if ctx.Err() == nil {
				o.log.Warn("cannot re-publish the jobs of unfinished turns after a reconnection yet; trying again", "err", err)
			}
			continue
		}
		seen = n
	}
}

// rederive re-publishes the jobs of the unfinished turns of this process's
// partitions. Each request has defaultIOTimeout: one the server lost costs
// that, not the whole attempt, which watchRestarts makes again.
func (o *Orchestrator) rederive(ctx context.Context) error {
	if o.jobsStream.Storage != jetstream.MemoryStorage {
		return nil
	}
	bound := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, defaultIOTimeout) }
	rctx, cancel := bound()
	_, err := o.repairJobs(rctx)
	cancel()
	if err != nil {
		return err
	}
	jobs := 0
	for _, p := range o.Partitions() {
		rctx, cancel := bound()
		ids, err := o.eff.index.ids(rctx, p)
		cancel()
		if err != nil {
			return err
		}
		for _, id := range ids {
			rctx, cancel := bound()
			st, _, err := o.store.Load(rctx, id)
			cancel()
			if errors.Is(err, logstore.ErrIsWorkflow) {
				continue // a workflow's jobs go to the inbox, on file
			}
			if err != nil {
				return err
			}
			if !st.Exists() || st.Done() {
				continue
			}
			for _, j := range fsm.Jobs(st) {
				rctx, cancel := bound()
				err := o.eff.publishJob(rctx, j)
				cancel()
				if err != nil {
					return err
				}
				jobs++
			}
		}
	}
	if jobs > 0 {
		o.log.Info("re-published the jobs of unfinished turns after a reconnection (jobs are kept in memory)", "jobs", jobs)
	}
	return nil
}

// repairJobs makes the jobs stream (as this process found it at start) and
// the model runners' consumer again if the server lost them: a stream kept
// in memory on one server does not survive its restart, stream and all.
func (o *Orchestrator) repairJobs(ctx context.Context) (jetstream.Consumer, error) {
	if err := bus.EnsureStream(ctx, o.js, o.jobsStream); err != nil {
		return nil, err
	}
	if o.starter.tools != nil {
		o.starter.tools.consumers.remake(ctx)
	}
	return o.js.CreateOrUpdateConsumer(ctx, events.StreamJobs, bus.ModelConsumerConfig(o.cfg.ackWait))
}
