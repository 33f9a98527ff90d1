package orchestrator

import (
	"sync"
)

// Fairness shares the handling of inputs among the tenants one process
// serves (docs/tenants.md: orchestrators schedule fairly across
// tenants). Each tenant's orchestrator has its own consumers, shards and
// model runners, so no tenant's input ever waits in another's queue; what
// they still share is the machine. A tenant alone may handle as many
// inputs at once as there are slots; while several have inputs, each may
// handle its equal share at once. A tenant under its share never waits,
// one over it takes no more until it is back under: one flooding its inbox
// leaves the others the machine's time their own turns need.
type Fairness struct {
	slots   int
	mu      sync.Mutex
	busy    map[string]int // inputs being handled, by tenant
	waiting map[string]int // inputs waiting for a slot, by tenant
	changed chan struct{}  // closed and replaced when a slot is let go
}

// NewFairness shares slots inputs handled at once among the tenants.
func NewFairness(slots int) *Fairness {
	return &Fairness{slots: max(slots, 1), busy: map[string]int{}, waiting: map[string]int{}, changed: make(chan struct{})}
}

// WithFairness makes this orchestrator's shards take their turn in f with
// the other tenants' orchestrators of the process (see WithTenant).
func WithFairness(f *Fairness) Option {
	return func(o *Orchestrator) error {
		o.admit.fair = f
		return nil
	}
}

// share is how many inputs a tenant may handle at once now: mu held.
func (f *Fairness) share() int {
	active := 0
	for t, n := range f.waiting { // every tenant that ever asked is a key
		if n > 0 || f.busy[t] > 0 {
			active++
		}
	}
	return max(1, f.slots/max(active, 1))
}

// full tells whether tenant is at its share now: mu held.
func (f *Fairness) full(tenant string) bool { return f.busy[tenant] >= f.share() }

// acquire waits for a slot of tenant's share. It cannot wait forever: a
// tenant at its share has inputs being handled, whose ends let slots go.
func (f *Fairness) acquire(tenant string) {
	f.mu.Lock()
	f.waiting[tenant]++
	for f.full(tenant) {
		changed := f.changed
		f.mu.Unlock()
		<-changed
		f.mu.Lock()
	}
	f.waiting[tenant]--
	f.busy[tenant]++
	f.mu.Unlock()
}

// release lets a slot go.
func (f *Fairness) release(tenant string) {
	f.mu.Lock()
	f.busy[tenant]--
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}
