package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// fork starts a new turn whose history is another turn's conversation up to
// one of its steps. The orchestrator checks the turn and the step: a fork it
// cannot start is a dead letter and a rejected turn, as any bad submission.
func fork(ctx context.Context, c *command, args []string) int {
	f := c.flags
	from := f.Int("from-step", -1, "the last step of the original the fork keeps (0: only its input)")
	turn := f.String("turn", "", "the new turn's id (default: a new UUIDv7)")
	session := f.String("session", "", "the new turn's session (default: the original's)")
	agent := f.String("agent", "", "agent (default: the original's)")
	modelName := f.String("model", "", "model (default: the original's when the agent stays, else the agent's)")
	scriptFile := f.String("script", "", "file with an inline scripted model (YAML or JSON); implies --model script")
	watchIt := f.Bool("watch", false, "print the live trace and return when the turn finishes")
	var steps, budget optionalInt
	f.Var(&steps, "steps", "tighten the step cap")
	f.Var(&budget, "budget", "tighten the tool budget")
	timeout := f.Duration("timeout", 0, "tighten the turn's timeout (e.g. 90s)")
	if !c.parse(args) {
		return ExitUsage
	}
	if f.NArg() < 1 || *from < 0 {
		return c.usageErr("usage: jetloop fork --from-step N [--agent A] [--model M] [--watch] TURN [TEXT]")
	}
	orig := f.Arg(0)
	if !events.ValidID(orig) {
		return c.usageErr("invalid turn id %q", orig)
	}
	sub := events.Submit{TurnID: *turn, SessionID: *session, Agent: *agent, Model: *modelName,
		ForkedFrom: &events.ForkedFrom{TurnID: orig, Step: *from}}
	if sub.TurnID == "" {
		sub.TurnID = NewID()
	}
	if !events.ValidID(sub.TurnID) {
		return c.usageErr("invalid turn id %q", sub.TurnID)
	}
	if text := strings.Join(f.Args()[1:], " "); text != "" {
		sub.Input = []events.Message{{Role: events.RoleUser, Content: text}}
	}
	if *scriptFile != "" {
		sc, err := model.LoadScript(*scriptFile)
		if err != nil {
			return c.fail("%v", err)
		}
		if sub.Script, err = json.Marshal(sc); err != nil {
			return c.fail("%v", err)
		}
		if sub.Model == "" {
			sub.Model = "script"
		}
	}
	if steps.v != nil || budget.v != nil || *timeout > 0 {
		sub.Limits = &events.Limits{Steps: steps.v, TimeoutMs: timeout.Milliseconds()}
		if budget.v != nil {
			sub.Limits.Budget = *budget.v
		}
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Say at once what the orchestrator would only say in a dead letter.
	if err := checkFork(pctx, js, orig, *from); err != nil {
		return c.fail("%v", err)
	}
	if err := Submit(pctx, js, sub); err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintln(c.stdout, sub.TurnID)
	if !*watchIt {
		return ExitOK
	}
	return c.follow(ctx, nc, js, sub.TurnID)
}

// checkFork fails when the orchestrator would refuse to fork turn from step.
func checkFork(ctx context.Context, js jetstream.JetStream, turn string, step int) error {
	store, err := runtime.NewStore(ctx, js)
	if err != nil {
		return err
	}
	log, _, err := store.Read(ctx, turn)
	if err != nil {
		return err
	}
	if len(log) == 0 {
		return fmt.Errorf("no turn %q", turn)
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
