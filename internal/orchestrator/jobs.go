package orchestrator

import (
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// encodeJob encodes a job as it goes on the wire: a tool job whole, a model
// job as a reference to the call, which the model runner derives from the
// turn (see calls).
func encodeJob(j fsm.Job) ([]byte, error) {
	if j.Submit != nil {
		return events.Marshal(j.Submit)
	}
	if j.Model == nil {
		return events.Marshal(j.Tool)
	}
	return events.Marshal(refOf(j.Model))
}

func refOf(j *events.ModelJob) events.ModelJobRef {
	return events.ModelJobRef{TurnID: j.TurnID, SessionID: j.SessionID, Step: j.Step, Kind: j.Kind,
		Attempt: j.Attempt, NotBefore: j.NotBefore}
}

// calls hands the model calls a shard publishes to the model runners of the
// same process, so a runner need not fold the turn's log to learn the
// conversation. A runner that finds no call here (another process published
// it, or this one restarted) derives it from the log, which says the same:
// a call is known by its job id, and the state that defines it is durable
// before its job is published.
type calls struct {
	mu sync.Mutex
	m  map[string]heldCall
}

type heldCall struct {
	job *events.ModelJob
	at  time.Time
}

// maxHeldCalls bounds the calls held: past it, calls held for longer than
// heldCallAge are let go (another process's runner may have taken them).
const (
	maxHeldCalls = 50_000
	heldCallAge  = 10 * time.Minute
)

func newCalls() *calls { return &calls{m: make(map[string]heldCall)} }

// put holds a model call under its job id.
func (c *calls) put(id string, job *events.ModelJob) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxHeldCalls {
		for k, h := range c.m {
			if now.Sub(h.at) > heldCallAge {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxHeldCalls {
			clear(c.m) // every call is still derivable from its turn's log
		}
	}
	c.m[id] = heldCall{job: job, at: now}
}

// get returns the call held under a job id.
func (c *calls) get(id string) (*events.ModelJob, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[id]
	return h.job, ok
}

// drop lets a call go once it is answered.
func (c *calls) drop(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
