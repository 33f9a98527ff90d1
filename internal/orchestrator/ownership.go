package orchestrator

import (
	"sync/atomic"

	"github.com/jetloop/jetloop/internal/bus"
)

// ownership is which partitions of the inbox this process owns. Owners
// follow from the live orchestrators alone (bus.Owner), which members
// watches, so all agree without talking.
type ownership struct {
	// name is this orchestrator's key in KV JETLOOP_ORCHESTRATORS.
	name    string
	members *members // the live ones, once serving
	owns    [bus.Partitions]atomic.Bool
	// gens counts each partition's changes of owner: a cached state from
	// before this process last took a partition over may be stale.
	gens [bus.Partitions]atomic.Uint64
}

// owned reports whether this process owns the partition of a turn or
// workflow.
func (w *ownership) owned(id string) bool { return w.owns[bus.Partition(id)].Load() }

// gen is how many times the partition of a turn or workflow came to this
// process.
func (w *ownership) gen(id string) uint64 { return w.gens[bus.Partition(id)].Load() }

// holds reports whether this process owns partition p.
func (w *ownership) holds(p int) bool { return w.owns[p].Load() }

// take makes p this process's: its states cached before are stale.
func (w *ownership) take(p int) {
	w.gens[p].Add(1)
	w.owns[p].Store(true)
}

// give gives p up.
func (w *ownership) give(p int) { w.owns[p].Store(false) }

// list lists the partitions this process owns.
func (w *ownership) list() []int {
	var ps []int
	for p := range bus.Partitions {
		if w.owns[p].Load() {
			ps = append(ps, p)
		}
	}
	return ps
}

// pulls reports whether consumer is the inbox consumer of a partition
// this process owns.
func (w *ownership) pulls(consumer string) bool {
	for p := range bus.Partitions {
		if bus.PartitionConsumer(p) == consumer {
			return w.owns[p].Load()
		}
	}
	return false
}

// Partitions lists the inbox partitions this orchestrator pulls from now.
func (o *Orchestrator) Partitions() []int { return o.owner.list() }
