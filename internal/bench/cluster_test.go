package bench

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// TestClusterShape runs the 3-node cluster in its smallest form: the
// processes built as make bench builds them, three nats-servers with the
// repository's nats.conf as one cluster, the streams applied with three
// replicas, a few turns one at a time and a few in flight. Every stream and
// bucket has three replicas and a leader that is one of the nodes, and the
// table names them.
func TestClusterShape(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	b := &run{cfg: Config{Progress: testkit.Writer(t), Bin: buildDeployed(t)}, log: discard()}
	sz := sizes{overheadTurns: 2, overheadSteps: 4, steps: 3, clusterTurns: 6, clusterConcurrency: 3}
	if err := b.cluster(context.Background(), sz); err != nil {
		t.Fatal(err)
	}
	c := b.res.Cluster
	if want := []string{"n1", "n2", "n3"}; !slices.Equal(c.Nodes, want) || !slices.Contains(want, c.MetaLeader) {
		t.Errorf("nodes %v, meta leader %q", c.Nodes, c.MetaLeader)
	}
	for _, name := range []string{events.StreamEvents, events.StreamInbox, events.StreamJobs} {
		if !slices.ContainsFunc(c.Placement, func(p Placement) bool { return p.Kind == "stream" && p.Name == name }) {
			t.Errorf("no placement of stream %s: %+v", name, c.Placement)
		}
	}
	for _, p := range c.Placement {
		if p.Replicas != 3 || !slices.Contains(c.Nodes, p.Leader) {
			t.Errorf("%s %s: %d replicas, leader %q", p.Kind, p.Name, p.Replicas, p.Leader)
		}
	}
	for _, proc := range []string{"orchestrator", "toolworker"} {
		if len(c.Connected[proc]) == 0 {
			t.Errorf("the %s is connected to no node: %v", proc, c.Connected)
		}
	}
	if c.StepSamples != 2*3 || c.StepP50Ms <= 0 || c.StepP99Ms < c.StepP50Ms {
		t.Errorf("sequential steps %d (want 6), p50 %.3f, p99 %.3f", c.StepSamples, c.StepP50Ms, c.StepP99Ms)
	}
	if len(c.Throughput) != 1 {
		t.Fatalf("%d throughput runs, want 1", len(c.Throughput))
	}
	if c.Throughput[0].Unfinished != 0 || c.Throughput[0].Steps != 6*3 || c.Throughput[0].StepsPerS <= 0 {
		t.Errorf("throughput %+v, want 18 steps, all finished", c.Throughput)
	}
	if cpu := c.Throughput[0].CPUSPerStep; len(cpu.Nodes) != 3 || cpu.Server <= 0 {
		t.Errorf("CPU per step of the servers %.6f, by node %v, want three", cpu.Server, cpu.Nodes)
	}
	b.res.Phases = []string{"cluster"}
	var table strings.Builder
	b.res.Table(&table)
	for _, want := range []string{"3-node cluster", "stream " + events.StreamEvents, "stream " + events.StreamInbox, "throughput 6×3 at 3"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}
