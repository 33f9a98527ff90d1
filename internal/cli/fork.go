package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// fork starts a new turn whose history is another turn's conversation up to
// one of its steps. The orchestrator checks the turn and the step: a fork it
// cannot start is a dead letter and a rejected turn, as any bad submission.
func fork(ctx context.Context, c *command, args []string) int {
	f := c.flags
	from := f.Int("from-step", -1, "the last step of the original the fork keeps (0: only its input)")
	tf := defineTurnFlags(f, "the new turn's session (default: the original's)", "agent (default: the original's)",
		"model (default: the original's when the agent stays, else the agent's)")
	if !c.parse(args) {
		return c.exit
	}
	if f.NArg() < 1 || *from < 0 {
		return c.usageErr("usage: jetloop fork --from-step N [flags] TURN [TEXT...]")
	}
	orig := f.Arg(0)
	if !events.ValidID(orig) {
		return c.usageErr("invalid turn id %q", orig)
	}
	sub := client.TurnRequest{ForkedFrom: &client.ForkedFrom{TurnID: orig, Step: *from}}
	if err := tf.fill(&sub); err != nil {
		return c.fail("%v", err)
	}
	if !events.ValidID(sub.TurnID) {
		return c.usageErr("invalid turn id %q", sub.TurnID)
	}
	if text := strings.Join(f.Args()[1:], " "); text != "" {
		sub.Input = []events.Message{{Role: events.RoleUser, Content: text}}
	}
	nc, _, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cl, err := c.sdk(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Say at once what the orchestrator would only say in a dead letter.
	if err := checkFork(pctx, cl, orig, *from); err != nil {
		return c.fail("%v", err)
	}
	return c.start(ctx, nc, sub, tf)
}

// checkFork fails when the orchestrator would refuse to fork turn from step.
func checkFork(ctx context.Context, cl *client.Client, turn string, step int) error {
	log, err := cl.Log(ctx, turn)
	if errors.Is(err, client.ErrTurnNotFound) {
		return fmt.Errorf("no turn %q", turn)
	}
	if err != nil {
		return err
	}
	if _, err = fsm.ForkPoint(log, step); err != nil {
		var fe *fsm.ForkError
		if errors.As(err, &fe) {
			return fmt.Errorf("cannot fork turn %q from step %d: %s", fe.Turn, fe.Step, fe.Reason)
		}
		return err
	}
	return nil
}
