// Command orchestrator advances turns: it consumes the inbox, appends events
// to the turns' logs and publishes the jobs they wait on. Without --nats and
// NATS_URL, and with no server at the default address, it starts an embedded
// JetStream server there.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/embedded"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/proc"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/providers"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	os.Exit(run())
}

func run() int {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL, else "+bus.DefaultURL+")")
	agentsPath := flag.String("agents", "data/AGENTS.md", "AGENTS.md file or directory")
	auth := bus.Auth{Inbox: bus.InboxOrchestrator}
	auth.Flags(flag.CommandLine)
	shards := flag.Int("shards", orchestrator.DefaultShards, "turns advanced in parallel (inputs of different turns handled at once)")
	runners := flag.Int("model-runners", 32, "model calls run at once")
	ackWait := flag.Duration("ack-wait", 30*time.Second, "how long an input stays with this process before another may take it")
	data := flag.String("data", embedded.DefaultDataDir, "store of the embedded server, when one is started")
	sync := flag.String("sync-interval", embedded.SyncAlways, embedded.SyncUsage+"; only for the embedded server, when one is started")
	allowScripts := flag.Bool("allow-scripts", false, "accept model script (inline or script:PATH) in submissions")
	name := flag.String("name", "", "this orchestrator's name among the live ones (default host-pid); a restarted process that keeps its name takes its partitions back at once")
	level := flag.String("log-level", "info", "debug, info, warn or error")
	metricsAddr := flag.String("metrics-addr", "", proc.MetricsAddrUsage)
	pprofAddr := flag.String("pprof-addr", "", proc.PprofAddrUsage)
	tenantsPath := flag.String("tenants", os.Getenv("JETLOOP_TENANTS"), "serve every tenant of this tenants file (jetloop tenants), each through its own account as its orchestrator user, with its quotas (default $JETLOOP_TENANTS; docs/tenants.md)")
	clock := flag.Duration("default-timeout", agents.DefaultTimeout, "the clock of a turn whose agent sets no timeout")
	workflowClock := flag.Duration("default-workflow-timeout", workflow.DefaultTimeout, "the clock of a workflow whose submission sets no timeout")
	version := flag.Bool("version", false, "print the version and exit")
	proc.Usage(flag.CommandLine, "orchestrator [flags]")
	flag.Parse()
	if *version {
		fmt.Println("orchestrator " + proc.Version())
		return 0
	}

	if _, _, err := embedded.ParseSync(*sync); err != nil {
		fmt.Fprintf(os.Stderr, "orchestrator: --sync-interval: %v\n", err)
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "orchestrator: --log-level: %v\n", err)
		return 2
	}
	log := proc.Logger(os.Stderr, lvl)
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
	tracer, stopTracing, err := proc.StartTracing(ctx, "jetloop-orchestrator", log)
	if err != nil {
		log.Error("bad tracing configuration", "err", err)
		return 2
	}
	defer stopTracing()

	set, diags, err := agents.Load(*agentsPath)
	for _, d := range diags {
		log.Warn(d.String())
	}
	if err != nil {
		log.Error("cannot load the agents", "err", err)
		return 1
	}

	if *url == "" {
		*url = bus.DefaultURL
		// A tenants' server has their accounts: an embedded one would not.
		if !bus.Answers(*url) && *tenantsPath == "" {
			srv, err := embedded.Start(*url, *data, embedded.Sync(*sync))
			if err != nil {
				log.Error("no server answers and none could be started here", "url", *url, "err", err)
				return 1
			}
			defer func() {
				srv.Shutdown()
				srv.WaitForShutdown()
			}()
			log.Info("no NATS server answered: started an embedded JetStream server", "url", srv.ClientURL(), "data", *data)
		}
	}
	provs, err := providers.Options(os.Getenv, set, log)
	if err != nil {
		log.Error("bad model provider configuration", "err", err)
		return 2
	}
	if *name != "" {
		provs = append(provs, orchestrator.WithName(*name))
	}
	oopts := append(provs, orchestrator.WithShards(*shards), orchestrator.WithModelRunners(*runners), orchestrator.WithAckWait(*ackWait),
		orchestrator.WithAllowScripts(*allowScripts), orchestrator.WithTracer(tracer),
		orchestrator.WithClocks(*clock, *workflowClock))
	if *tenantsPath != "" {
		if _, err := tenants.Load(*tenantsPath); err != nil {
			log.Error("bad tenants file", "err", err)
			return 2
		}
		if err := serveTenants(ctx, *tenantsPath, *url, auth, m, log.With("url", bus.RedactURL(*url)), set, *shards, oopts); err != nil {
			log.Error("orchestrator stopped", "err", err)
			return 1
		}
		log.Info("orchestrator stopped gracefully")
		return 0
	}
	opts, err := auth.Options()
	if err != nil {
		log.Error("bad credentials", "err", err)
		return 2
	}
	nc, err := bus.Connect(*url, "jetloop orchestrator", func(err error) { log.Warn("nats", "err", err) }, opts...)
	if err != nil {
		log.Error("cannot connect", "err", err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("jetstream", "err", err)
		return 1
	}
	o, err := orchestrator.New(nc, js, log.With("url", bus.RedactURL(*url)), set, append(oopts, orchestrator.WithMetrics(m))...)
	if err != nil {
		log.Error("bad configuration", "err", err)
		return 2
	}
	if err := o.Run(ctx); err != nil {
		log.Error("orchestrator stopped", "err", err)
		return 1
	}
	log.Info("orchestrator stopped gracefully")
	return 0
}
