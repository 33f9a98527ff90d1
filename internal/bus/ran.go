package bus

import (
	"context"
	"sync"
)

// Ran remembers the calls a process runs and the results of the last ones
// it ran, by id, so a job delivered again for one of them (its
// acknowledgement was lost, or the jobs were derived again after a server
// restart) gets that result instead of a second run of the call.
type Ran[T any] struct {
	mu      sync.Mutex
	running map[string]chan struct{}
	results map[string]T
	order   []string // of results, oldest first
}

// keptResults bounds the results remembered.
const keptResults = 4096

// NewRan returns an empty record.
func NewRan[T any]() *Ran[T] {
	return &Ran[T]{running: map[string]chan struct{}{}, results: map[string]T{}}
}

// Result returns the result of a call this process ran, waiting for it
// when the call still runs here; false when it has no result for it (never
// ran it, forgot it, or its run ended with no result to send).
func (c *Ran[T]) Result(stop context.Context, id string) (T, bool) {
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
		var zero T
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok = c.results[id]
	return r, ok
}

// Begin records a call as running; the returned function records its end
// and the result sent, if any.
func (c *Ran[T]) Begin(id string) func(*T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begin(id)
}

// TryBegin is Begin unless the call runs here already or ran here and its
// result is remembered: then it returns false and records nothing.
func (c *Ran[T]) TryBegin(id string) (func(*T), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ran := c.results[id]
	if ran || c.running[id] != nil {
		return nil, false
	}
	return c.begin(id), true
}

// begin records a call as running; c.mu is held.
func (c *Ran[T]) begin(id string) func(*T) {
	ch := make(chan struct{})
	c.running[id] = ch
	return func(r *T) {
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
