// Command toolworker serves tools to jetloop turns: the built-in tools of
// docs/protocol.md, with file tools confined to --root, and the tools of
// the MCP servers named by --mcp. Run as many as you like; all workers of a
// tool share its durable consumer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/proc"
	"github.com/jetloop/jetloop/internal/tenants"

	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

func main() {
	os.Exit(run())
}

// mcpFlags collects --mcp NAME=COMMAND, which may repeat.
type mcpFlags []string

func (m *mcpFlags) String() string     { return strings.Join(*m, ",") }
func (m *mcpFlags) Set(v string) error { *m = append(*m, v); return nil }

func run() int {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL, else "+bus.DefaultURL+")")
	root := flag.String("root", ".", "directory the file tools are confined to")
	onlyList := flag.String("tools", "", "comma-separated tools to serve, built-in or MCP (default all)")
	concurrency := flag.Int("concurrency", worker.DefaultConcurrency, "calls of each tool run at once")
	ackWait := flag.Duration("ack-wait", worker.DefaultAckWait, "how long a job stays with this worker between heartbeats")
	maxDeliver := flag.Int("max-deliver", worker.DefaultMaxDeliver, "deliveries of a job before it is answered with an error")
	allowShell := flag.Bool("allow-shell", false, "serve the shell tool")
	protectList := flag.String("protect", strings.Join(tools.DefaultProtect, ","), "comma-separated directory names the file tools refuse at any depth under --root (\"\" protects nothing)")
	name := flag.String("name", "", "worker name in results (default host-pid)")
	tenantsPath := flag.String("tenants", os.Getenv("JETLOOP_TENANTS"), "serve every tenant of this tenants file (jetloop tenants) as a shared pool: a worker per tenant, through its own account as its toolworker user, with its own --concurrency and its file tools confined to --root/<tenant> (default $JETLOOP_TENANTS; docs/tenants.md)")
	auth := bus.Auth{Inbox: bus.InboxToolworker}
	auth.Flags(flag.CommandLine)
	level := flag.String("log-level", "info", "debug, info, warn or error")
	metricsAddr := flag.String("metrics-addr", "", proc.MetricsAddrUsage)
	pprofAddr := flag.String("pprof-addr", "", proc.PprofAddrUsage)
	var mcp mcpFlags
	flag.Var(&mcp, "mcp", "NAME=COMMAND: serve the tools of the MCP server COMMAND starts, as NAME__tool (repeatable)")
	version := flag.Bool("version", false, "print the version and exit")
	proc.Usage(flag.CommandLine, "toolworker [flags]")
	flag.Parse()
	if *version {
		fmt.Println("toolworker " + proc.Version())
		return 0
	}

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "toolworker: --log-level: %v\n", err)
		return 2
	}
	log := proc.Logger(os.Stderr, lvl)
	// A pool's tenants share one process, one user and one file system: the
	// shell is not confined to a tenant's --root/<tenant>, so one tenant's
	// command would read another's files and the tenants' keys.
	if *tenantsPath != "" && *allowShell {
		log.Error("bad configuration: --allow-shell cannot serve a shared pool (--tenants or $JETLOOP_TENANTS): a tenant's shell would read the other tenants' files and keys; serve shell from a deployment of the tenant's own (toolworker --creds <dir>/<tenant>/toolworker.nk --allow-shell)")
		return 2
	}
	var servers []tools.MCPServer
	for _, v := range mcp {
		s, err := tools.ParseMCPServer(v)
		if err != nil {
			log.Error("bad --mcp", "err", err)
			return 2
		}
		servers = append(servers, s)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startMetrics := proc.StartMetrics
	if *tenantsPath != "" {
		startMetrics = proc.StartTenantsMetrics
	}
	m, stopMetrics, err := startMetrics(*metricsAddr, log)
	if err != nil {
		log.Error("cannot serve metrics", "err", err)
		return 1
	}
	defer stopMetrics()
	stopPprof, err := proc.StartPprof(*pprofAddr, log)
	if err != nil {
		log.Error("cannot serve profiles", "err", err)
		return 1
	}
	defer stopPprof()
	tracer, stopTracing, err := proc.StartTracing(ctx, "jetloop-toolworker", log)
	if err != nil {
		log.Error("bad tracing configuration", "err", err)
		return 2
	}
	defer stopTracing()

	protect, err := tools.ParseProtect(*protectList)
	if err != nil {
		log.Error("bad --protect", "err", err)
		return 2
	}
	if *tenantsPath != "" {
		// The pool makes each tenant's root/<tenant> as it serves it: the
		// root itself is made here, as a place of its own.
		if err := os.MkdirAll(*root, 0o755); err != nil {
			log.Error("cannot make the root", "err", err)
			return 2
		}
	}
	// Before connecting: a worker that could rewrite the server's own
	// streams must not serve a single call.
	if err := tools.CheckRoot(*root, protect); err != nil {
		log.Error("refusing to serve this root", "err", err)
		return 2
	}
	var shared []tools.Tool // the MCP servers' tools, one bridge for every tenant
	if len(servers) > 0 {
		bridge, err := tools.NewMCP(ctx, log, servers)
		if err != nil {
			if ctx.Err() != nil {
				return 0 // stopped while starting them
			}
			log.Error("cannot start the MCP servers", "err", err)
			return 1
		}
		// Deferred, so the servers outlive the worker's drain.
		defer bridge.Close()
		shared = bridge.Tools()
	}
	// toolsIn are the tools served with the file tools confined to root.
	toolsIn := func(root string) ([]tools.Tool, error) {
		served, err := tools.Builtins(root, *allowShell, tools.WithProtect(protect...))
		if err != nil {
			return nil, fmt.Errorf("bad root: %w", err)
		}
		return only(append(served, shared...), *onlyList)
	}
	if _, err := toolsIn(*root); err != nil {
		log.Error("bad configuration", "err", err)
		return 2
	}

	// Only the default address may be waited for: an orchestrator started
	// without --nats brings an embedded server up there. A URL the user
	// named that does not answer is a mistake to report at once.
	wait := time.Duration(0)
	if *url == "" {
		*url = bus.DefaultURL
		wait = 30 * time.Second
	}
	// Zero is "the default" to worker.New, but a mistake on a command line.
	if *concurrency < 1 || *maxDeliver < 1 || *ackWait <= 0 {
		log.Error("bad configuration: --concurrency, --max-deliver and --ack-wait must be positive")
		return 2
	}
	serve := func(ctx context.Context, log *slog.Logger, auth bus.Auth, m *metrics.Metrics, served []tools.Tool) (code int) {
		copts, err := auth.Options()
		if err != nil {
			log.Error("bad credentials", "err", err)
			return 2
		}
		nc, err := connect(ctx, log, *url, wait, copts)
		if err != nil {
			if ctx.Err() != nil {
				log.Info("stopped while waiting for a NATS server", "url", bus.RedactURL(*url))
				return 0
			}
			log.Error("cannot connect", "url", bus.RedactURL(*url), "err", err)
			return 1
		}
		defer nc.Close()
		if *tenantsPath != "" {
			// A tenant not provisioned yet is waited for quietly
			// (its supervisor says once what to run), not served with errors.
			js, err := bus.JetStreamFor(ctx, nc, auth.APIPrefix)
			if err == nil {
				err = tenants.CheckProvisioned(ctx, js)
			}
			if errors.Is(err, tenants.ErrNotProvisioned) {
				return exitNotProvisioned
			}
		}
		var wm worker.Metrics
		if m != nil {
			wm = m
		}
		wopts := []worker.Option{worker.WithConcurrency(*concurrency), worker.WithAckWait(*ackWait), worker.WithMaxDeliver(*maxDeliver),
			worker.WithLogger(log), worker.WithAPIPrefix(auth.APIPrefix), worker.WithMetrics(wm), worker.WithTracerProvider(tracer.Provider())}
		if *name != "" {
			wopts = append(wopts, worker.WithName(*name))
		}
		w, err := worker.New(nc, wopts...)
		if err == nil {
			// Not ready until the worker serves: its consumers bound and its
			// tools advertised, the connection up.
			m.AddCheck("toolworker "+w.Name(), w.Serving)
			err = tools.Register(w, served...)
		}
		if err != nil {
			log.Error("bad configuration", "err", err)
			return 2
		}
		if err := w.Run(ctx); err != nil {
			log.Error("toolworker stopped", "err", err)
			return 1
		}
		return 0
	}
	var code int
	if *tenantsPath != "" {
		code = serveTenants(ctx, log, *tenantsPath, *root, auth, m, toolsIn, serve)
	} else {
		served, _ := toolsIn(*root) // checked above
		code = serve(ctx, log, auth, m, served)
	}
	if code == 0 {
		log.Info("toolworker stopped gracefully")
	}
	return code
}

// connect connects to url, waiting up to wait for a server to answer
// there, and says at once that it waits.
func connect(ctx context.Context, log *slog.Logger, url string, wait time.Duration, opts []nats.Option) (*nats.Conn, error) {
	deadline := time.Now().Add(wait)
	for said := false; ; said = true {
		nc, err := bus.Connect(url, "jetloop toolworker", func(err error) { log.Warn("nats", "err", err) }, opts...)
		if err == nil || !errors.Is(err, nats.ErrNoServers) || time.Now().After(deadline) {
			return nc, err
		}
		if !said {
			log.Info("no NATS server answers yet; waiting for one (an orchestrator started without --nats starts it)",
				"url", bus.RedactURL(url), "for", wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// only keeps the tools named in list (comma-separated; all when empty),
// each of which must be there.
func only(served []tools.Tool, list string) ([]tools.Tool, error) {
	if list == "" {
		return served, nil
	}
	var want []string
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			want = append(want, name)
		}
	}
	var kept []tools.Tool
	for _, t := range served {
		if slices.Contains(want, t.Spec().Name) {
			kept = append(kept, t)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(kept, func(t tools.Tool) bool { return t.Spec().Name == w }) {
			return nil, fmt.Errorf("--tools names a tool this worker does not have: %s", w)
		}
	}
	return kept, nil
}
