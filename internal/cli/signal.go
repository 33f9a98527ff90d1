package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
)

// Interrupt is the cause of a context that SignalContext ended: which
// signal stopped the command. It is a context.Canceled.
type Interrupt struct{ Signal os.Signal }

func (i *Interrupt) Error() string { return i.Signal.String() + " signal received" }

// Is makes an Interrupt a context.Canceled, as the context's Err says.
func (i *Interrupt) Is(target error) bool { return target == context.Canceled }

// SignalContext is signal.NotifyContext that remembers the signal: the
// first of signals to arrive cancels the context with an *Interrupt as its
// cause, so a command can exit the way a shell expects of that signal.
// Later signals are ignored until stop is called.
func SignalContext(parent context.Context, signals ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, signals...)
	go func() {
		select {
		case s := <-ch:
			cancel(&Interrupt{Signal: s})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// ExitInterrupted is the exit status of a command that SIGINT stopped while
// it followed a turn: 128 + 2, as shells report it.
const ExitInterrupted = 130

// interrupted is the exit status of a command whose context ended while it
// followed a turn. Being stopped is what the user asked for, not a failure:
// ExitInterrupted after SIGINT (so a script running it stops too), 0 after
// SIGTERM or any other end.
func interrupted(ctx context.Context) int {
	if errors.Is(context.Cause(ctx), errDenied) {
		return ExitFailed // said already, by deny
	}
	var i *Interrupt
	if errors.As(context.Cause(ctx), &i) && i.Signal == os.Interrupt {
		return ExitInterrupted
	}
	return ExitOK
}
