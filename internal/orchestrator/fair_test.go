package orchestrator

import "testing"

// A tenant alone has every slot. Another tenant with inputs never waits
// for it: it takes its share at once, and the first, over its share, takes
// no more until it is back under it.
func TestFairnessSharesSlots(t *testing.T) {
	f := NewFairness(4)
	full := func(tenant string) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.full(tenant)
	}
	for range 4 {
		if full("a") {
			t.Fatal("a tenant alone is held under every slot")
		}
		f.acquire("a")
	}
	if !full("a") {
		t.Fatal("a tenant alone goes past every slot")
	}
	f.acquire("b") // its share of two, at once, though a holds all four
	for range 2 {
		f.release("a") // three, then two: still at its share while b has inputs
		if !full("a") {
			t.Fatal("a may take more than its share while b has inputs")
		}
	}
	f.release("a")
	if full("a") {
		t.Fatal("a, under its share, may not take a slot")
	}

	// A waiter wakes when a slot is let go.
	f.acquire("a") // two again: at its share
	woke := make(chan struct{})
	go func() {
		f.acquire("a")
		close(woke)
	}()
	f.release("a")
	<-woke
	f.release("a")
	f.release("a")
	f.release("b")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy["a"] != 0 || f.busy["b"] != 0 || f.share() != 4 {
		t.Fatalf("after everything let go: busy %v, share %d", f.busy, f.share())
	}
}
