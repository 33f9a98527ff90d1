// Package lru is a bounded map that forgets the entry used least recently
// when it is full.
//
// The orchestrator's caches hold folded turn states and finished turns'
// transcripts. Evicting an arbitrary key (what ranging over a Go map gives)
// could throw out the turn that is being worked on right now, which is then
// folded again from its log on its next input; the least recently used one
// is almost always a turn that has gone quiet.
package lru

import "container/list"

// Cache maps keys to values and holds at most its size of them. It is not
// safe for concurrent use: its owners lock around it or own it alone.
type Cache[K comparable, V any] struct {
	size  int
	order *list.List // front: used last
	items map[K]*list.Element
}

type item[K comparable, V any] struct {
	key K
	val V
}

// New returns a cache of at most size entries (at least one).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{size: max(size, 1), order: list.New(), items: make(map[K]*list.Element)}
}

// Get returns the value of key and marks it used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	el, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*item[K, V]).val, true
}

// Contains reports whether key is cached, without marking it used.
func (c *Cache[K, V]) Contains(key K) bool {
	_, ok := c.items[key]
	return ok
}

// Put sets the value of key and marks it used, forgetting the least
// recently used entry when the cache is full.
func (c *Cache[K, V]) Put(key K, val V) {
	if el, ok := c.items[key]; ok {
		el.Value.(*item[K, V]).val = val
		c.order.MoveToFront(el)
		return
	}
	if c.order.Len() >= c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*item[K, V]).key)
	}
	c.items[key] = c.order.PushFront(&item[K, V]{key: key, val: val})
}

// Delete forgets key.
func (c *Cache[K, V]) Delete(key K) {
	if el, ok := c.items[key]; ok {
		c.order.Remove(el)
		delete(c.items, key)
	}
}

// Len is the number of entries.
func (c *Cache[K, V]) Len() int { return c.order.Len() }
