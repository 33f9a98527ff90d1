package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is the deployed shape on a 3-node cluster on loopback: three
// nats-server processes with the repository's nats.conf (sync always, a
// store each), every stream and bucket with three replicas, one
// orchestrator and one tool worker process given all three URLs, driven by
// this process. On one machine the three replicas share its disk and CPUs.
type Cluster struct {
	// Nodes are the servers' names; MetaLeader is the one that was the
	// JetStream meta leader when the streams were applied.
	Nodes      []string `json:"nodes"`
	MetaLeader string   `json:"meta_leader"`
	// Placement is each stream's and bucket's RAFT leader and its
	// consumers' when the streams were applied; LeadersMoved counts those
	// that had another leader once the runs were done.
	Placement    []Placement `json:"placement"`
	LeadersMoved int         `json:"leaders_moved"`
	// Connected is the node each process's connections were on.
	Connected map[string][]string `json:"connected"`
	// StepP50Ms and StepP99Ms are a tool step's time with one turn at a
	// time, as in Deployed.
	StepP50Ms   float64              `json:"step_p50_ms"`
	StepP99Ms   float64              `json:"step_p99_ms"`
	StepSamples int                  `json:"step_samples"`
	Throughput  []DeployedThroughput `json:"throughput"`
}

// Placement is where a stream's or bucket's RAFT groups have their leaders.
type Placement struct {
	// Name is the stream's name, or the bucket's (Kind "bucket", stream
	// KV_Name) or object store's (Kind "object store", stream OBJ_Name).
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Replicas int    `json:"replicas"`
	// Leader is the node every append to the stream goes through.
	Leader string `json:"leader"`
	// Consumers are the stream's consumers' leaders: node → count.
	Consumers map[string]int `json:"consumer_leaders,omitempty"`
}

// clusterNodes is the size of the cluster.
const clusterNodes = 3

// cluster measures the deployed shape on a 3-node cluster.
func (b *run) cluster(ctx context.Context, sz sizes) error {
	bins, repo, err := b.deployment()
	if err != nil {
		return err
	}
	sh, err := b.startCluster(ctx, bins, repo)
	if err != nil {
		return err
	}
	defer sh.stop()
	c := &Cluster{}
	b.res.Cluster = c
	if c.Nodes, c.MetaLeader, err = sh.meta(ctx); err != nil {
		return sh.explain(err)
	}
	if c.Placement, err = sh.placement(ctx); err != nil {
		return sh.explain(fmt.Errorf("placement: %w", err))
	}
	for _, p := range c.Placement {
		fmt.Fprintf(b.cfg.Progress, "bench:     %s %s: leader %s\n", p.Kind, p.Name, p.Leader)
	}
	var d Deployed
	if err := sh.sequential(ctx, sz, &d); err != nil {
		return sh.explain(fmt.Errorf("sequential: %w", err))
	}
	c.StepP50Ms, c.StepP99Ms, c.StepSamples = d.StepP50Ms, d.StepP99Ms, d.StepSamples
	fmt.Fprintf(b.cfg.Progress, "bench:     sequential step p50 %.3f ms\n", c.StepP50Ms)
	csz := sz
	csz.throughputTurns = sz.clusterTurns
	t, err := sh.throughput(ctx, csz, sz.clusterConcurrency)
	if err != nil {
		return sh.explain(fmt.Errorf("throughput at %d: %w", sz.clusterConcurrency, err))
	}
	c.Throughput = append(c.Throughput, t)
	fmt.Fprintf(b.cfg.Progress, "bench:     %d×%d at %d: %.0f steps/s\n", t.Turns, sz.steps, t.Concurrency, t.StepsPerS)
	if c.Connected, err = sh.connected(ctx); err != nil {
		return err
	}
	after, err := sh.placement(ctx)
	if err != nil {
		return sh.explain(fmt.Errorf("placement after the runs: %w", err))
	}
	for _, p := range after {
		if i := slices.IndexFunc(c.Placement, func(q Placement) bool { return q.Name == p.Name && q.Kind == p.Kind }); i < 0 || c.Placement[i].Leader != p.Leader {
			c.LeadersMoved++
		}
	}
	return nil
}

// clusterShape is the deployed shape on a cluster: the shape's server is
// its first node, its peers the others; url lists all three.
type clusterShape struct {
	*shape
	// names are the nodes' server names, monitors their monitoring
	// endpoints.
	names, monitors []string
}

// startCluster starts three nats-server processes with the repository's
// nats.conf as one cluster, each with a store and a name of its own, routes
// to the others and a free port for them; provisions the streams with three
// replicas once the cluster has a meta leader; then starts the orchestrator
// and the tool worker on the three URLs.
func (b *run) startCluster(ctx context.Context, bins programs, repo string) (_ *clusterShape, err error) {
	dir, err := os.MkdirTemp("", "jetloop-cluster-")
	if err != nil {
		return nil, err
	}
	sh := &clusterShape{shape: &shape{b: b, dir: dir, repo: repo, logs: map[string]string{}, pprof: map[string]string{},
		sync: "always", storage: "file", kind: "cluster"}}
	defer func() {
		if err != nil {
			err = sh.explain(err)
			sh.stop()
		}
	}()
	routePorts, err := freePorts(clusterNodes)
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var urls []string
	for i := range clusterNodes {
		name := fmt.Sprintf("n%d", i+1)
		sh.names = append(sh.names, name)
		nodeDir := filepath.Join(dir, name)
		// Routes to every node, itself included: a server ignores the
		// route to itself, and the block is the same on every node.
		block := fmt.Sprintf("cluster {\n  name: jetloop-bench\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}", routePorts[i], strings.Join(routes, ", "))
		conf, err := sh.writeConfigIn(nodeDir, name, block)
		if err != nil {
			return nil, err
		}
		proc := "nats-server"
		if i > 0 {
			proc = "nats-server-" + name
		}
		c, err := sh.start(proc, bins["nats-server"], "-c", conf, "--ports_file_dir", nodeDir, "-m", "-1")
		if err != nil {
			return nil, err
		}
		if i == 0 {
			sh.server = c
		} else {
			sh.peers = append(sh.peers, c)
		}
	}
	for i, c := range append([]*child{sh.server}, sh.peers...) {
		p, err := portsOf(ctx, c, filepath.Join(dir, fmt.Sprintf("n%d", i+1)))
		if err != nil {
			return nil, err
		}
		if len(p.Monitoring) == 0 {
			return nil, fmt.Errorf("%s has no monitoring port", c.name)
		}
		urls = append(urls, p.Nats[0])
		sh.monitors = append(sh.monitors, p.Monitoring[0])
		if err := sh.checkSyncOf(ctx, p.Monitoring[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}
	sh.url, sh.monitor = strings.Join(urls, ","), sh.monitors[0]
	if err := waitFor(ctx, time.Minute, "the cluster to have a meta leader with every node current", func() bool {
		_, leader, err := sh.meta(ctx)
		return err == nil && leader != ""
	}); err != nil {
		return nil, err
	}
	// Placing a stream of three replicas needs every node's stats at the
	// meta leader, which come a little after its election: apply again
	// until it has placed them all (apply does only what is missing).
	var (
		out      []byte
		applyErr error
	)
	if err := waitFor(ctx, time.Minute, "jetloop streams apply --replicas 3", func() bool {
		apply := exec.CommandContext(ctx, bins["jetloop"], append([]string{"streams"},
			append(sh.as("admin"), "--replicas", "3", "--event-streams", strconv.Itoa(b.cfg.EventStreams), "apply")...)...)
		out, applyErr = apply.CombinedOutput()
		return applyErr == nil
	}); err != nil {
		return nil, fmt.Errorf("%w: %v\n%s", err, applyErr, out)
	}
	if err := sh.startProcesses(ctx, bins); err != nil {
		return nil, err
	}
	return sh, nil
}

// freePorts picks n distinct free loopback ports, held open together so no
// two are the same, then released for the servers to bind.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// jsz reads a node's JetStream report.
func (sh *clusterShape) jsz(ctx context.Context, monitor string) (*server.JSInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitor+"/jsz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var info server.JSInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return nil, fmt.Errorf("jsz: %w", err)
	}
	return &info, nil
}

// meta returns the nodes' names and the meta leader's, once every node
// names the same leader and the leader sees the others current; until then
// the leader is "".
func (sh *clusterShape) meta(ctx context.Context) (nodes []string, leader string, err error) {
	nodes = sh.names
	for i, m := range sh.monitors {
		info, err := sh.jsz(ctx, m)
		if err != nil {
			return nil, "", err
		}
		if info.Meta == nil || info.Meta.Leader == "" || i > 0 && info.Meta.Leader != leader {
			return nodes, "", nil
		}
		leader = info.Meta.Leader
		if info.Meta.Leader == sh.names[i] {
			current := 0
			for _, p := range info.Meta.Replicas {
				if p.Current && !p.Offline {
					current++
				}
			}
			if current != clusterNodes-1 {
				return nodes, "", nil
			}
		}
	}
	return nodes, leader, nil
}

// placement reads every stream's leader and its consumers', by name.
func (sh *clusterShape) placement(ctx context.Context) ([]Placement, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []Placement
	streams := sh.ajs.ListStreams(ctx)
	for info := range streams.Info() {
		p := Placement{Name: info.Config.Name, Kind: "stream", Replicas: info.Config.Replicas}
		switch {
		case strings.HasPrefix(p.Name, "KV_"):
			p.Name, p.Kind = strings.TrimPrefix(p.Name, "KV_"), "bucket"
		case strings.HasPrefix(p.Name, "OBJ_"):
			p.Name, p.Kind = strings.TrimPrefix(p.Name, "OBJ_"), "object store"
		}
		if info.Cluster != nil {
			p.Leader = info.Cluster.Leader
		}
		s, err := sh.ajs.Stream(ctx, info.Config.Name)
		if err != nil {
			return nil, err
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			if p.Consumers == nil {
				p.Consumers = map[string]int{}
			}
			leader := ""
			if ci.Cluster != nil {
				leader = ci.Cluster.Leader
			}
			p.Consumers[leader]++
		}
		if err := consumers.Err(); err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", info.Config.Name, err)
		}
		out = append(out, p)
	}
	if err := streams.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Placement) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return -c // streams, then object stores, then buckets
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// connected reads each node's connections: the nodes each process's
// connections are on, by process.
func (sh *clusterShape) connected(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for i, m := range sh.monitors {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m+"/connz?limit=1024", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		var connz server.Connz
		err = json.NewDecoder(resp.Body).Decode(&connz)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("connz: %w", err)
		}
		for _, c := range connz.Conns {
			name := strings.TrimPrefix(c.Name, "jetloop ")
			if name == c.Name {
				continue
			}
			if role, ok := strings.CutPrefix(name, "bench "); ok {
				name = "driver " + role
			}
			if !slices.Contains(out[name], sh.names[i]) {
				out[name] = append(out[name], sh.names[i])
			}
		}
	}
	return out, nil
}

// nodesCPU names each node's share of the servers' CPU per step.
func nodesCPU(names []string, cpu []float64) string {
	var parts []string
	for i, s := range cpu {
		if i < len(names) {
			parts = append(parts, fmt.Sprintf("%s %.3f", names[i], s*1000))
		}
	}
	return strings.Join(parts, ", ")
}

// clusterTable prints the cluster's placement and figures.
func (r *Result) clusterTable(w io.Writer) {
	c := r.Cluster
	if !r.ran("cluster") || c == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	row("3-node cluster", "leader", "replicas", "consumer leaders")
	row("--------------", "------", "--------", "----------------")
	row("meta", c.MetaLeader, "", "")
	for _, p := range c.Placement {
		var consumers []string
		for _, n := range slices.Sorted(maps.Keys(p.Consumers)) {
			consumers = append(consumers, fmt.Sprintf("%s ×%d", n, p.Consumers[n]))
		}
		row(p.Kind+" "+p.Name, p.Leader, fmt.Sprint(p.Replicas), strings.Join(consumers, ", "))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d of %d leaders moved during the runs\n\n", c.LeadersMoved, len(c.Placement))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row("3-node cluster", "value", "how")
	row("--------------", "-----", "---")
	var procs []string
	for _, p := range slices.Sorted(maps.Keys(c.Connected)) {
		procs = append(procs, p+" "+strings.Join(c.Connected[p], "+"))
	}
	row("connected to", strings.Join(procs, ", "), "each process's connections, by node")
	row("sequential step p50 / p99", fmt.Sprintf("%.3f / %.3f ms", c.StepP50Ms, c.StepP99Ms),
		fmt.Sprintf("%d tool steps, one turn at a time", c.StepSamples))
	for _, t := range c.Throughput {
		row(fmt.Sprintf("throughput %d×%d at %d", t.Turns, t.Steps/max(t.Turns, 1), t.Concurrency),
			fmt.Sprintf("%.0f steps/s, %.1f turns/s", t.StepsPerS, t.TurnsPerS),
			fmt.Sprintf("%.1f s, %d unfinished", t.Seconds, t.Unfinished))
		p := t.CPUSPerStep
		row("  CPU per step", fmt.Sprintf("%.3f ms", (p.Server+p.Orchestrator+p.Toolworker+p.Driver)*1000),
			fmt.Sprintf("nats-servers %.3f (%s), orchestrator %.3f, toolworker %.3f, driver %.3f ms",
				p.Server*1000, nodesCPU(c.Nodes, p.Nodes), p.Orchestrator*1000, p.Toolworker*1000, p.Driver*1000))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}
