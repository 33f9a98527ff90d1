package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jetloop/jetloop/internal/proc"
)

// spec describes one command. Its synopses and summary are the one source
// of the command list (jetloop help), of the command's --help and of
// docs/cli.md, which a test regenerates from them.
type spec struct {
	name string
	// synopses are the command's forms, each what follows "jetloop NAME".
	synopses []string
	// summary is one line for the command list; about, when set, more
	// for --help.
	summary, about string
	run            func(context.Context, *command, []string) int
}

// specs are the commands in the order the command list shows them.
var specs []spec

func init() {
	specs = []spec{
		{name: "demo", synopses: []string{"[flags]"}, run: demo,
			summary: "run a sample turn on an embedded server and print its live trace",
			about: "Without --agents, and with no data/AGENTS.md in this directory, the built-in agents\n" +
				"(General, with the built-in tools and a scripted model) are used."},
		{name: "dev", synopses: []string{"[flags]"}, run: dev,
			summary: "run server, orchestrator and tool worker here and stay up",
			about: "Without --agents, and with no data/AGENTS.md in this directory, the built-in agents\n" +
				"(General, with the built-in tools and a scripted model) are used."},
		{name: "submit", synopses: []string{"[flags] TEXT...", "[flags] --file SUBMIT.json"}, run: submit,
			summary: "publish a turn request and print its turn id",
			about: "TEXT is the user's message (several words are joined with spaces). submit waits up to\n" +
				"--start-timeout for the turn to start: a submission the orchestrator rejects (no such\n" +
				"agent, several agents and no --agent, a reused turn id) exits 1 with the reason;\n" +
				"--no-wait returns once the inbox has the submission."},
		{name: "watch", synopses: []string{"[--wait] TURN"}, run: watch,
			summary: "print a turn's live trace until it finishes",
			about: "Exits 0 when the turn completes, 1 when it stops otherwise. A turn that has no\n" +
				"events within a few seconds is reported as unknown (exit 1), unless --wait."},
		{name: "replay", synopses: []string{"[--json | --at STEP] [--file FILE] TURN", "--verify TURN", "--html PAGE TURN"}, run: replay,
			summary: "print a recorded turn through today's machine; --verify re-derives its decisions"},
		{name: "export", synopses: []string{"TURN"}, run: export,
			summary: "print a turn's events as JSON lines"},
		{name: "fork", synopses: []string{"--from-step N [flags] TURN [TEXT...]"}, run: fork,
			summary: "run a new turn on TURN's conversation up to step N"},
		{name: "turns", synopses: []string{"[--session S] [--status S] [--agent A] [--since D] [--limit N] [--json]"}, run: turns,
			summary: "list turns: running, paused on what, finished how"},
		{name: "show", synopses: []string{"[--json] [--file FILE] TURN"}, run: show,
			summary: "one turn on one screen"},
		{name: "abort", synopses: []string{"[--reason TEXT] TURN"}, run: abort,
			summary: "stop a turn"},
		{name: "reply", synopses: []string{"TURN CALL_ID TEXT"}, run: reply,
			summary: "answer a turn's ask_user question"},
		{name: "approve", synopses: []string{"[--note TEXT] TURN CALL_ID"}, run: approve,
			summary: "let a call that waits for approval run"},
		{name: "deny", synopses: []string{"[--note TEXT] TURN CALL_ID"}, run: approve,
			summary: "refuse a call that waits for approval"},
		{name: "dead", synopses: []string{"[--json]", "show SEQ", "retry [--file FIXED.json] SEQ"}, run: dead,
			summary: "list, show and re-send dead letters"},
		{name: "agents", synopses: []string{"check [--strict] PATH"}, run: agentsCmd,
			summary: "validate an AGENTS.md file or directory",
			about: "Exits 1 on an error: what the orchestrator cannot run as written (no model, an unknown key such as\n" +
				"tols:, a value of the wrong type such as steps: ten) as well as what it refuses to load (a missing or\n" +
				"duplicate name). Warnings are for the merely unusual; --strict fails on them too."},
		{name: "bench", synopses: []string{"[--quick] [--deployed] [--json]"}, run: benchCmd,
			summary: "measure the cost of a durable step (see BENCHMARKS.md)"},
		{name: "streams", synopses: []string{"apply [flags]", "check [flags]", "move --event-streams N"}, run: streams,
			summary: "provision the streams, buckets and consumers (as admin), or report how the server differs",
			about: "move (as admin) moves every turn's log to N events streams (1, 2, 4, 8 or 16), from as many as the\n" +
				"server has now; every orchestrator must be stopped first. A move that stopped half-way is finished by\n" +
				"running it again (docs/scaling.md, \"Moving the logs\"). check also says which streams hold the logs."},
		{name: "tenants", synopses: []string{"add [--storage SIZE] [--in-flight N] [--submit-rate R] [--soft-storage PCT] [--tools T,...] [flags] NAME", "remove [--keep-streams] NAME", "list [--json]", "render"}, run: tenantsCmd,
			summary: "add, remove and list the tenants of a multi-tenant deployment (docs/tenants.md)",
			about: "The tenants file (--tenants, default $JETLOOP_TENANTS, else deploy/tenants/tenants.yaml) lists the\n" +
				"tenants; accounts.conf beside it is rendered from it, and each tenant's users' nkey seeds lie in\n" +
				"<dir>/<tenant>/<role>.nk. add makes the users, renders accounts.conf, reloads every server that\n" +
				"answers at --nats (as the system user of <dir>/sys.nk), provisions the tenant's streams as its\n" +
				"admin and prints the credentials. remove deletes the tenant's streams first (as its admin) unless\n" +
				"--keep-streams, then its accounts and seeds. render writes accounts.conf again from the file (after\n" +
				"an edit of its quotas) and reloads. --offline writes the files and asks no server."},
		{name: "ui", synopses: []string{"[--addr HOST:PORT]"}, run: webUI,
			summary: "serve a live web view of turns and dead letters"},
		{name: "top", synopses: []string{"[--once] [flags]"}, run: topCmd,
			summary: "one screen of running turns, rates, tool latency, dead letters"},
		{name: "workers", synopses: []string{"[--json]"}, run: workersCmd,
			summary: "list the tools and hooks served now, the jobs waiting on each, and the live workers",
			about: "Read from the buckets the workers advertise in (JETLOOP_TOOLS, JETLOOP_WORKERS) and the jobs stream.\n" +
				"Each worker lists what its deployment serves and when it last refreshed its entries."},
		{name: "workflow", synopses: []string{"run [--watch] [--id ID] FILE.yaml", "watch|show ID", "abort [--reason TEXT] ID", "approve|deny [--note TEXT] ID"},
			run: workflowCmd, summary: "run a list of tasks as a workflow (the outer loop); follow, inspect and steer it"},
		{name: "workflows", synopses: []string{"[--json]"}, run: workflowsCmd,
			summary: "list workflows, newest first"},
		{name: "completion", synopses: []string{"bash|zsh|fish"}, run: completionCmd,
			summary: "print a shell's completion script: source <(jetloop completion bash)",
			about: "bash: source <(jetloop completion bash), or write it to ~/.local/share/bash-completion/completions/jetloop.\n" +
				"zsh: source <(jetloop completion zsh). fish: jetloop completion fish | source, or write it to\n" +
				"~/.config/fish/completions/jetloop.fish."},
		{name: "version", synopses: []string{""}, run: versionCmd,
			summary: "print the module version, commit and Go version of this build"},
		{name: "help", synopses: []string{"[COMMAND]"}, run: helpCmd,
			summary: "print this list, or a command's usage"},
	}
}

func lookup(name string) (spec, bool) {
	for _, s := range specs {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

// globalFlags defines the flags every command takes on f.
func (c *command) globalFlags(f *flag.FlagSet) {
	f.StringVar(&c.url, "nats", "", "NATS server URL (default $NATS_URL, else --context's, else the tenants file's server with --tenant, else the nats CLI's selected context's, else nats://127.0.0.1:4222)")
	f.StringVar(&c.contextName, "context", "", "a context of the nats CLI to connect with: its server and credentials (default $NATS_CONTEXT, else the one nats context select chose)")
	c.auth.Flags(f)
	f.StringVar(&c.tenant, "tenant", os.Getenv("JETLOOP_TENANT"), "connect as this tenant's user (admin for streams, viewer for the reading commands, client otherwise) from the tenants file, instead of --creds (default $JETLOOP_TENANT)")
	f.StringVar(&c.tenantsFile, "tenants", "", "the tenants file of a multi-tenant deployment (default $JETLOOP_TENANTS, else "+defaultTenantsFile+")")
	f.BoolVar(&c.noColor, "no-color", false, "plain text even on a terminal (as does NO_COLOR)")
}

// writeUsage writes the command list: jetloop help.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, "jetloop: durable agent loops on NATS JetStream\n\nusage: jetloop COMMAND [args] [flags]\n\ncommands:\n")
	for _, s := range specs {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
	}
	fmt.Fprint(w, "\nflags every command takes (before or after its arguments):\n")
	f := flag.NewFlagSet("jetloop", flag.ContinueOnError)
	(&command{}).globalFlags(f)
	printFlags(w, f)
	fmt.Fprint(w, `
exit status: 0 done (a turn completed); 1 a turn stopped otherwise or was rejected,
or a check failed; 2 a usage error; 3 the command could not do its work; 130 SIGINT.

Run jetloop COMMAND --help for its arguments and flags.
`)
}

// CLIDoc writes docs/cli.md: the command list and every command's --help,
// so the reference cannot drift from the commands.
func CLIDoc(w io.Writer) {
	fmt.Fprint(w, "# The jetloop command\n\n"+
		"<!-- Generated from the commands' own help: go test ./internal/cli -run TestCLIDoc -update. Do not edit. -->\n\n```\n")
	writeUsage(w)
	fmt.Fprint(w, "```\n")
	for _, s := range specs {
		if s.name == "help" {
			continue
		}
		fmt.Fprintf(w, "\n## jetloop %s\n\n```\n", s.name)
		Main(context.Background(), []string{s.name, "--help"}, w, io.Discard)
		fmt.Fprint(w, "```\n")
	}
}

// writeHelp writes a command's usage: its forms, what it does and its own
// flags (the common ones are in jetloop help).
func (c *command) writeHelp(w io.Writer) {
	c.writeSynopses(w)
	fmt.Fprintf(w, "\n%s.\n", upperFirst(c.spec.summary))
	if c.spec.about != "" {
		fmt.Fprintf(w, "%s\n", c.spec.about)
	}
	own := flag.NewFlagSet(c.flags.Name(), flag.ContinueOnError)
	n := 0
	c.flags.VisitAll(func(fl *flag.Flag) {
		if c.global[fl.Name] {
			return
		}
		n++
		own.Var(fl.Value, fl.Name, fl.Usage)
		// The default is what the flag held before parsing, not what a
		// flag before --help set it to.
		own.Lookup(fl.Name).DefValue = fl.DefValue
	})
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		printFlags(w, own)
	}
	fmt.Fprint(w, "\nand the flags every command takes, before or after the command (--nats, --context, --creds, --user, --password-file, --tls-ca, --tenant, --tenants, --no-color): see jetloop help.\n")
}

// printFlags is f.PrintDefaults with each flag written --name, as the
// docs and the examples write them (the flag package takes both). Flags
// whose usage starts "internal:" are the command's own plumbing and not
// shown.
func printFlags(w io.Writer, f *flag.FlagSet) {
	shown := flag.NewFlagSet(f.Name(), flag.ContinueOnError)
	f.VisitAll(func(fl *flag.Flag) {
		if !strings.HasPrefix(fl.Usage, "internal:") {
			shown.Var(fl.Value, fl.Name, fl.Usage)
			shown.Lookup(fl.Name).DefValue = fl.DefValue
		}
	})
	proc.PrintFlags(w, shown)
}

// shortUsage follows a usage error: the command's forms and where to read
// more.
func (c *command) shortUsage() {
	c.writeSynopses(c.stderr)
	fmt.Fprintf(c.stderr, "(jetloop %s --help for more)\n", c.name)
}

func (c *command) writeSynopses(w io.Writer) {
	for i, s := range c.spec.synopses {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintln(w, strings.TrimRight(lead+"jetloop "+c.spec.name+" "+s, " "))
	}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parse parses the command's flags, which may stand before, between and
// after its arguments (`jetloop streams apply --user admin`); an argument
// `--` ends the flags. The arguments are then c.flags.Args(). On false the
// command returns c.exit: 0 after --help (printed to stdout), 2 after a
// flag error.
func (c *command) parse(args []string) bool {
	var rest []string
	for {
		err := c.flags.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.writeHelp(c.stdout)
			c.exit = ExitOK
			return false
		}
		if err != nil {
			c.shortUsage() // after the flag package's own message
			c.exit = ExitUsage
			return false
		}
		left := c.flags.Args()
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" && !c.takesValue(args[:used-1]) {
			rest = append(rest, left...)
			break
		}
		if len(left) == 0 {
			break
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
	// Parse again with only the arguments, after "--", so that Args and
	// NArg return them; the flags set above keep their values.
	if err := c.flags.Parse(append([]string{"--"}, rest...)); err != nil {
		c.exit = ExitUsage
		return false
	}
	return true
}

// takesValue reports whether the last of args is a flag that takes the
// next argument as its value (--reason -- is a reason, not the end of the
// flags).
func (c *command) takesValue(args []string) bool {
	if len(args) == 0 {
		return false
	}
	a := args[len(args)-1]
	name := strings.TrimLeft(a, "-")
	if name == a || strings.Contains(name, "=") {
		return false
	}
	fl := c.flags.Lookup(name)
	if fl == nil {
		return false
	}
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

func versionCmd(_ context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 0 {
		return c.usageErr("version takes no arguments")
	}
	fmt.Fprintln(c.stdout, "jetloop "+proc.Version())
	return ExitOK
}

func helpCmd(ctx context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return c.exit
	}
	switch c.flags.NArg() {
	case 0:
		writeUsage(c.stdout)
		return ExitOK
	case 1:
		if _, ok := lookup(c.flags.Arg(0)); ok {
			return Main(ctx, []string{c.flags.Arg(0), "--help"}, c.stdout, c.stderr)
		}
		return c.usageErr("unknown command %q", c.flags.Arg(0))
	}
	return c.usageErr("help takes one command at most")
}
