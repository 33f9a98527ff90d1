package tenants

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
)

// The accounts' exports and imports are written here once: Render writes
// them into a multi-tenant deployment's accounts.conf, and a test holds the
// single-tenant deploy/accounts.conf to the same lists (SingleExports and
// the *Imports functions with account JETLOOP), so that the two layouts
// cannot drift apart.

// BuiltinTools are the tools of cmd/toolworker (tools.Builtins), which
// every tenant's worker account serves.
var BuiltinTools = []string{"read_file", "list_dir", "grep", "write_file", "echo", "sleep", "shell"}

// Audience is who an export is offered to.
type Audience int

// The audiences of the streams' account's exports.
const (
	ToClient  Audience = iota // the client's account only
	ToReaders                 // the client's and the viewer's
	ToWorkers                 // every worker deployment's
	ToAll                     // all of them
)

// Export is one subject the streams' account offers.
type Export struct {
	// Stream is a stream export (core messages, no reply); otherwise a
	// service (request/reply).
	Stream  bool
	Subject string
	// Many: a service answered by many messages (a pull).
	Many bool
	To   Audience
	// Only, when set, is the one account it is offered to, whatever To
	// says: a deployment's answers (AnswerExports).
	Only string
}

// Import is one subject an account takes from the streams' account.
type Import struct {
	Stream  bool
	Subject string
	// Prefixed: the importing account reaches it under APIPrefix (a
	// JetStream API call or a KV put), not under its own name.
	Prefixed bool
}

// To is the subject the importing account uses, "" when it is Subject.
func (i Import) To() string {
	switch {
	case !i.Prefixed:
		return ""
	case strings.HasPrefix(i.Subject, "$JS.API."):
		return bus.APIPrefix + strings.TrimPrefix(i.Subject, "$JS.API")
	default:
		return bus.APIPrefix + "." + i.Subject
	}
}

// EventsStreams are every name a stream of the logs may have, whatever the
// layout (events.Layout): JETLOOP_EVENTS and JETLOOP_EVENTS_0 to _15. A
// subject cannot wildcard part of a token, so every grant on the logs names
// each of them: a deployment then serves any layout that
// jetloop streams apply --event-streams makes, without new accounts or
// permissions.
func EventsStreams() []string {
	return append([]string{events.StreamEvents}, events.Layout{Streams: events.Partitions}.Names()...)
}

// ReadEvents are the reads of the logs' stream named stream, all by get: a
// direct get (batched: many answers), one by subject, and a leader get.
func ReadEvents(stream string) []string {
	return []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream}
}

// OrchestratorEvents are the orchestrator's calls on the logs' streams
// (deploy/permissions.conf): the reads, and the purge with which the log's
// only writer replaces a rejected-only turn's log.
func OrchestratorEvents() []string {
	var out []string
	for _, s := range EventsStreams() {
		out = append(out, ReadEvents(s)...)
		out = append(out, "$JS.API.STREAM.PURGE."+s)
	}
	return out
}

// EventsExports are the reads of every stream the logs may be in, offered
// to the readers.
func EventsExports() []Export {
	var es []Export
	for _, s := range EventsStreams() {
		r := ReadEvents(s)
		es = append(es, Export{Subject: r[0], Many: true, To: ToReaders},
			Export{Subject: r[1], To: ToReaders}, Export{Subject: r[2], To: ToReaders})
	}
	return es
}

// EventsImports are the readers' imports of EventsExports.
func EventsImports() []Import {
	var is []Import
	for _, s := range EventsStreams() {
		for _, r := range ReadEvents(s) {
			is = append(is, Import{Subject: r, Prefixed: true})
		}
	}
	return is
}

// Exports are what the streams' account offers, in the order written.
func Exports() []Export {
	svc := func(s string, to Audience) Export { return Export{Subject: s, To: to} }
	many := func(s string, to Audience) Export { return Export{Subject: s, Many: true, To: to} }
	return slices.Concat([]Export{
		svc("jetloop.inbox.submit", ToClient),
		svc("jetloop.inbox.workflow", ToClient),
		svc("jetloop.inbox.control.*", ToClient),
		{Stream: true, Subject: "jetloop.stream.>", To: ToReaders},
		{Stream: true, Subject: "jetloop.cancel.*", To: ToWorkers},
		// What is published on the logs and the dead letters, core: a
		// reader that follows them subscribes, then reads what is stored
		// by get (bus.Tail).
		{Stream: true, Subject: "jetloop.events.>", To: ToReaders},
		{Stream: true, Subject: "jetloop.dead.>", To: ToReaders},

		svc("$JS.API.INFO", ToAll),
		svc("$JS.API.STREAM.INFO.*", ToAll),
	},
		// Reads by get only: no role but the trusted ones creates a
		// consumer, whose deliveries could be aimed at any subject of this
		// account. A batched direct get answers with many messages.
		EventsExports(),
		[]Export{
			svc("$JS.API.STREAM.MSG.GET.JETLOOP_DEAD", ToReaders),
			svc("$JS.API.DIRECT.GET.KV_JETLOOP_CHECKPOINTS.>", ToReaders),

			svc("jetloop.dead.job", ToWorkers),
			// A tool's or hook's consumer is made by an orchestrator; a
			// worker binds it (INFO), pulls and acks.
			svc("$JS.API.CONSUMER.INFO.JETLOOP_JOBS.*", ToWorkers),
			many("$JS.API.CONSUMER.MSG.NEXT.JETLOOP_JOBS.*", ToWorkers),
			svc("$JS.ACK.JETLOOP_JOBS.>", ToWorkers),
			svc("$KV.JETLOOP_TOOLS.*", ToWorkers),
			svc("$KV.JETLOOP_WORKERS.>", ToWorkers),
			svc("$JS.API.DIRECT.GET.KV_JETLOOP_TOOLS.>", ToWorkers),
			svc("$JS.API.DIRECT.GET.KV_JETLOOP_WORKERS.>", ToWorkers),
			svc("$KV.JETLOOP_TOOLS.hook.*", ToWorkers),
		})
}

// AnswerExports are the subjects on which the deployment of account answers
// its tools and hooks, offered to it alone: a result is taken only on its
// tool's subjects (jetloop.direct.result@<tool>.<turn_id>, handed to the
// turn's owner, and jetloop.inbox.result@<tool>.<turn_id>), a hook's answer
// on its hook's, so no deployment can answer for another's tools or hooks.
func AnswerExports(account string, tools, hooks []string) []Export {
	var es []Export
	for _, t := range tools {
		es = append(es, Export{Subject: "jetloop.direct.result@" + t + ".*", Only: account},
			Export{Subject: "jetloop.inbox.result@" + t + ".*", Only: account})
	}
	for _, h := range hooks {
		es = append(es, Export{Subject: "jetloop.inbox.hook@" + h + ".*", Only: account})
	}
	return es
}

// readerImports are the reads the client and the viewer share.
func readerImports() []Import {
	api := func(s string) Import { return Import{Subject: "$JS.API." + s, Prefixed: true} }
	return slices.Concat([]Import{
		{Stream: true, Subject: "jetloop.stream.>"},
		{Stream: true, Subject: "jetloop.events.>"},
		{Stream: true, Subject: "jetloop.dead.>"},
		api("INFO"),
		api("STREAM.INFO.*"),
	}, EventsImports(), []Import{
		api("STREAM.MSG.GET.JETLOOP_DEAD"),
		api("DIRECT.GET.KV_JETLOOP_CHECKPOINTS.>"),
	})
}

// ClientImports are the client's: submissions, steering and the reads.
func ClientImports() []Import {
	return append([]Import{
		{Subject: "jetloop.inbox.submit"},
		{Subject: "jetloop.inbox.workflow"},
		{Subject: "jetloop.inbox.control.*"},
	}, readerImports()...)
}

// ViewerImports are the viewer's: the client's reads, no publishes.
func ViewerImports() []Import { return readerImports() }

// WorkerImports are a worker deployment's that serves tools and hooks:
// dead jobs and cancels, and for each of its tools and hooks its consumer
// (bound, not created), pulls, acks, registry keys and answers
// (AnswerExports), nothing of
// another's.
func WorkerImports(tools, hooks []string) []Import {
	api := func(s string, a ...any) Import {
		return Import{Subject: "$JS.API." + fmt.Sprintf(s, a...), Prefixed: true}
	}
	is := []Import{
		{Subject: "jetloop.dead.job"},
		{Stream: true, Subject: "jetloop.cancel.*"},
		api("INFO"),
		api("STREAM.INFO.JETLOOP_JOBS"),
		api("STREAM.INFO.KV_JETLOOP_TOOLS"),
		api("STREAM.INFO.KV_JETLOOP_WORKERS"),
	}
	served := func(consumer, key string, answers ...string) {
		is = append(is,
			api("CONSUMER.INFO.JETLOOP_JOBS.%s", consumer),
			api("CONSUMER.MSG.NEXT.JETLOOP_JOBS.%s", consumer),
			Import{Subject: "$JS.ACK.JETLOOP_JOBS." + consumer + ".>"},
			Import{Subject: "$KV.JETLOOP_TOOLS." + key, Prefixed: true},
			Import{Subject: "$KV.JETLOOP_WORKERS." + key + ".*", Prefixed: true},
			api("DIRECT.GET.KV_JETLOOP_TOOLS.$KV.JETLOOP_TOOLS.%s", key),
			api("DIRECT.GET.KV_JETLOOP_WORKERS.$KV.JETLOOP_WORKERS.%s.*", key),
		)
		for _, a := range answers {
			is = append(is, Import{Subject: a})
		}
	}
	for _, t := range tools {
		served("tool_"+t, t, "jetloop.direct.result@"+t+".*", "jetloop.inbox.result@"+t+".*")
	}
	for _, h := range hooks {
		served("hook_"+h, "hook."+h, "jetloop.inbox.hook@"+h+".*")
	}
	return is
}

// Accounts names the accounts an export may be offered to.
type Accounts struct {
	Client, Viewer string
	Workers        []string
}

// names are the accounts of audience a.
func (as Accounts) names(a Audience) []string {
	switch a {
	case ToClient:
		return []string{as.Client}
	case ToReaders:
		return []string{as.Client, as.Viewer}
	case ToWorkers:
		return as.Workers
	}
	return append([]string{as.Client, as.Viewer}, as.Workers...)
}

// SingleAccounts are the single-tenant layout's (deploy/accounts.conf).
var SingleAccounts = Accounts{Client: "CLIENT", Viewer: "VIEWER", Workers: []string{"WORKER_default", "WORKER_examples"}}

// TenantAccounts are tenant t's.
func TenantAccounts(t string) Accounts {
	return Accounts{Client: Account("CLIENT", t), Viewer: Account("VIEWER", t), Workers: []string{Account("WORKER", t)}}
}

// ExampleTools and ExampleHooks are what deploy/accounts.conf's second
// worker deployment (WORKER_examples) serves.
var (
	ExampleTools = []string{"invoice_total", "word_count"}
	ExampleHooks = []string{"audit", "cost-guard"}
)

// Line writes e as an entry of an exports list offered to as.
func (e Export) Line(as Accounts) string {
	kind, extra := "service", ""
	if e.Stream {
		kind = "stream"
	}
	if e.Many {
		extra = ", response_type: stream"
	}
	names := as.names(e.To)
	if e.Only != "" {
		names = []string{e.Only}
	}
	return fmt.Sprintf(`{ %s: %q%s, accounts: [%s] }`, kind, e.Subject, extra, strings.Join(names, ", "))
}

// Line writes i as an entry of an imports list from account from.
func (i Import) Line(from string) string {
	kind := "service"
	if i.Stream {
		kind = "stream"
	}
	s := fmt.Sprintf(`{ %s: { account: %s, subject: %q }`, kind, from, i.Subject)
	if to := i.To(); to != "" {
		s += fmt.Sprintf(`, to: %q`, to)
	}
	return s + " }"
}

// Render writes the accounts.conf of the tenants in f: the system account,
// and per tenant its streams' account with its jetstream limits and its
// exports offered to its own accounts only, and its client's, viewer's and
// tool workers' accounts importing from it. It includes
// ../permissions.conf, whose variables are the users' permissions.
func Render(f *File) []byte {
	var b strings.Builder
	b.WriteString(`# Generated from tenants.yaml by jetloop tenants add|remove: do not edit.
# Included by nats.conf in this directory. Each tenant is an account set of
# its own (docs/tenants.md): JETLOOP_<t> holds its streams and its trusted
# users (admin, the orchestrators) and offers its subjects only to
# CLIENT_<t>, VIEWER_<t> and WORKER_<t>, which import them as
# deploy/accounts.conf's CLIENT, VIEWER and WORKER_default import them from
# JETLOOP (docs/accounts.md).

# The users' permissions. An included file is parsed on its own, with the
# variables it defines or includes only: this one includes them itself, so
# the tenants' directory sits beside permissions.conf (deploy/).
include "../permissions.conf"

accounts {
`)
	b.WriteString("  # The system account: jetloop tenants reloads the server as its user.\n")
	if f.System != "" {
		fmt.Fprintf(&b, "  SYS {\n    users: [{ nkey: %s }]\n  }\n", f.System)
	} else {
		b.WriteString("  SYS {\n    users: []\n  }\n")
	}
	for _, t := range f.Tenants {
		as := TenantAccounts(t.Name)
		jl := Account("JETLOOP", t.Name)
		fmt.Fprintf(&b, "\n  # Tenant %s.\n  %s {\n", t.Name, jl)
		var limits []string
		if t.Storage > 0 {
			limits = append(limits, fmt.Sprintf("max_file: %d", int64(t.Storage)))
		}
		if t.Memory > 0 {
			limits = append(limits, fmt.Sprintf("max_mem: %d", int64(t.Memory)))
		}
		if len(limits) == 0 {
			b.WriteString("    jetstream: enabled\n")
		} else {
			fmt.Fprintf(&b, "    jetstream { %s }\n", strings.Join(limits, ", "))
		}
		b.WriteString("    exports: [\n")
		for _, e := range append(Exports(), AnswerExports(as.Workers[0], t.AllTools(), nil)...) {
			fmt.Fprintf(&b, "      %s\n", e.Line(as))
		}
		b.WriteString("    ]\n    users: [\n")
		fmt.Fprintf(&b, "      { nkey: %s }\n", t.Users[Admin])
		fmt.Fprintf(&b, "      { nkey: %s, permissions: $ORCHESTRATOR_PERMISSIONS }\n", t.Users[Orchestrator])
		b.WriteString("    ]\n  }\n")
		// Each role's account is bounded as in the single-tenant configs
		// (../permissions.conf's *_LIMITS).
		account := func(name string, imports []Import, user, role string) {
			fmt.Fprintf(&b, "  %s {\n    imports: [\n", name)
			for _, i := range imports {
				fmt.Fprintf(&b, "      %s\n", i.Line(jl))
			}
			fmt.Fprintf(&b, "    ]\n    limits: $%s_LIMITS\n    users: [{ nkey: %s, permissions: $%s_PERMISSIONS }]\n  }\n", role, user, role)
		}
		account(as.Client, ClientImports(), t.Users[Client], "CLIENT")
		account(as.Viewer, ViewerImports(), t.Users[Viewer], "VIEWER")
		account(as.Workers[0], WorkerImports(t.AllTools(), nil), t.Users[Toolworker], "WORKER")
	}
	b.WriteString("}\n")
	return []byte(b.String())
}

// AllTools are the tools t's worker account serves: the built-in ones and
// those its entry adds.
func (t *Tenant) AllTools() []string {
	ts := slices.Clone(BuiltinTools)
	for _, x := range t.Tools {
		if !slices.Contains(ts, x) {
			ts = append(ts, x)
		}
	}
	return ts
}
