package orchestrator

import (
	"testing"
	"time"
)

// A tenant alone has every slot. Another tenant with inputs never waits
// for it: it takes its share at once, and the first, over its share, takes
// no more until it is back under it.
func TestFairnessSharesSlots(t *testing.T) {
	f := NewFairness(4)
	for range 4 {
		f.acquire("a") // alone: all four
	}
	f.acquire("b") // its share of two, at once
	again := make(chan struct{})
	go func() {
		f.acquire("a")
		close(again)
	}()
	for range 2 {
		f.release("a") // down to three, then two: still at its share
		select {
		case <-again:
			t.Fatal("a took more than its share while b had inputs")
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.release("a") // one: under its share
	<-again
	f.release("a")
	f.release("a")
	f.release("b")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy["a"] != 0 || f.busy["b"] != 0 || f.share() != 4 {
		t.Fatalf("after everything let go: busy %v, share %d", f.busy, f.share())
	}
}
