package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errFlaky = errors.New("flaky")

func TestDoTriesUntilSuccess(t *testing.T) {
	var calls []int
	err := Policy{First: time.Microsecond, Max: time.Microsecond}.Do(context.Background(), func(try int) error {
		calls = append(calls, try)
		if try < 3 {
			return errFlaky
		}
		return nil
	})
	if err != nil || len(calls) != 3 || calls[2] != 3 {
		t.Fatalf("err %v, calls %v; want nil after tries 1..3", err, calls)
	}
}

func TestDoStopsAtTries(t *testing.T) {
	n := 0
	err := Policy{First: time.Microsecond, Tries: 4}.Do(context.Background(), func(int) error { n++; return errFlaky })
	if !errors.Is(err, errFlaky) || n != 4 {
		t.Fatalf("err %v after %d calls; want errFlaky after 4", err, n)
	}
}

func TestDoStopsOnPermanent(t *testing.T) {
	n := 0
	err := Policy{First: time.Microsecond}.Do(context.Background(), func(int) error { n++; return Permanent(errFlaky) })
	if n != 1 || !errors.Is(err, errFlaky) {
		t.Fatalf("err %v after %d calls; want errFlaky after 1", err, n)
	}
	var p *permanent
	if errors.As(err, &p) {
		t.Fatal("Do returned the Permanent wrapper, not the error itself")
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
}

// A pause as long as the test's deadline must end when the context does: a
// stopping process does not wait out its retries' pauses.
func TestDoWatchesTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Policy{First: time.Hour}.Do(ctx, func(int) error { return errFlaky })
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, errFlaky) {
			t.Fatalf("err %v, want the last error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Do slept through its context's end")
	}
}

func TestPausesDoubleUpToMax(t *testing.T) {
	b := Policy{First: 100 * time.Millisecond, Max: time.Second}
	var got []time.Duration
	for p := b.First; len(got) < 6; p = b.next(p) {
		got = append(got, p)
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("pauses %v, want %v ms", got, want)
		}
	}
	// A Max below First keeps the first pause.
	if p := (Policy{First: time.Second}).next(time.Second); p != time.Second {
		t.Fatalf("next with no Max = %v, want 1s", p)
	}
}
