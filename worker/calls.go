package worker

import (
	"context"
	"sync"

	"github.com/jetloop/jetloop/internal/events"
)

// ranCalls remembers the calls this worker runs and the results of the
// last ones it ran, by call id, so a job delivered again for one of them
// gets that result instead of a second run of the call.
type ranCalls struct {
	mu      sync.Mutex
	running map[string]chan struct{}
	results map[string]events.ToolResult
	order   []string // of results, oldest first
}

// keptResults bounds the results remembered.
const keptResults = 4096

func newRanCalls() *ranCalls {
	return &ranCalls{running: map[string]chan struct{}{}, results: map[string]events.ToolResult{}}
}

// result returns the result of a call this worker ran, waiting for it when
// the call still runs here; false when this worker has no result for it
// (never ran it, forgot it, or its run ended with no result to send).
func (c *ranCalls) result(stop context.Context, id string) (events.ToolResult, bool) {
	c.mu.Lock()
	r, ok := c.results[id]
	wait := c.running[id]
	c.mu.Unlock()
	if ok || wait == nil {
		return r, ok
	}
	select {
	case <-wait:
	case <-stop.Done():
		return events.ToolResult{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok = c.results[id]
	return r, ok
}

// begin records a call as running; the returned function records its end
// and the result sent, if any.
func (c *ranCalls) begin(id string) func(*events.ToolResult) {
	c.mu.Lock()
	ch := make(chan struct{})
	c.running[id] = ch
	c.mu.Unlock()
	return func(r *events.ToolResult) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if r != nil {
			if _, seen := c.results[id]; !seen {
				c.order = append(c.order, id)
			}
			c.results[id] = *r
			for len(c.order) > keptResults {
				delete(c.results, c.order[0])
				c.order = c.order[1:]
			}
		}
		if c.running[id] == ch {
			delete(c.running, id)
		}
		close(ch)
	}
}
