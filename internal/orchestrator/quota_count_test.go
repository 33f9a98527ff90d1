package orchestrator

import (
	"context"
	"errors"
	"testing"
)

// TestRecountKeepsTurnsBeingStarted: a turn admitted by the in-flight quota
// is in the index only once its submission's handling wrote its entry. A
// recount whose listing began before that keeps counting it, so a quota of
// two never lets a third turn in between two recounts.
func TestRecountKeepsTurnsBeingStarted(t *testing.T) {
	ctx := context.Background()
	q := &quotas{tenant: "a", q: Quota{InFlight: 2}}
	var index int64 // the entries a listing sees
	var listErr error
	count := func(context.Context) (int64, error) { return index, listErr }
	admitted := func() bool { _, reason := q.admit(); return reason == "" }
	recount := func() {
		t.Helper()
		if err := q.recount(ctx, count); err != nil && !errors.Is(err, listErr) {
			t.Fatal(err)
		}
	}

	if !admitted() {
		t.Fatal("the first turn refused")
	}
	index++
	q.settle()
	if !admitted() {
		t.Fatal("the second turn refused")
	}
	recount() // the second turn's entry is not written yet
	if admitted() {
		t.Fatal("a third turn admitted at a quota of 2: the recount dropped a turn being started")
	}

	index++
	q.settle()
	listErr = errors.New("listing failed")
	recount() // a failed listing forgets nothing
	listErr = nil
	recount()
	if q.live.Load() != 2 || q.admitted.Load() != 0 {
		t.Fatalf("counted %d in the index and %d admitted since, want 2 and 0", q.live.Load(), q.admitted.Load())
	}
	if admitted() {
		t.Fatal("a third turn admitted at a quota of 2")
	}

	index-- // one finished
	recount()
	if !admitted() {
		t.Fatal("no room after a turn finished")
	}
}
