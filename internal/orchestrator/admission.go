package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/nats-io/nats.go/jetstream"
)

// admitter is what the handling of inputs asks before it starts what a
// client submitted, and before it takes an input on at all.
type admitter interface {
	// refuse tells whether a client's new submission of id (a turn's or
	// a workflow's) is refused by the tenant's quota, and why. When it is
	// admitted, the caller calls settle once its handling ends.
	refuse(ctx context.Context, id string) (reason string, settle func(), err error)
	// allowsScripts reports whether submissions may run scripts.
	allowsScripts() bool
	// loadScript reads a script file of the agents directory.
	loadScript(ctx context.Context, name string, detail bool) (*model.Script, error)
	// acquire waits for the tenant's share of the process; release lets
	// it go.
	acquire()
	release()
}

// admission decides what one tenant's clients may start (its quota,
// whether they may run scripts) and when its inputs take their turn among
// the process's tenants (Fairness). Options set its policy; what it reads
// the policy against is bound when the orchestrator starts serving.
type admission struct {
	tenant  string
	quota   *quotas   // nil: unbounded
	fair    *Fairness // shared with the process's other tenants (nil: alone)
	scripts scriptPolicy

	// Bound by serve.
	agentsDir string // where script files are read from
	log       *slog.Logger
	metrics   *metrics.Metrics // nil: metrics off
	store     *logstore.Store  // a refused id may have started already
	countLive func(context.Context) (int64, error)
	account   func(context.Context) (*jetstream.AccountInfo, error)
}

// serve binds admission to what its policy is checked against.
func (a *admission) serve(log *slog.Logger, m *metrics.Metrics, store *logstore.Store, index *liveIndex, js jetstream.JetStream, agentsDir string) {
	a.log, a.metrics, a.store, a.countLive, a.account, a.agentsDir = log, m, store, index.count, js.AccountInfo, agentsDir
}

func (a *admission) allowsScripts() bool { return a.scripts.allow }

func (a *admission) acquire() {
	if a.fair != nil {
		a.fair.acquire(a.tenant)
	}
}

func (a *admission) release() {
	if a.fair != nil {
		a.fair.release(a.tenant)
	}
}

// refuse tells whether a client's new submission of id is refused by the
// quota, and why. One that already started is never refused: it is the
// same submission delivered again.
func (a *admission) refuse(ctx context.Context, id string) (reason string, settle func(), err error) {
	q := a.quota
	if q == nil {
		return "", func() {}, nil
	}
	quota, reason := q.admit()
	if reason == "" {
		return "", q.settle, nil
	}
	last, _, ok, err := a.store.Last(ctx, id)
	if err != nil {
		return "", nil, &retry{err: err}
	}
	// A log whose first event ends it is a rejection's, which a valid
	// submission replaces.
	if ok && !(last.Seq == 1 && (last.Type == events.TurnFinished || last.Type == events.WorkflowFinished)) {
		return "", func() {}, nil
	}
	a.metrics.QuotaRefusal(quota)
	return reason, nil, nil
}

// watch keeps the counts a quota is checked against fresh until ctx ends.
// A read that fails keeps the last counts.
func (a *admission) watch(ctx context.Context) error {
	if a.quota == nil {
		return nil
	}
	t := time.NewTicker(quotaRefresh)
	defer t.Stop()
	for {
		a.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *admission) refresh(ctx context.Context) {
	q := a.quota
	ctx, cancel := context.WithTimeout(ctx, quotaRefresh)
	defer cancel()
	if q.q.InFlight > 0 {
		if err := q.recount(ctx, a.countLive); err != nil && ctx.Err() == nil {
			a.log.Debug("cannot count the turns in flight", "err", err)
		}
	}
	info, err := a.account(ctx)
	if err != nil {
		a.log.Debug("cannot read the account's storage", "err", err)
		return
	}
	q.used.Store(int64(info.Store))
	if max := info.Limits.MaxStore; max > 0 {
		q.soft.Store(max / 100 * int64(q.q.SoftStorage))
	} else {
		q.soft.Store(0)
	}
}
