package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jetloop/jetloop/internal/bench"
	"github.com/jetloop/jetloop/internal/proc"
)

// benchCmd measures the cost of a durable step (issue "Benchmarks"): the
// table by default, one JSON object with --json. With --orchestrator it is
// instead the orchestrator process the benchmark starts and kills.
func benchCmd(ctx context.Context, c *command, args []string) int {
	quick := c.flags.Bool("quick", false, "smaller workloads: the whole run takes under two minutes")
	asJSON := c.flags.Bool("json", false, "print one JSON object instead of the table")
	profiles := c.flags.String("profile", "", "write CPU and allocation profiles of the orchestrator process of each throughput run to this directory (with --deployed also CPU profiles of the three processes)")
	verbose := c.flags.Bool("v", false, "log what the processes do")
	only := c.flags.String("only", "", "run only these phases, comma-separated: floor,overhead,local,replay,throughput,memory,recovery,workflow,deployed,tenants,cluster")
	deployed := c.flags.Bool("deployed", false, "also measure the deployed shape: nats-server, orchestrator and toolworker as processes (see --bin), with the nats.conf and deploy/ of the checkout it runs in, jobs on file and on memory storage, the multi-tenant deployment (deploy/tenants), and a 3-node loopback cluster with every stream and bucket on three replicas")
	eventStreams := c.flags.Int("event-streams", 0, "with --deployed, how many streams the deployed shapes' logs are in (streams apply --event-streams)")
	bin := c.flags.String("bin", "", "with --deployed, the directory of the binaries it runs: nats-server, orchestrator, toolworker and jetloop (default: this program's directory, then $PATH); make bench builds them")
	// The orchestrator process the benchmark starts runs this command too.
	orchestrator := c.flags.String("orchestrator", "", "internal: be the benchmark's orchestrator process on this server URL")
	agentsPath := c.flags.String("agents", "", "internal: the orchestrator process's agents file")
	cpuProfile := c.flags.String("cpuprofile", "", "internal: the orchestrator process's CPU profile file")
	allocProfile := c.flags.String("allocprofile", "", "internal: the orchestrator process's allocation profile file")
	withMetrics := c.flags.Bool("metrics", false, "record metrics in every orchestrator and tool worker, as --metrics-addr does: the cost of metrics")
	if !c.parse(args) {
		return c.exit
	}
	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	log := proc.Logger(c.stderr, level)
	if *orchestrator != "" {
		if err := bench.ServeOrchestrator(*orchestrator, *agentsPath, *cpuProfile, *allocProfile, *withMetrics, log); err != nil {
			return c.fail("%v", err)
		}
		return ExitOK
	}
	self, err := os.Executable()
	if err != nil {
		return c.fail("cannot find this program to start orchestrator processes: %v", err)
	}
	child := []string{self, "bench"}
	if *verbose {
		child = append(child, "-v")
	}
	var childLog io.Writer = io.Discard
	if *verbose {
		childLog = c.stderr
	}
	res, err := bench.Run(ctx, bench.Config{Quick: *quick, Child: child, ChildLog: childLog,
		ProfileDir: *profiles, Progress: c.stderr, Log: log, Only: phases(*only), Metrics: *withMetrics, Deployed: *deployed, Bin: *bin, EventStreams: *eventStreams})
	if err != nil {
		return c.fail("%v", err)
	}
	if *asJSON {
		if err := res.JSON(c.stdout); err != nil {
			return c.fail("%v", err)
		}
		return ExitOK
	}
	res.Table(c.stdout)
	fmt.Fprintln(c.stdout)
	return ExitOK
}

func phases(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}
