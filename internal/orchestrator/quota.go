package orchestrator

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Quota bounds what one tenant's clients may start (docs/tenants.md, "Quotas":
// storage, turns in flight, submissions per second). A submission past a
// bound is refused: its turn or workflow ends rejected with the reason, as
// `jetloop submit` reports, and the submission is kept as a dead letter,
// so nothing is lost; sent again once there is room, it starts. Only what
// a client submits is bounded: a workflow's tasks and a turn's subagents
// belong to what was already admitted, and a turn already running always
// finishes.
type Quota struct {
	// InFlight bounds the turns and workflows started and not finished
	// (KV JETLOOP_LIVE's entries, over every orchestrator). Zero: unbounded.
	InFlight int
	// Rate bounds the submissions this process accepts per second, in
	// bursts of Burst. NATS has no per-account message rate, so the
	// orchestrator enforces it; with several orchestrators each applies it
	// to what it handles. Zero: unbounded.
	Rate  float64
	Burst int
	// SoftStorage is the percentage of the account's JetStream storage
	// (the server's hard limit, read from the account) above which new
	// submissions are refused, so that the turns running can still store
	// their ends. Zero: 90. An account with no storage limit has none.
	SoftStorage int
}

// quotaRefresh is how often the counts a quota is checked against are read
// again: the in-flight index and the account's storage.
const quotaRefresh = time.Second

// WithTenant names the tenant this orchestrator serves (logs, refusals) and
// the quota its submissions are held to.
func WithTenant(name string, q Quota) Option {
	return func(o *Orchestrator) error {
		if q.InFlight < 0 || q.Rate < 0 || q.Burst < 0 || q.SoftStorage < 0 || q.SoftStorage > 100 {
			return fmt.Errorf("orchestrator: tenant %s: bad quota %+v", name, q)
		}
		if q.SoftStorage == 0 {
			q.SoftStorage = 90
		}
		o.admit.tenant = name
		o.admit.quota = &quotas{tenant: name, q: q}
		if q.Rate > 0 {
			o.admit.quota.limiter = rate.NewLimiter(rate.Limit(q.Rate), max(q.Burst, 1))
		}
		o.log = o.log.With("tenant", name)
		return nil
	}
}

// quotas is a tenant's quota and what it is checked against.
type quotas struct {
	tenant  string
	q       Quota
	limiter *rate.Limiter
	// live is the index's count at the last refresh. admitted counts the
	// submissions admitted and not yet in such a count: an admitted turn
	// is indexed while its submission is handled, so an admission leaves
	// admitted only at a refresh whose listing began after its handling
	// ended (settled counts those, between two refreshes). A count errs on
	// the side of more in flight, never fewer.
	live, admitted, settled atomic.Int64
	// used and soft are the account's stored bytes and soft limit at the
	// last refresh (soft 0: no limit).
	used, soft atomic.Int64
}

// Quotas a submission can be refused by: the values of the metric
// jetloop_quota_refusals_total's label.
const (
	quotaStorage  = "storage"
	quotaInFlight = "in_flight"
	quotaRate     = "rate"
)

// admit takes a new submission into account, or says which quota refuses
// it and why. The handling of an admitted submission calls settle when it
// ends.
func (q *quotas) admit() (quota, reason string) {
	if soft := q.soft.Load(); soft > 0 && q.used.Load() >= soft {
		return quotaStorage, fmt.Sprintf("tenant %s is over its storage quota: %d bytes stored, soft limit %d (%d%% of the account's storage); "+
			"new turns are refused until storage is freed, running ones finish", q.tenant, q.used.Load(), soft, q.q.SoftStorage)
	}
	if n := q.q.InFlight; n > 0 && q.live.Load()+q.admitted.Load() >= int64(n) {
		return quotaInFlight, fmt.Sprintf("tenant %s is at its quota of %d turns and workflows in flight; submit again when one finishes", q.tenant, n)
	}
	if q.limiter != nil && !q.limiter.Allow() {
		return quotaRate, fmt.Sprintf("tenant %s is over its quota of %g submissions per second (bursts of %d); submit again later", q.tenant, q.q.Rate, q.limiter.Burst())
	}
	q.admitted.Add(1)
	return "", ""
}

// settle says that the handling of a submission admit took in has ended:
// the index has its entry, or it will never have one.
func (q *quotas) settle() { q.settled.Add(1) }

// recount replaces the in-flight count with the index's, listed by count.
// A submission whose handling had not ended when the listing began may or
// may not be in it: it stays counted until the next recount.
func (q *quotas) recount(ctx context.Context, count func(context.Context) (int64, error)) error {
	settled := q.settled.Swap(0)
	n, err := count(ctx)
	if err != nil {
		q.settled.Add(settled)
		return err
	}
	q.live.Store(n)
	q.admitted.Add(-settled)
	return nil
}
