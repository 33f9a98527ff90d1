package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/bus"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// optionalInt is an int flag that knows whether it was given.
type optionalInt struct{ v *int }

func (o *optionalInt) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optionalInt) Set(s string) error {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		return fmt.Errorf("not an integer: %q", s)
	}
	o.v = &n
	return nil
}

// metadata collects repeated --metadata key=value flags.
type metadata map[string]string

func (m metadata) String() string { return "" }

func (m metadata) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	m[k] = v
	return nil
}

// turnFlags are the flags submit and fork share: how the new turn runs.
type turnFlags struct {
	turn, session, agent, model, script *string
	watch                               *bool
	steps, budget                       optionalInt
	timeout                             *time.Duration
}

// defineTurnFlags defines the shared flags on f; the help of --session,
// --agent and --model differs between the commands, as their defaults do.
func defineTurnFlags(f *flag.FlagSet, sessionHelp, agentHelp, modelHelp string) *turnFlags {
	tf := &turnFlags{
		turn:    f.String("turn", "", "the new turn's id (default: a new UUIDv7)"),
		session: f.String("session", "", sessionHelp),
		agent:   f.String("agent", "", agentHelp),
		model:   f.String("model", "", modelHelp),
		script:  f.String("script", "", "file with an inline scripted model (YAML or JSON); implies --model script"),
		watch:   f.Bool("watch", false, "print the live trace and return when the turn finishes"),
		timeout: f.Duration("timeout", 0, "tighten the turn's timeout (e.g. 90s)"),
	}
	f.Var(&tf.steps, "steps", "tighten the step cap")
	f.Var(&tf.budget, "budget", "tighten the tool budget")
	return tf
}

// fill sets the submission's turn, session, agent, model, script and limits
// from the flags.
func (tf *turnFlags) fill(sub *events.Submit) error {
	sub.TurnID, sub.SessionID, sub.Agent, sub.Model = *tf.turn, *tf.session, *tf.agent, *tf.model
	if sub.TurnID == "" {
		sub.TurnID = NewID()
	}
	if *tf.script != "" {
		sc, err := model.LoadScript(*tf.script)
		if err != nil {
			return err
		}
		if sub.Script, err = json.Marshal(sc); err != nil {
			return err
		}
		if sub.Model == "" {
			sub.Model = "script"
		}
	}
	if tf.steps.v != nil || tf.budget.v != nil || *tf.timeout > 0 {
		sub.Limits = &events.Limits{Steps: tf.steps.v, TimeoutMs: tf.timeout.Milliseconds()}
		if tf.budget.v != nil {
			sub.Limits.Budget = *tf.budget.v
		}
	}
	return nil
}

func submit(ctx context.Context, c *command, args []string) int {
	f := c.flags
	tf := defineTurnFlags(f, "session id: earlier finished turns of the session are the history (default: the turn id)",
		"agent name", "model override, e.g. openai/gpt-4.1-mini or script")
	file := f.String("file", "", "a complete submit message (JSON) to publish as it is")
	meta := metadata{}
	f.Var(meta, "metadata", "key=value copied to turn.started (repeatable)")
	if !c.parse(args) {
		return ExitUsage
	}
	var sub events.Submit
	if *file != "" {
		data, err := os.ReadFile(*file)
		if err != nil {
			return c.fail("%v", err)
		}
		if err := schemas.Validate("submit", data); err != nil {
			return c.fail("%s: %v", *file, err)
		}
		if err := json.Unmarshal(data, &sub); err != nil {
			return c.fail("%s: %v", *file, err)
		}
	} else {
		text := strings.Join(f.Args(), " ")
		if text == "" {
			return c.usageErr("usage: jetloop submit [flags] TEXT (or --file submit.json)")
		}
		sub.Input = []events.Message{{Role: events.RoleUser, Content: text}}
		if err := tf.fill(&sub); err != nil {
			return c.fail("%v", err)
		}
		if len(meta) > 0 {
			sub.Metadata = meta
		}
	}
	if !events.ValidID(sub.TurnID) {
		return c.usageErr("invalid turn id %q", sub.TurnID)
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	return c.start(ctx, nc, js, sub, *tf.watch)
}

// start publishes a submission, prints its turn id and, with watch, follows
// the turn until it finishes.
func (c *command) start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, sub events.Submit, watch bool) int {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := Submit(pctx, nc, sub); err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintln(c.stdout, sub.TurnID)
	if !watch {
		return ExitOK
	}
	return c.follow(ctx, nc, js, sub.TurnID)
}

func watch(ctx context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return ExitUsage
	}
	if c.flags.NArg() != 1 || !events.ValidID(c.flags.Arg(0)) {
		return c.usageErr("usage: jetloop watch TURN")
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	turn := c.flags.Arg(0)
	// A mistyped turn id would otherwise wait in silence: say what it waits
	// for (the turn may well be submitted later).
	if store, err := bus.NewStore(ctx, js); err == nil {
		if _, _, ok, err := store.Last(ctx, turn); err == nil && !ok {
			fmt.Fprintf(c.stderr, "jetloop watch: turn %q has no events yet; waiting for it to start\n", turn)
		}
	}
	return c.follow(ctx, nc, js, turn)
}

// follow prints a turn's trace until it finishes; the exit status says how it
// ended: 0 for completed and synthesis_done, 1 for any other stop. Stopped by
// a signal before that, it exits quietly (see interrupted): the turn goes on
// without its viewer.
func (c *command) follow(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, turn string) int {
	fin, err := Watch(ctx, nc, js, turn, NewTrace(c.stdout, c.color()))
	if err != nil && ctx.Err() != nil {
		return interrupted(ctx)
	}
	if err != nil {
		return c.fail("%v", err)
	}
	if !Success(fin.StopReason) {
		return ExitStopped
	}
	return ExitOK
}
