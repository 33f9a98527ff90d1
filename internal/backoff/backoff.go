// Package backoff runs an operation again after it fails, with a pause that
// grows, until it succeeds, says it cannot, its tries run out or its context
// ends.
//
// It is the one retry loop of the project: every process tries again a
// publish, an acknowledgement or a restart, and a loop of its own that slept
// with time.Sleep kept a stopping process waiting for its pause to end.
package backoff

import (
	"context"
	"errors"
	"time"
)

// Policy is how an operation is tried again: pauses start at First and
// double up to Max; Tries bounds the calls (0: no bound but the context).
type Policy struct {
	First time.Duration
	Max   time.Duration
	Tries int
}

// Do calls op (with its try number, from 1) until it returns nil or an error
// wrapped by Permanent, Tries calls were made, or ctx ends during a pause. It
// returns nil or the last error (unwrapped from Permanent).
func (b Policy) Do(ctx context.Context, op func(try int) error) error {
	pause := b.First
	for try := 1; ; try++ {
		err := op(try)
		if err == nil {
			return nil
		}
		var p *permanent
		if errors.As(err, &p) {
			return p.err
		}
		if b.Tries > 0 && try >= b.Tries {
			return err
		}
		if !Sleep(ctx, pause) {
			return err
		}
		pause = b.next(pause)
	}
}

// next is the pause after one of pause: twice as long, up to Max.
func (b Policy) next(pause time.Duration) time.Duration {
	return min(2*pause, max(b.Max, b.First))
}

// Permanent wraps an error that trying again cannot cure: Do returns it at
// once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err}
}

type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// Sleep pauses for d, or less when ctx ends first; it reports whether the
// whole pause passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
