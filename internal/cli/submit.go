package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
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
	watch, noWait                       *bool
	steps, budget                       optionalInt
	timeout, startTimeout               *time.Duration
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
		noWait:  f.Bool("no-wait", false, "return once the inbox has the submission, without waiting to see it start or be rejected"),
		startTimeout: f.Duration("start-timeout", 10*time.Second,
			"how long to wait for the turn to start or be rejected; a turn not started by then is left in the inbox (exit 0)"),
	}
	f.Var(&tf.steps, "steps", "tighten the step cap")
	f.Var(&tf.budget, "budget", "tighten the tool budget")
	return tf
}

// fill sets the request's turn, session, agent, model, script and limits
// from the flags.
func (tf *turnFlags) fill(sub *client.TurnRequest) error {
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
		return c.exit
	}
	var sub client.TurnRequest
	if *file != "" {
		data, err := os.ReadFile(*file)
		if err != nil {
			return c.fail("%v", err)
		}
		if err := schemas.Validate("submit", data); err != nil {
			return c.fail("%s: %v", *file, err)
		}
		// What the schema allows beyond a request (a task's workflow, a
		// subagent's parent) only the orchestrator submits.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sub); err != nil {
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
	nc, _, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	return c.start(ctx, nc, sub, tf)
}

// start publishes a submission and prints its turn id; unless --no-wait it
// waits for the turn to start or be rejected, and with --watch follows it
// until it finishes.
func (c *command) start(ctx context.Context, nc *nats.Conn, sub client.TurnRequest, tf *turnFlags) int {
	cl, err := c.sdk(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var before prior
	if !*tf.noWait {
		var err error
		if before, err = priorOf(pctx, cl, sub); err != nil {
			var r *reusedError
			if errors.As(err, &r) {
				fmt.Fprintf(c.stderr, "jetloop %s: %v\n", c.name, err)
				return ExitStopped
			}
			return c.fail("%v", err)
		}
	}
	var feed *deltaFeed
	if *tf.watch {
		// Subscribed before the turn exists, the trace has its first
		// streamed word.
		var err error
		if feed, err = openDeltas(ctx, cl, sub.TurnID); err != nil {
			return c.fail("%v", err)
		}
		defer feed.close()
	}
	rec, err := cl.Send(pctx, sub)
	if err != nil {
		return c.fail("%v", err)
	}
	dup := rec.Duplicate
	fmt.Fprintln(c.stdout, sub.TurnID)
	code := ExitOK
	if dup && !before.started && !*tf.noWait {
		// A rejected turn's id is free again for a valid submission, but
		// not within the inbox's duplicate window: nothing would happen.
		fmt.Fprintf(c.stderr, "jetloop %s: turn %s rejected: the inbox dropped this submission as a duplicate of an earlier one with the same turn id (within its duplicate window); choose another --turn\n",
			c.name, sub.TurnID)
		return ExitStopped
	}
	if !*tf.noWait {
		code = c.awaitStart(ctx, cl, sub.TurnID, before, *tf.startTimeout)
	}
	if code == ExitOK && *tf.watch && ctx.Err() == nil {
		code = c.follow(ctx, feed, cl, sub.TurnID)
	}
	if ctx.Err() != nil && !c.saidDenial() {
		// The command stopped, not the turn: say how to get back to it.
		fmt.Fprintf(c.stderr, "\njetloop %s: turn %s goes on: `jetloop watch %s` follows it, `jetloop abort %s` stops it\n",
			c.name, sub.TurnID, sub.TurnID, sub.TurnID)
		return interrupted(ctx)
	}
	return code
}

// prior is what a turn's log held before a submission: what to wait for
// depends on it.
type prior struct {
	// skip is the id of a rejection-only log's event, which a valid
	// submission replaces: it says nothing about the new submission.
	skip string
	// started says the submission is the one that started the turn
	// already (a re-send changes nothing).
	started bool
}

// priorOf reads what the log of sub's turn holds. A turn that another
// submission started is refused here: the inbox would drop this one as a
// duplicate of its id, or the orchestrator make it a dead letter, and the
// turn's log would never say.
func priorOf(ctx context.Context, cl *client.Client, sub client.TurnRequest) (prior, error) {
	last, err := cl.Last(ctx, sub.TurnID)
	if errors.Is(err, client.ErrTurnNotFound) {
		return prior{}, nil
	}
	if err != nil {
		return prior{}, err
	}
	if last.Seq == 1 && last.Type == events.TurnFinished {
		return prior{skip: last.ID}, nil
	}
	first, ok, err := firstEvent(ctx, cl, sub.TurnID, "")
	if err != nil || !ok {
		return prior{}, fmt.Errorf("read turn %s: %v", sub.TurnID, err)
	}
	var d events.TurnStartedData
	// A request marshals as the submission the client publishes for it
	// (client's TestRequestIsItsSubmission), so the digests compare.
	data, err := json.Marshal(sub)
	if err != nil {
		return prior{}, err
	}
	if first.Type == events.TurnStarted && json.Unmarshal(first.Data, &d) == nil && d.SubmitDigest == events.SubmitDigest(data) {
		return prior{started: true}, nil
	}
	return prior{}, &reusedError{sub.TurnID}
}

// reusedError is a submission under the id of a turn another submission
// started.
type reusedError struct{ turn string }

func (e *reusedError) Error() string {
	return fmt.Sprintf("turn %s rejected: a turn %s exists already, started by another submission (choose another --turn)", e.turn, e.turn)
}

// awaitStart waits up to d for the submitted turn to start. A rejection
// (an unknown agent, several agents and none named) is printed with the
// orchestrator's reason and exits 1; a turn that has not started by then
// is still in the inbox, which is said, and exits 0.
func (c *command) awaitStart(ctx context.Context, cl *client.Client, turn string, before prior, d time.Duration) int {
	if before.started {
		fmt.Fprintf(c.stderr, "jetloop %s: turn %s was started by this same submission already; nothing changed\n", c.name, turn)
		return ExitOK
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	first, ok, err := firstEvent(wctx, cl, turn, before.skip)
	switch {
	case ok && first.Type == events.TurnFinished:
		var fin events.TurnFinishedData
		_ = json.Unmarshal(first.Data, &fin)
		if fin.StopReason == events.StopRejected {
			fmt.Fprintf(c.stderr, "jetloop %s: turn %s rejected: %s\n", c.name, turn, fin.Error)
			return ExitStopped
		}
		return ExitOK // it ran to its end already; --watch prints how
	case ok:
		return ExitOK
	case ctx.Err() != nil:
		return interrupted(ctx)
	case err != nil && wctx.Err() == nil:
		return c.fail("%v", err)
	}
	fmt.Fprintf(c.stderr, "jetloop %s: turn %s has not started after %s: is an orchestrator running? It starts when one takes it (jetloop watch %s)\n",
		c.name, turn, d, turn)
	return ExitOK
}

// firstEvent returns the first event of turn's log other than the one
// whose id is skip, waiting until ctx ends; ok is false when none came.
func firstEvent(ctx context.Context, cl *client.Client, turn, skip string) (events.Envelope, bool, error) {
	for e, err := range cl.FollowLog(ctx, turn) {
		if err != nil {
			return e, false, err
		}
		if e.ID != skip {
			return e, true, nil
		}
	}
	return events.Envelope{}, false, ctx.Err()
}

// watchUnknownAfter is how long watch waits for the first event of a turn
// before it calls the turn unknown: long enough for a turn just submitted
// elsewhere to start.
const watchUnknownAfter = 5 * time.Second

func watch(ctx context.Context, c *command, args []string) int {
	wait := c.flags.Bool("wait", false, "wait for a turn that has not started yet, however long (default: a turn with no events after 5s is unknown, exit 1)")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 1 || !events.ValidID(c.flags.Arg(0)) {
		return c.usageErr("usage: jetloop watch [--wait] TURN")
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
	turn := c.flags.Arg(0)
	if *wait {
		// Say what it waits for: a mistyped id would otherwise wait in
		// silence.
		if _, err := cl.Last(ctx, turn); errors.Is(err, client.ErrTurnNotFound) {
			fmt.Fprintf(c.stderr, "jetloop watch: turn %q has no events yet; waiting for it to start\n", turn)
		}
	} else {
		wctx, cancel := context.WithTimeout(ctx, watchUnknownAfter)
		_, ok, err := firstEvent(wctx, cl, turn, "")
		cancel()
		switch {
		case ctx.Err() != nil:
			return interrupted(ctx)
		case err != nil && wctx.Err() == nil:
			return c.fail("%v", err)
		case !ok:
			fmt.Fprintf(c.stderr, "jetloop watch: no turn %q (its log is empty after %s; --wait waits for it to start)\n", turn, watchUnknownAfter)
			return ExitStopped
		}
	}
	feed, err := openDeltas(ctx, cl, turn)
	if err != nil {
		return c.fail("%v", err)
	}
	defer feed.close()
	return c.follow(ctx, feed, cl, turn)
}

// follow prints a turn's trace until it finishes; the exit status says how it
// ended: 0 for completed and synthesis_done, 1 for any other stop. Stopped by
// a signal before that, it exits quietly (see interrupted): the turn goes on
// without its viewer.
func (c *command) follow(ctx context.Context, feed *deltaFeed, cl *client.Client, turn string) int {
	fin, err := watchFrom(ctx, feed, cl, turn, timeline.NewTrace(c.stdout, c.color()))
	if err != nil && ctx.Err() != nil {
		return interrupted(ctx)
	}
	if err != nil {
		return c.fail("%v", err)
	}
	if !timeline.Success(fin.StopReason) {
		return ExitStopped
	}
	return ExitOK
}
