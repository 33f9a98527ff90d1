// Package cli is the jetloop command: the demo and dev stacks in one process,
// and the client commands that submit, watch and steer turns.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/proc"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitStopped = 1 // the turn finished, but not with completed or synthesis_done
	ExitUsage   = 2
	ExitFailed  = 3 // the command could not do its work
)

const usage = `jetloop: durable agent loops on NATS JetStream

usage: jetloop COMMAND [flags] [args]

  demo                     run a sample turn on an embedded server and print its live trace
  dev                      run server, orchestrator and tool worker here and stay up
  submit [--watch] ...     publish a turn request and print its turn id
  watch TURN               print a turn's live trace until it finishes
  replay [--json] [--at STEP] [--file FILE] TURN
                           print a recorded turn through today's machine
  replay --verify TURN     re-derive every decision of the log with today's machine
  replay --html PAGE TURN  write the turn's timeline as one self-contained HTML page
  export TURN              print a turn's events as JSON lines
  fork --from-step N [--agent A] [--model M] TURN [TEXT]
                           run a new turn on TURN's conversation up to step N
  turns [--session S] [--status S] [--agent A]
                           list turns: running, paused on what, finished how
  show TURN                one turn on one screen
  abort TURN               stop a turn
  reply TURN CALL_ID TEXT  answer a turn's ask_user question
  approve|deny TURN CALL_ID  decide a call that waits for approval
  dead [show SEQ | retry [--file FIXED.json] SEQ]
                           list, show and re-send dead letters
  agents check PATH        validate an AGENTS.md file or directory
  bench [--quick] [--deployed] [--json] measure the cost of a durable step (see BENCHMARKS.md)
  streams apply|check      provision the streams, buckets and consumers (as admin),
                           or report how the server differs from the table
  ui [--addr HOST:PORT]    serve a live web view of turns and dead letters
                           (default 127.0.0.1:8080)
  top [--once]             one screen of running turns, rates, tool latency, dead letters
  workflow run [--watch] FILE.yaml
                           run a list of tasks as a workflow (the outer loop)
  workflow watch|show|abort|approve|deny ID
                           follow, inspect and steer a workflow
  workflows                list workflows, newest first

Every command takes --nats URL (default $NATS_URL, else nats://127.0.0.1:4222),
--creds FILE / --user (NATS_USER) / --password-file FILE (NATS_PASSWORD) / --tls-ca
FILE (NATS_CA), and --no-color (as does NO_COLOR).
Run jetloop COMMAND -h for its flags.
`

// Main runs the jetloop command with args (without the program name) and
// returns its exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	c := &command{name: args[0], stdout: stdout, stderr: stderr}
	c.flags = flag.NewFlagSet("jetloop "+c.name, flag.ContinueOnError)
	c.flags.SetOutput(stderr)
	c.flags.StringVar(&c.url, "nats", os.Getenv("NATS_URL"), "NATS server URL")
	c.auth.Inbox = bus.InboxCLI
	c.auth.Flags(c.flags)
	c.flags.BoolVar(&c.noColor, "no-color", false, "plain text even on a terminal (as does NO_COLOR)")
	run, ok := commands[c.name]
	if !ok {
		fmt.Fprintf(stderr, "jetloop: unknown command %q\n\n%s", c.name, usage)
		return ExitUsage
	}
	return run(ctx, c, args[1:])
}

type command struct {
	name           string
	flags          *flag.FlagSet
	url            string
	auth           bus.Auth
	noColor        bool
	stdout, stderr io.Writer
	// asyncErr, when set, takes the connection's asynchronous errors
	// instead of stderr (ui turns a denied publish into a hidden button).
	asyncErr func(error)
}

// color reports whether the command's output gets colour: on a terminal,
// unless --no-color or NO_COLOR says otherwise.
func (c *command) color() bool { return !c.noColor && proc.IsTerminal(c.stdout) }

var commands map[string]func(context.Context, *command, []string) int

func init() {
	commands = map[string]func(context.Context, *command, []string) int{
		"demo":    demo,
		"dev":     dev,
		"submit":  submit,
		"watch":   watch,
		"replay":  replay,
		"export":  export,
		"abort":   abort,
		"reply":   reply,
		"approve": approve,
		"deny":    approve,
		"agents":  agentsCmd,
		"fork":    fork,
		"dead":    dead,
		"turns":   turns,
		"show":    show,
		"bench":   benchCmd,
		"streams": streams,
		"ui":      ui,
		"top":     topCmd,

		"workflow":  workflowCmd,
		"workflows": workflowsCmd,
	}
}

func (c *command) parse(args []string) bool {
	return c.flags.Parse(args) == nil
}

func (c *command) fail(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "jetloop %s: %s\n", c.name, fmt.Sprintf(format, a...))
	return ExitFailed
}

func (c *command) usageErr(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "jetloop %s: %s\n", c.name, fmt.Sprintf(format, a...))
	c.flags.Usage()
	return ExitUsage
}

// connect opens the connection a client command uses.
func (c *command) connect() (*nats.Conn, jetstream.JetStream, error) {
	url := c.url
	if url == "" {
		url = bus.DefaultURL
	}
	opts, err := c.auth.Options()
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, nats.Timeout(3*time.Second), nats.RetryOnFailedConnect(false))
	nc, err := bus.Connect(url, "jetloop "+c.name, func(err error) {
		if c.asyncErr != nil {
			c.asyncErr(err)
			return
		}
		fmt.Fprintf(c.stderr, "jetloop %s: %v\n", c.name, err)
	}, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := bus.JetStreamFor(context.Background(), nc, c.auth.APIPrefix)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// NewID makes a turn or session id: a UUIDv7, ordered by time.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

func agentsCmd(_ context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return ExitUsage
	}
	rest := c.flags.Args()
	if len(rest) != 2 || rest[0] != "check" {
		return c.usageErr("usage: jetloop agents check PATH")
	}
	set, diags, err := agents.Load(rest[1])
	for _, d := range diags {
		fmt.Fprintln(c.stdout, d.String())
	}
	if err != nil {
		if len(diags) == 0 {
			fmt.Fprintln(c.stdout, err)
		}
		return 1
	}
	for _, n := range set.Names() {
		a, _ := set.Get(n)
		fmt.Fprintf(c.stdout, "%s: model %s, step cap %d\n", a.Name, a.Model, a.StepCap())
	}
	return ExitOK
}

func control(ctx context.Context, c *command, turn string, ctl events.Control) int {
	if !events.ValidID(turn) {
		return c.usageErr("invalid turn id %q", turn)
	}
	data, err := jsonMarshal(ctl)
	if err != nil {
		return c.fail("%v", err)
	}
	if err := schemas.Validate("control", data); err != nil {
		return c.usageErr("%v", err) // say so here, not in a dead letter
	}
	nc, _, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cl, err := client.New(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	// The client refuses at once what cannot move the turn as it is now (no
	// such turn, finished, not waiting on that call), instead of sending it
	// to become a dead letter or be ignored.
	switch {
	case ctl.Action == events.ActionAbort:
		err = cl.Abort(ctx, turn, ctl.Reason)
	case ctl.Action == events.ActionReply:
		err = cl.Reply(ctx, turn, ctl.CallID, ctl.Answer)
	case *ctl.Approved:
		err = cl.Approve(ctx, turn, ctl.CallID, ctl.Note)
	default:
		err = cl.Deny(ctx, turn, ctl.CallID, ctl.Note)
	}
	if err != nil {
		return c.fail("%v", err)
	}
	return ExitOK
}

func abort(ctx context.Context, c *command, args []string) int {
	reason := c.flags.String("reason", "aborted from the command line", "why the turn stops")
	if !c.parse(args) {
		return ExitUsage
	}
	if c.flags.NArg() != 1 {
		return c.usageErr("usage: jetloop abort [--reason TEXT] TURN")
	}
	return control(ctx, c, c.flags.Arg(0), events.Control{Action: events.ActionAbort, Reason: *reason})
}

func reply(ctx context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return ExitUsage
	}
	if c.flags.NArg() != 3 {
		return c.usageErr("usage: jetloop reply TURN CALL_ID TEXT")
	}
	return control(ctx, c, c.flags.Arg(0), events.Control{Action: events.ActionReply, CallID: c.flags.Arg(1), Answer: c.flags.Arg(2)})
}

func approve(ctx context.Context, c *command, args []string) int {
	note := c.flags.String("note", "", "a note the model sees")
	if !c.parse(args) {
		return ExitUsage
	}
	if c.flags.NArg() != 2 {
		return c.usageErr("usage: jetloop %s [--note TEXT] TURN CALL_ID", c.name)
	}
	ok := c.name == "approve"
	return control(ctx, c, c.flags.Arg(0), events.Control{Action: events.ActionApprove, CallID: c.flags.Arg(1), Approved: &ok, Note: *note})
}
