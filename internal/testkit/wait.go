package testkit

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after a minute: tests
// wait on a condition with a deadline, never for a fixed time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForOr(t, what, cond, nil)
}

// WaitForOr is WaitFor that calls explain, when set, before it fails: to
// log what the failure of a long run needs to be understood.
func WaitForOr(t testing.TB, what string, cond func() bool, explain func()) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				explain()
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
