// Package cli is the jetloop command: the demo and dev stacks in one process,
// and the client commands that submit, watch and steer turns.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/proc"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
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

// Main runs the jetloop command with args (without the program name) and
// returns its exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	args = hoistGlobalFlags(args)
	if len(args) == 0 {
		writeUsage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		args[0] = "help"
	case "-version", "--version":
		args[0] = "version"
	}
	s, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "jetloop: unknown command %q (jetloop help lists them)\n", args[0])
		return ExitUsage
	}
	c := &command{name: s.name, spec: s, stdout: stdout, stderr: stderr}
	c.flags = flag.NewFlagSet("jetloop "+c.name, flag.ContinueOnError)
	c.flags.SetOutput(stderr)
	c.auth.Inbox = bus.InboxCLI
	c.globalFlags(c.flags)
	c.global = map[string]bool{}
	c.flags.VisitAll(func(f *flag.Flag) { c.global[f.Name] = true })
	// parse prints what follows a flag error (the command's forms, not a
	// dump of every flag) and the help that -h asks for.
	c.flags.Usage = func() {}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.denied.cancel = cancel
	return s.run(ctx, c, args[1:])
}

// hoistGlobalFlags moves the flags every command takes from before the
// command to just after its name (`jetloop --nats URL turns` is `jetloop
// turns --nats URL`), where each command's parse reads them, as the nats CLI
// takes `nats --server URL stream ls`. Anything else before the command is
// left for Main to refuse.
func hoistGlobalFlags(args []string) []string {
	f := flag.NewFlagSet("jetloop", flag.ContinueOnError)
	(&command{}).globalFlags(f)
	i := 0
	for i < len(args) {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			break
		}
		fl := f.Lookup(name)
		if fl == nil {
			break
		}
		i++
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); (!ok || !b.IsBoolFlag()) && !hasValue && i < len(args) {
			i++ // the flag's value
		}
	}
	switch i {
	case len(args):
		return nil // flags but no command: the usage
	case 0:
		return args
	}
	out := make([]string, 0, len(args))
	out = append(out, args[i])
	out = append(out, args[:i]...)
	return append(out, args[i+1:]...)
}

type command struct {
	name   string
	spec   spec
	global map[string]bool // the names of the flags every command takes
	exit   int             // the exit status when parse returns false
	flags  *flag.FlagSet
	url    string
	auth   bus.Auth
	// contextName is --context; resolved says resolveServer has settled
	// url and auth.
	contextName string
	resolved    bool
	// tenant, when set, names the credentials: the seed of the tenant's
	// user whose role the command needs (tenantRole), from the tenants
	// file.
	tenant, tenantsFile string
	noColor             bool
	stdout, stderr      io.Writer
	// asyncErr, when set, takes the connection's asynchronous errors
	// instead of stderr (ui turns a denied publish into a hidden button).
	asyncErr func(error)
	denied   denial
}

// color reports whether the command's output gets colour: on a terminal,
// unless --no-color or NO_COLOR says otherwise.
func (c *command) color() bool { return !c.noColor && proc.IsTerminal(c.stdout) }

func (c *command) fail(format string, a ...any) int {
	if c.saidDenial() {
		return ExitFailed // what failed after it is its consequence
	}
	for i, v := range a {
		if err, ok := v.(error); ok && errors.Is(err, nats.ErrNoResponders) {
			a[i] = c.explain(err)
		}
	}
	fmt.Fprintf(c.stderr, "jetloop %s: %s\n", c.name, fmt.Sprintf(format, a...))
	return ExitFailed
}

func (c *command) usageErr(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "jetloop %s: %s\n", c.name, fmt.Sprintf(format, a...))
	c.shortUsage()
	return ExitUsage
}

// connect opens the connection a client command uses.
func (c *command) connect() (*nats.Conn, jetstream.JetStream, error) {
	if err := c.resolveServer(); err != nil {
		return nil, nil, err
	}
	url := c.url
	auth, err := c.authFor()
	if err != nil {
		return nil, nil, err
	}
	opts, err := auth.Options()
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, nats.Timeout(3*time.Second), nats.RetryOnFailedConnect(false))
	nc, err := bus.Connect(url, "jetloop "+c.name, func(err error) {
		if c.asyncErr != nil {
			c.asyncErr(err)
			return
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.deny(err)
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
	strict := c.flags.Bool("strict", false, "exit 1 on any warning too (a value read as another type, a tool in approval: that tools: does not offer)")
	if !c.parse(args) {
		return c.exit
	}
	rest := c.flags.Args()
	if len(rest) != 2 || rest[0] != "check" {
		return c.usageErr("usage: jetloop agents check [--strict] PATH")
	}
	set, diags, err := agents.Check(rest[1])
	for _, d := range diags {
		fmt.Fprintln(c.stdout, d.String())
	}
	if err != nil {
		if len(diags) == 0 {
			fmt.Fprintln(c.stdout, err)
		}
		return 1
	}
	if *strict && len(diags) > 0 {
		fmt.Fprintf(c.stderr, "jetloop agents: %d warning(s), and --strict fails on any\n", len(diags))
		return 1
	}
	for _, n := range set.Names() {
		a, _ := set.Get(n)
		budget, timeout := fmt.Sprint(a.Budget), a.Timeout.String()
		if a.Budget <= 0 {
			budget = fmt.Sprintf("%d (default)", fsm.DefaultBudget)
		}
		if a.Timeout <= 0 {
			timeout = agents.DefaultTimeout.String() + " (default)"
		}
		fmt.Fprintf(c.stdout, "%s: model %s, step cap %d, budget %s, timeout %s\n", a.Name, a.Model, a.StepCap(), budget, timeout)
	}
	return ExitOK
}

// sdk is the client of the command's connection, with the API prefix the
// command's credentials call for.
func (c *command) sdk(nc *nats.Conn) (*client.Client, error) {
	return client.New(nc, client.WithAPIPrefix(c.auth.APIPrefix))
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
	cl, err := c.sdk(nc)
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
		return c.exit
	}
	if c.flags.NArg() != 1 {
		return c.usageErr("usage: jetloop abort [--reason TEXT] TURN")
	}
	return control(ctx, c, c.flags.Arg(0), events.Control{Action: events.ActionAbort, Reason: *reason})
}

func reply(ctx context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 3 {
		return c.usageErr("usage: jetloop reply TURN CALL_ID TEXT")
	}
	return control(ctx, c, c.flags.Arg(0), events.Control{Action: events.ActionReply, CallID: c.flags.Arg(1), Answer: c.flags.Arg(2)})
}

func approve(ctx context.Context, c *command, args []string) int {
	note := c.flags.String("note", "", "a note the model sees")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 2 {
		return c.usageErr("usage: jetloop %s [--note TEXT] TURN CALL_ID", c.name)
	}
	ok := c.name == "approve"
	return control(ctx, c, c.flags.Arg(0), events.Control{Action: events.ActionApprove, CallID: c.flags.Arg(1), Approved: &ok, Note: *note})
}
