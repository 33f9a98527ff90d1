package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/stack"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Deployed is the deployed shape measured with one storage of JETLOOP_JOBS:
// a standalone nats-server process with the repository's nats.conf (file
// storage, one user per role), one orchestrator process, one toolworker
// process with --concurrency 64, and this process as a thin client.
type Deployed struct {
	// Sync is the server's JetStream sync_interval: "always" (fsync before
	// every acknowledgement, as nats.conf ships) or "default" (NATS's
	// background flush every two minutes).
	Sync        string `json:"sync"`
	JobsStorage string `json:"jobs_storage"`
	// StepP50Ms and StepP99Ms are a tool step's time with one turn at a
	// time: its step.started to the next step.started, as the orchestrator
	// stamped them (model and tool answer at once).
	StepP50Ms   float64 `json:"step_p50_ms"`
	StepP99Ms   float64 `json:"step_p99_ms"`
	StepSamples int     `json:"step_samples"`
	// PublishFloorP50Ms and PublishFloorP99Ms are one publish and its ack
	// from this process to the server, as an event append makes it.
	PublishFloorP50Ms float64 `json:"publish_floor_p50_ms"`
	PublishFloorP99Ms float64 `json:"publish_floor_p99_ms"`
	// Wire is what each process sent and received per step while turns
	// ran one at a time, as the server counted it (its /connz).
	Wire       []Wire               `json:"wire_per_step"`
	Throughput []DeployedThroughput `json:"throughput"`
	Workflow   *WorkflowCost        `json:"workflow"`
}

// Wire is one process's traffic with the server per step: messages and
// bytes it published (sent) and that the server delivered to it (received),
// protocol and headers included.
type Wire struct {
	Process       string  `json:"process"`
	SentMsgs      float64 `json:"sent_msgs"`
	SentBytes     float64 `json:"sent_bytes"`
	ReceivedMsgs  float64 `json:"received_msgs"`
	ReceivedBytes float64 `json:"received_bytes"`
}

// ProcessCPU is CPU time (user + system) per step of each process.
type ProcessCPU struct {
	// Server is the nats-server's: every node's, on a cluster, and Nodes
	// each node's then.
	Server       float64   `json:"nats_server"`
	Nodes        []float64 `json:"nats_server_nodes,omitempty"`
	Orchestrator float64   `json:"orchestrator"`
	Toolworker   float64   `json:"toolworker"`
	// Driver is this process: submitting and following every event.
	Driver float64 `json:"driver"`
}

// DeployedThroughput is one run of N turns of K steps at concurrency C
// through the deployed shape.
type DeployedThroughput struct {
	Turns       int        `json:"turns"`
	Steps       int        `json:"steps"`
	Concurrency int        `json:"concurrency"`
	Seconds     float64    `json:"seconds"`
	StepsPerS   float64    `json:"steps_per_s"`
	TurnsPerS   float64    `json:"turns_per_s"`
	CPUSPerStep ProcessCPU `json:"cpu_s_per_step"`
	Unfinished  int        `json:"unfinished"`
}

// at returns the run at concurrency c, if any.
func (d *Deployed) at(c int) (DeployedThroughput, bool) {
	for _, t := range d.Throughput {
		if t.Concurrency == c {
			return t, true
		}
	}
	return DeployedThroughput{}, false
}

// jobsStorages are the storages of JETLOOP_JOBS the deployed shape is
// measured with (streams apply --jobs-storage).
var jobsStorages = []string{"file", "memory"}

// syncModes are the server's sync settings the deployed shape is measured
// with: as shipped (fsync before every acknowledgement, docs/durability.md),
// and NATS's default, so that the guarantee's price shows.
var syncModes = []string{"always", "default"}

// deployed measures the deployed shape with each sync mode and storage of
// the jobs stream, each on a server of its own.
func (b *run) deployed(ctx context.Context, sz sizes) error {
	bins, repo, err := b.deployment()
	if err != nil {
		return err
	}
	for _, sync := range syncModes {
		for _, storage := range jobsStorages {
			d, err := b.deployedWith(ctx, sz, bins, repo, sync, storage)
			if err != nil {
				return fmt.Errorf("sync %s, jobs storage %s: %w", sync, storage, err)
			}
			b.res.Deployed = append(b.res.Deployed, *d)
		}
	}
	return nil
}

// label names a measured variant in the tables.
func (d *Deployed) label() string { return "sync " + d.Sync + ", jobs " + d.JobsStorage }

func (b *run) deployedWith(ctx context.Context, sz sizes, bins programs, repo, sync, storage string) (*Deployed, error) {
	fmt.Fprintf(b.cfg.Progress, "bench:   deployed, sync %s, jobs storage %s\n", sync, storage)
	sh, err := b.startShape(ctx, bins, repo, sync, storage)
	if err != nil {
		return nil, err
	}
	defer sh.stop()
	d := &Deployed{Sync: sync, JobsStorage: storage}
	if err := sh.publishFloor(ctx, sz, d); err != nil {
		return nil, sh.explain(fmt.Errorf("publish floor: %w", err))
	}
	if err := sh.sequential(ctx, sz, d); err != nil {
		return nil, sh.explain(fmt.Errorf("sequential: %w", err))
	}
	fmt.Fprintf(b.cfg.Progress, "bench:     sequential step p50 %.3f ms\n", d.StepP50Ms)
	for _, c := range sz.concurrency {
		t, err := sh.throughput(ctx, sz, c)
		if err != nil {
			return nil, sh.explain(fmt.Errorf("throughput at %d: %w", c, err))
		}
		d.Throughput = append(d.Throughput, t)
		fmt.Fprintf(b.cfg.Progress, "bench:     %d×%d at %d: %.0f steps/s\n", t.Turns, sz.steps, c, t.StepsPerS)
	}
	w, err := watch(sh.admin)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	if d.Workflow, err = measureWorkflow(ctx, sh.cjs, sh.ajs, w, "wf-deployed", sz.workflowTasks); err != nil {
		return nil, sh.explain(fmt.Errorf("workflow: %w", err))
	}
	fmt.Fprintf(b.cfg.Progress, "bench:     workflow of %d tasks: %.3f ms between tasks (p50)\n", d.Workflow.Tasks, d.Workflow.GapP50Ms)
	return d, nil
}

// programs are the paths of the binaries the deployed shape runs, by name.
type programs map[string]string

// deployedPrograms are the binaries the deployed shape runs: the servers
// and jetloop itself (streams apply), as deployed.
var deployedPrograms = []string{"nats-server", "orchestrator", "toolworker", "jetloop"}

// findPrograms finds the deployed shape's binaries: in the run's Bin
// directory when it has one; otherwise beside the running executable, then
// on $PATH. It builds nothing: make bench does.
func (b *run) findPrograms() (programs, error) {
	var dirs []string
	if b.cfg.Bin != "" {
		dirs = []string{b.cfg.Bin}
	} else if self, err := os.Executable(); err == nil {
		dirs = []string{filepath.Dir(self)}
	}
	found := programs{}
	for _, name := range deployedPrograms {
		for _, dir := range dirs {
			if path := filepath.Join(dir, name); isExecutable(path) {
				found[name] = path
				break
			}
		}
		if found[name] == "" && b.cfg.Bin == "" {
			if path, err := exec.LookPath(name); err == nil {
				found[name] = path
			}
		}
		if found[name] == "" {
			where := "on $PATH"
			switch {
			case b.cfg.Bin != "":
				where = "in " + b.cfg.Bin
			case len(dirs) > 0:
				where = "in " + dirs[0] + " or on $PATH"
			}
			return nil, fmt.Errorf("the deployed shape runs %s, and there is none %s: build them with make bench, or go build -o DIR ./cmd/... github.com/nats-io/nats-server/v2 and jetloop bench --bin DIR", name, where)
		}
	}
	return found, nil
}

// isExecutable reports whether path is a file someone may execute.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// findRepo returns the checkout whose configuration the deployed shape
// runs with (nats.conf, deploy/): the working directory or the nearest
// directory above it that holds both.
func findRepo() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		_, err1 := os.Stat(filepath.Join(dir, "nats.conf"))
		_, err2 := os.Stat(filepath.Join(dir, "deploy", "permissions.conf"))
		if err1 == nil && err2 == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("the deployed shape runs with the repository's nats.conf and deploy/: run it inside a checkout of jetloop (none in %s or above)", wd)
		}
	}
}

// deployment is what the deployed shape runs: the binaries and the
// checkout whose configuration they run with.
func (b *run) deployment() (programs, string, error) {
	bins, err := b.findPrograms()
	if err != nil {
		return nil, "", err
	}
	repo, err := findRepo()
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintf(b.cfg.Progress, "bench:   running %s, %s, %s, %s\n", bins["nats-server"], bins["orchestrator"], bins["toolworker"], bins["jetloop"])
	return bins, repo, nil
}

// shape is the deployed shape running: three processes and this one's two
// connections, admin (to watch every event and read logs back) and client
// (to submit, as a user's program would).
type shape struct {
	b      *run
	dir    string
	repo   string
	url    string
	server *child
	// peers are the cluster's other nodes, when the server is one of a
	// cluster's.
	peers  []*child
	orch   *child
	worker *child
	// logs are the processes' outputs, by process name.
	logs   map[string]string
	admin  *nats.Conn
	ajs    jetstream.JetStream
	client *nats.Conn
	cjs    jetstream.JetStream
	// pprof is each process's profile endpoint, when profiles are taken.
	pprof map[string]string
	// monitor is the server's monitoring endpoint.
	monitor string
	storage string
	sync    string // "always" or "default"
	// kind names the shape in profiles' file names: "deployed" or "cluster".
	kind string
}

// startShape starts a nats-server process with the repository's nats.conf
// on a free port and a store of its own, provisions it with jetloop streams
// apply as admin, then the orchestrator and the tool worker as their users.
func (b *run) startShape(ctx context.Context, bins programs, repo, sync, storage string) (_ *shape, err error) {
	dir, err := os.MkdirTemp("", "jetloop-deployed-")
	if err != nil {
		return nil, err
	}
	sh := &shape{b: b, dir: dir, repo: repo, logs: map[string]string{}, pprof: map[string]string{}, sync: sync, storage: storage, kind: "deployed"}
	defer func() {
		if err != nil {
			err = sh.explain(err)
			sh.stop()
		}
	}()
	conf, err := sh.writeConfig()
	if err != nil {
		return nil, err
	}
	// The monitoring port answers /connz: what each connection sent.
	args := []string{"-c", conf, "--ports_file_dir", dir, "-m", "-1"}
	if b.cfg.ProfileDir != "" {
		args = append(args, "--profile", "-1")
	}
	if sh.server, err = sh.start("nats-server", bins["nats-server"], args...); err != nil {
		return nil, err
	}
	ports, err := sh.serverPorts(ctx)
	if err != nil {
		return nil, err
	}
	sh.url = ports.Nats[0]
	if len(ports.Profile) > 0 {
		sh.pprof["nats-server"] = ports.Profile[0]
	}
	if len(ports.Monitoring) > 0 {
		sh.monitor = ports.Monitoring[0]
		if err := sh.checkSync(ctx); err != nil {
			return nil, err
		}
	}
	// Every stream, bucket and consumer of docs/protocol.md, as an operator
	// provisions them.
	apply := exec.CommandContext(ctx, bins["jetloop"], append([]string{"streams"},
		append(sh.as("admin"), "--jobs-storage", storage, "--event-streams", strconv.Itoa(b.cfg.EventStreams), "apply")...)...)
	if out, err := apply.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("jetloop streams apply --jobs-storage %s: %v\n%s", storage, err, out)
	}
	if err := sh.startProcesses(ctx, bins); err != nil {
		return nil, err
	}
	return sh, nil
}

// startProcesses connects this process as admin and as client to the
// provisioned server, then starts the tool worker and the orchestrator and
// waits until they serve.
func (sh *shape) startProcesses(ctx context.Context, bins programs) (err error) {
	b, dir := sh.b, sh.dir
	if sh.admin, sh.ajs, err = sh.connect("admin", bus.InboxCLI); err != nil {
		return err
	}
	if sh.client, sh.cjs, err = sh.connect("client", bus.InboxCLI); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte(agentsFile), 0o644); err != nil {
		return err
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	workerArgs := append(sh.as("toolworker"), "--root", root, "--concurrency", "64")
	orchArgs := append(sh.as("orchestrator"), "--agents", filepath.Join(dir, "AGENTS.md"), "--allow-scripts")
	if b.cfg.Metrics {
		workerArgs = append(workerArgs, "--metrics-addr", "127.0.0.1:0")
		orchArgs = append(orchArgs, "--metrics-addr", "127.0.0.1:0")
	}
	if b.cfg.ProfileDir != "" {
		for _, p := range []struct {
			name string
			args *[]string
		}{{"toolworker", &workerArgs}, {"orchestrator", &orchArgs}} {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			*p.args = append(*p.args, "--pprof-addr", addr)
			sh.pprof[p.name] = "http://" + addr
		}
	}
	if sh.worker, err = sh.start("toolworker", bins["toolworker"], workerArgs...); err != nil {
		return err
	}
	if sh.orch, err = sh.start("orchestrator", bins["orchestrator"], orchArgs...); err != nil {
		return err
	}
	if err := stack.WaitTool(ctx, sh.ajs, "echo"); err != nil {
		return err
	}
	if err := stack.WaitServing(ctx, sh.ajs); err != nil {
		return err
	}
	return nil
}

// as is the connection flags of a role: the server's URL, the role's user
// and its password file from deploy/dev (nats.conf's passwords are public).
func (sh *shape) as(role string) []string {
	return []string{"--nats", sh.url, "--user", role, "--password-file", filepath.Join(sh.repo, "deploy", "dev", role+".password")}
}

// connect opens a connection of this process as role.
func (sh *shape) connect(role, inbox string) (*nats.Conn, jetstream.JetStream, error) {
	auth := bus.Auth{User: role, PasswordFile: filepath.Join(sh.repo, "deploy", "dev", role+".password"), Inbox: inbox}
	return dial(sh.url, "jetloop bench "+role, auth, sh.b.log)
}

// dial connects to url as auth says, with the JetStream of its account:
// an account that imports the streams' API gets it under its prefix.
func dial(url, name string, auth bus.Auth, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := auth.Options()
	if err != nil {
		return nil, nil, err
	}
	nc, err := bus.Connect(url, name, func(err error) { log.Warn("nats", "err", err) }, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := bus.JetStreamFor(context.Background(), nc, "")
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// writeConfig writes the repository's nats.conf with a free port and a
// store in the shape's directory, beside a copy of the permissions it
// includes (an include is read relative to the file that includes it).
func (sh *shape) writeConfig() (string, error) { return sh.writeConfigIn(sh.dir, "", "") }

// writeConfigIn writes the server's configuration as writeConfig does, into
// dir with a store in dir/store; name, when set, is its server_name, and
// cluster, when set, is added to it.
func (sh *shape) writeConfigIn(dir, name, cluster string) (string, error) {
	conf, err := os.ReadFile(filepath.Join(sh.repo, "nats.conf"))
	if err != nil {
		return "", err
	}
	perms, err := os.ReadFile(filepath.Join(sh.repo, "deploy", "permissions.conf"))
	if err != nil {
		return "", err
	}
	// The accounts' imports and exports, where the configuration has them.
	accounts, err := os.ReadFile(filepath.Join(sh.repo, "deploy", "accounts.conf"))
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	rewrites := []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`(?m)^listen:.*$`), "listen: 127.0.0.1:-1"},
		{regexp.MustCompile(`(?m)^(\s*)store_dir:.*$`), "${1}store_dir: " + strconv.Quote(filepath.Join(dir, "store"))},
	}
	if name != "" {
		rewrites = append(rewrites, struct {
			re   *regexp.Regexp
			with string
		}{regexp.MustCompile(`(?m)^server_name:.*$`), "server_name: " + name})
	}
	for _, r := range rewrites {
		if n := len(r.re.FindAllIndex(conf, -1)); n != 1 {
			return "", fmt.Errorf("nats.conf: %d lines match %s, want 1", n, r.re)
		}
		conf = r.re.ReplaceAll(conf, []byte(r.with))
	}
	// nats.conf ships sync_interval: always; "default" measures NATS's own
	// default, a flush every two minutes.
	syncLine := regexp.MustCompile(`(?m)^\s*sync_interval:.*$`)
	if sh.sync == "default" {
		conf = syncLine.ReplaceAll(conf, nil)
	} else if !syncLine.Match(conf) {
		return "", fmt.Errorf("nats.conf sets no sync_interval")
	}
	if cluster != "" {
		conf = append(conf, "\n"+cluster+"\n"...)
	}
	if err := os.MkdirAll(filepath.Join(dir, "deploy"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy", "permissions.conf"), perms, 0o644); err != nil {
		return "", err
	}
	if accounts != nil {
		if err := os.WriteFile(filepath.Join(dir, "deploy", "accounts.conf"), accounts, 0o644); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "nats.conf")
	return path, os.WriteFile(path, conf, 0o644)
}

// checkSync reads the server's varz: the figures are labelled with the
// sync mode the server runs with, not the one asked for.
func (sh *shape) checkSync(ctx context.Context) error { return sh.checkSyncOf(ctx, sh.monitor) }

// checkSyncOf checks the sync mode of the server whose monitoring endpoint
// is monitor.
func (sh *shape) checkSyncOf(ctx context.Context, monitor string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitor+"/varz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v struct {
		JetStream struct {
			Config struct {
				SyncAlways bool `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("varz: %w", err)
	}
	if always := v.JetStream.Config.SyncAlways; always != (sh.sync == "always") {
		return fmt.Errorf("the server runs with sync always %v, want sync %s", always, sh.sync)
	}
	return nil
}

// load is what the server holds: its varz's client connections and
// subscriptions.
type load struct {
	Connections   int    `json:"connections"`
	Subscriptions uint32 `json:"subscriptions"`
}

// varz reads what the server holds.
func (sh *shape) varz(ctx context.Context) (load, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sh.monitor+"/varz", nil)
	if err != nil {
		return load{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return load{}, err
	}
	defer resp.Body.Close()
	var l load
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return load{}, fmt.Errorf("varz: %w", err)
	}
	return l, nil
}

// settle waits until the server holds no more than it did when quiet.
func (sh *shape) settle(ctx context.Context, quiet load) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		l, err := sh.varz(ctx)
		if err != nil {
			return err
		}
		if l.Connections <= quiet.Connections && l.Subscriptions <= quiet.Subscriptions {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server still holds %+v, %+v when quiet: %w", l, quiet, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ports is what nats-server writes to its ports file.
type ports struct {
	Nats       []string `json:"nats"`
	Monitoring []string `json:"monitoring"`
	Profile    []string `json:"profile"`
}

// serverPorts waits for the server's ports file: the server listens once
// it is written.
func (sh *shape) serverPorts(ctx context.Context) (ports, error) {
	return portsOf(ctx, sh.server, sh.dir)
}

// portsOf waits for the ports file of server, started with
// --ports_file_dir dir.
func portsOf(ctx context.Context, server *child, dir string) (ports, error) {
	path := filepath.Join(dir, fmt.Sprintf("nats-server_%d.ports", server.pid()))
	var p ports
	err := waitFor(ctx, 30*time.Second, server.name+" to listen", func() bool {
		data, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(data, &p) == nil && len(p.Nats) > 0 || server.exited()
	})
	if err == nil && server.exited() {
		err = errors.New(server.name + " exited")
	}
	return p, err
}

// start starts a process whose output goes to a file in the shape's
// directory (and to the run's ChildLog too when it has one).
func (sh *shape) start(name, path string, args ...string) (*child, error) {
	logPath := filepath.Join(sh.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	sh.logs[name] = logPath
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	// An *os.File is handed to the process as it is: no pipe, no copying
	// goroutine in this process to count in the driver's CPU.
	cmd.Stdout, cmd.Stderr = f, f
	if sh.b.cfg.ChildLog != io.Discard && sh.b.cfg.ChildLog != nil {
		w := io.MultiWriter(f, sh.b.cfg.ChildLog)
		cmd.Stdout, cmd.Stderr = w, w
	}
	c, err := startChild(name, cmd)
	f.Close() // the process has its own descriptor (or the copying goroutine keeps f)
	return c, err
}

// explain adds the end of each process's output to err.
func (sh *shape) explain(err error) error {
	var b strings.Builder
	names := []string{"nats-server", "orchestrator", "toolworker"}
	for _, c := range sh.peers {
		names = append(names, c.name)
	}
	for _, name := range names {
		path, ok := sh.logs[name]
		if !ok {
			continue
		}
		data, _ := os.ReadFile(path)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "\n--- %s (last lines):\n%s", name, strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// stop ends the processes gracefully, in the order an operator would: the
// orchestrator, the tool worker, then the server.
func (sh *shape) stop() {
	for _, c := range []*child{sh.orch, sh.worker} {
		if c != nil {
			if err := c.stop(); err != nil {
				sh.b.log.Warn("stop", "process", c.name, "err", err)
			}
		}
	}
	for _, nc := range []*nats.Conn{sh.admin, sh.client} {
		if nc != nil {
			nc.Close()
		}
	}
	for _, c := range append([]*child{sh.server}, sh.peers...) {
		if c != nil {
			_ = c.stop()
		}
	}
	os.RemoveAll(sh.dir)
}

// publishFloor measures one publish and its ack to the server process, with
// a message id and an expected last subject sequence as an event append
// sends them, on a file stream of its own that it deletes afterwards.
func (sh *shape) publishFloor(ctx context.Context, sz sizes, d *Deployed) error {
	if sz.floorSamples == 0 {
		return nil
	}
	const stream = "BENCH_FLOOR"
	if _, err := sh.ajs.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"bench.floor.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return err
	}
	defer func() { _ = sh.ajs.DeleteStream(context.WithoutCancel(ctx), stream) }()
	var pubs []time.Duration
	last := uint64(0)
	for i := range sz.floorSamples + 50 {
		began := time.Now()
		ack, err := sh.ajs.Publish(ctx, "bench.floor.turn", []byte(`{"type":"step.started","seq":1}`),
			jetstream.WithMsgID("p"+strconv.Itoa(i)), jetstream.WithExpectLastSequencePerSubject(last))
		if err != nil {
			return err
		}
		if i >= 50 {
			pubs = append(pubs, time.Since(began))
		}
		last = ack.Sequence
	}
	d.PublishFloorP50Ms, d.PublishFloorP99Ms = ms(percentile(pubs, 0.5)), ms(percentile(pubs, 0.99))
	return nil
}

// sequential runs turns of overheadSteps steps one at a time and takes each
// tool step's time from the log: step.started to the next step.started.
func (sh *shape) sequential(ctx context.Context, sz sizes, d *Deployed) error {
	w, err := watch(sh.admin)
	if err != nil {
		return err
	}
	defer w.stop()
	const warmup = 2
	var turns []string
	var wire0 map[string]Wire
	for i := range sz.overheadTurns + warmup {
		if i == warmup {
			if wire0, err = sh.wire(ctx); err != nil {
				return err
			}
		}
		turn := fmt.Sprintf("seq-%d", i)
		if err := submit(ctx, sh.cjs, turn, script(turn, sz.overheadSteps, 0)); err != nil {
			return err
		}
		if err := w.until(ctx, time.Minute, "turn "+turn, func() bool {
			st := w.turns[turn]
			return st != nil && st.finished
		}); err != nil {
			return err
		}
		if i >= warmup {
			turns = append(turns, turn)
		}
	}
	wire1, err := sh.wire(ctx)
	if err != nil {
		return err
	}
	// Per step of the measured turns, their submissions and ends included.
	n := float64(len(turns) * sz.overheadSteps)
	for _, name := range []string{"orchestrator", "toolworker", "driver"} {
		a, b := wire0[name], wire1[name]
		d.Wire = append(d.Wire, Wire{Process: name, SentMsgs: (b.SentMsgs - a.SentMsgs) / n, SentBytes: (b.SentBytes - a.SentBytes) / n,
			ReceivedMsgs: (b.ReceivedMsgs - a.ReceivedMsgs) / n, ReceivedBytes: (b.ReceivedBytes - a.ReceivedBytes) / n})
	}
	store, err := logstore.New(ctx, sh.ajs)
	if err != nil {
		return err
	}
	var steps []time.Duration
	for _, turn := range turns {
		starts, err := stepStarts(ctx, store, turn)
		if err != nil {
			return err
		}
		for step := 1; step < sz.overheadSteps; step++ {
			from, ok1 := starts[step]
			to, ok2 := starts[step+1]
			if !ok1 || !ok2 {
				return fmt.Errorf("turn %s: step %d has no next step", turn, step)
			}
			steps = append(steps, to.Sub(from))
		}
	}
	d.StepSamples = len(steps)
	d.StepP50Ms, d.StepP99Ms = ms(percentile(steps, 0.5)), ms(percentile(steps, 0.99))
	return nil
}

// wire returns what each process's connections sent and received so far,
// by process: the orchestrator, the tool worker, and this process (driver).
func (sh *shape) wire(ctx context.Context) (map[string]Wire, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sh.monitor+"/connz?limit=1024", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var connz server.Connz
	if err := json.NewDecoder(resp.Body).Decode(&connz); err != nil {
		return nil, fmt.Errorf("connz: %w", err)
	}
	out := map[string]Wire{}
	for _, c := range connz.Conns {
		var name string
		switch {
		case c.Name == "jetloop orchestrator":
			name = "orchestrator"
		case c.Name == "jetloop toolworker":
			name = "toolworker"
		case strings.HasPrefix(c.Name, "jetloop bench "):
			name = "driver"
		default:
			continue
		}
		// The server's in is what the client sent.
		w := out[name]
		w.Process = name
		w.SentMsgs += float64(c.InMsgs)
		w.SentBytes += float64(c.InBytes)
		w.ReceivedMsgs += float64(c.OutMsgs)
		w.ReceivedBytes += float64(c.OutBytes)
		out[name] = w
	}
	return out, nil
}

// throughput runs N turns of K steps with C of them in flight at any time,
// reading each process's CPU time from /proc before and after.
func (sh *shape) throughput(ctx context.Context, sz sizes, c int) (DeployedThroughput, error) {
	w, err := watch(sh.admin)
	if err != nil {
		return DeployedThroughput{}, err
	}
	defer w.stop()
	slots := make(chan struct{}, c)
	w.onFinish = func(string, seen) { <-slots }
	// The servers last: a cluster's nodes are all counted as nats-server.
	procs := append([]*child{sh.orch, sh.worker, sh.server}, sh.peers...)
	before := make([]time.Duration, len(procs))
	for i, p := range procs {
		if before[i], err = cpu(p.pid()); err != nil {
			return DeployedThroughput{}, err
		}
	}
	profiled := sh.profile(ctx, c, sz.profileFor)
	self0 := selfCPU()
	began := time.Now()
	prefix := fmt.Sprintf("load%d-", c)
	for i := range sz.throughputTurns {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return DeployedThroughput{}, ctx.Err()
		}
		turn := prefix + strconv.Itoa(i)
		if err := submit(ctx, sh.cjs, turn, script(turn, sz.steps, 0)); err != nil {
			return DeployedThroughput{}, err
		}
	}
	werr := w.until(ctx, 5*time.Minute, "every turn to finish", func() bool { return w.finished >= sz.throughputTurns })
	elapsed := time.Since(began)
	self1 := selfCPU()
	after := make([]time.Duration, len(procs))
	for i, p := range procs {
		if after[i], err = cpu(p.pid()); err != nil {
			return DeployedThroughput{}, err
		}
	}
	if err := profiled(); err != nil {
		sh.b.log.Warn("profiles", "err", err)
	}
	t := DeployedThroughput{Turns: sz.throughputTurns, Concurrency: c, Seconds: elapsed.Seconds()}
	for _, s := range w.snapshot() {
		t.Steps += s.steps
		if !s.finished || s.stop != events.StopCompleted {
			t.Unfinished++
		}
	}
	if werr != nil {
		return t, fmt.Errorf("%w (%d of %d finished)", werr, w.finished, sz.throughputTurns)
	}
	per := func(d time.Duration) float64 { return d.Seconds() / float64(max(t.Steps, 1)) }
	t.StepsPerS = float64(t.Steps) / elapsed.Seconds()
	t.TurnsPerS = float64(sz.throughputTurns-t.Unfinished) / elapsed.Seconds()
	var servers time.Duration
	var nodes []float64
	for i := 2; i < len(procs); i++ {
		servers += after[i] - before[i]
		if len(sh.peers) > 0 {
			nodes = append(nodes, per(after[i]-before[i]))
		}
	}
	t.CPUSPerStep = ProcessCPU{Server: per(servers), Nodes: nodes, Orchestrator: per(after[0] - before[0]),
		Toolworker: per(after[1] - before[1]), Driver: per(self1 - self0)}
	return t, nil
}

// profile takes a CPU profile of each process that serves one, for the
// first d of a throughput run at concurrency c, into the run's ProfileDir;
// the function it returns waits for them.
func (sh *shape) profile(ctx context.Context, c int, d time.Duration) func() error {
	if sh.b.cfg.ProfileDir == "" || len(sh.pprof) == 0 {
		return func() error { return nil }
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	secs := max(1, int(d.Round(time.Second)/time.Second))
	for name, base := range sh.pprof {
		wg.Go(func() {
			path := filepath.Join(sh.b.cfg.ProfileDir, fmt.Sprintf("%s-%s-%s-c%d-%s.cpu.pprof", sh.kind, sh.sync, sh.storage, c, name))
			if err := fetch(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), path); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// fetch writes what url answers to path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(data))
	}
	return os.WriteFile(path, data, 0o644)
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// deployedTarget is a target for the deployed shape (BENCHMARKS.md,
// "Targets"), judged on each variant's figures.
type deployedTarget struct {
	what  string
	judge func(d *Deployed) (met bool, got string, ok bool)
}

var deployedTargets = []deployedTarget{
	{"sequential step p50 ≤ 1.5 ms", func(d *Deployed) (bool, string, bool) {
		return d.StepP50Ms <= 1.5, fmt.Sprintf("%.3f ms", d.StepP50Ms), d.StepSamples > 0
	}},
	{"≥ 2,500 steps/s at 50 in flight", func(d *Deployed) (bool, string, bool) {
		t, ok := d.at(50)
		return t.StepsPerS >= 2500, fmt.Sprintf("%.0f steps/s", t.StepsPerS), ok
	}},
	{"≥ 2,000 steps/s at 200 in flight", func(d *Deployed) (bool, string, bool) {
		t, ok := d.at(200)
		return t.StepsPerS >= 2000, fmt.Sprintf("%.0f steps/s", t.StepsPerS), ok
	}},
	{"workflow cost per task p50 ≤ 2 ms", func(d *Deployed) (bool, string, bool) {
		if d.Workflow == nil {
			return false, "", false
		}
		return d.Workflow.GapP50Ms <= 2, fmt.Sprintf("%.3f ms", d.Workflow.GapP50Ms), true
	}},
}

// deployedTable prints the deployed shape's figures beside the in-process
// ones, then the deployed shape's targets and whether each holds.
func (r *Result) deployedTable(w io.Writer) {
	if !r.ran("deployed") || len(r.Deployed) == 0 {
		fmt.Fprintf(w, "deployed shape: %s (jetloop bench --deployed)\n", notMeasured)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	head := []string{"deployed shape"}
	rule := []string{"--------------"}
	for _, d := range r.Deployed {
		head = append(head, d.label())
		rule = append(rule, strings.Repeat("-", len(d.label())))
	}
	row(append(head, "in-process")...)
	row(append(rule, "----------")...)
	// each makes one cell per jobs storage.
	each := func(label string, cell func(d *Deployed) string, inproc string) {
		cells := []string{label}
		for i := range r.Deployed {
			cells = append(cells, cell(&r.Deployed[i]))
		}
		row(append(cells, inproc)...)
	}
	inproc := func(phase, format string, args ...any) string {
		if !r.ran(phase) {
			return notMeasured
		}
		return fmt.Sprintf(format, args...)
	}
	each("publish floor p50 / p99", func(d *Deployed) string {
		return fmt.Sprintf("%.3f / %.3f ms", d.PublishFloorP50Ms, d.PublishFloorP99Ms)
	}, inproc("floor", "%.3f / %.3f ms", r.PublishFloorP50Ms, r.PublishFloorP99Ms))
	each("sequential step p50 / p99", func(d *Deployed) string {
		return fmt.Sprintf("%.3f / %.3f ms", d.StepP50Ms, d.StepP99Ms)
	}, inproc("overhead", "%.3f / %.3f ms", r.StepTotalP50Ms, r.StepTotalP99Ms))
	for i, name := range []string{"orchestrator", "toolworker", "driver"} {
		label := "  " + name
		if i == 0 {
			label = "  wire per step, sent / received: " + name
		}
		each(label, func(d *Deployed) string {
			for _, w := range d.Wire {
				if w.Process == name {
					return fmt.Sprintf("%.1f msgs %.0f B / %.1f msgs %.0f B", w.SentMsgs, w.SentBytes, w.ReceivedMsgs, w.ReceivedBytes)
				}
			}
			return notMeasured
		}, "")
	}
	var concurrency []int
	for _, t := range r.Deployed[0].Throughput {
		concurrency = append(concurrency, t.Concurrency)
	}
	local := func(c int) (Throughput, bool) {
		for _, t := range r.Throughput {
			if t.Concurrency == c {
				return t, true
			}
		}
		return Throughput{}, false
	}
	for _, c := range concurrency {
		t0, _ := r.Deployed[0].at(c)
		lt, ok := local(c)
		in := notMeasured
		if ok {
			in = fmt.Sprintf("%.0f steps/s", lt.StepsPerS)
		}
		each(fmt.Sprintf("steps/s, %d×%d turns at %d", t0.Turns, t0.Steps/max(t0.Turns, 1), c), func(d *Deployed) string {
			t, _ := d.at(c)
			return fmt.Sprintf("%.0f steps/s", t.StepsPerS)
		}, in)
	}
	// CPU per step, one cell per storage: "at 50 / at 200".
	cpuCell := func(d *Deployed, of func(ProcessCPU) float64) string {
		var parts []string
		for _, t := range d.Throughput {
			parts = append(parts, fmt.Sprintf("%.3f", of(t.CPUSPerStep)*1000))
		}
		return strings.Join(parts, " / ") + " ms"
	}
	localCPU := func(of func(Throughput) float64) string {
		var parts []string
		for _, c := range concurrency {
			t, ok := local(c)
			if !ok {
				return notMeasured
			}
			parts = append(parts, fmt.Sprintf("%.3f", of(t)*1000))
		}
		return strings.Join(parts, " / ") + " ms"
	}
	at := make([]string, len(concurrency))
	for i, c := range concurrency {
		at[i] = strconv.Itoa(c)
	}
	each(fmt.Sprintf("CPU per step at %s: nats-server", strings.Join(at, " / ")),
		func(d *Deployed) string { return cpuCell(d, func(p ProcessCPU) float64 { return p.Server }) },
		"server+worker+driver "+localCPU(func(t Throughput) float64 { return t.OtherCPUSPerStep }))
	each("  orchestrator", func(d *Deployed) string { return cpuCell(d, func(p ProcessCPU) float64 { return p.Orchestrator }) },
		localCPU(func(t Throughput) float64 { return t.CPUSPerStep }))
	each("  toolworker", func(d *Deployed) string { return cpuCell(d, func(p ProcessCPU) float64 { return p.Toolworker }) }, "")
	each("  driver (this process)", func(d *Deployed) string { return cpuCell(d, func(p ProcessCPU) float64 { return p.Driver }) }, "")
	each("  all processes", func(d *Deployed) string {
		return cpuCell(d, func(p ProcessCPU) float64 { return p.Server + p.Orchestrator + p.Toolworker + p.Driver })
	}, localCPU(func(t Throughput) float64 { return t.CPUSPerStep + t.OtherCPUSPerStep }))
	wf := func(cell func(c *WorkflowCost) string) func(d *Deployed) string {
		return func(d *Deployed) string {
			if d.Workflow == nil {
				return notMeasured
			}
			return cell(d.Workflow)
		}
	}
	wfLocal := func(cell func(c *WorkflowCost) string) string {
		if !r.ran("workflow") || r.Workflow == nil {
			return notMeasured
		}
		return cell(r.Workflow)
	}
	gap := func(c *WorkflowCost) string { return fmt.Sprintf("%.3f / %.3f ms", c.GapP50Ms, c.GapP99Ms) }
	ends := func(c *WorkflowCost) string { return fmt.Sprintf("%.3f / %.3f ms", c.FirstGapsP50Ms, c.LastGapsP50Ms) }
	mean := func(c *WorkflowCost) string { return fmt.Sprintf("%.3f ms", c.OverheadMs) }
	tasks := 0
	if d := r.Deployed[0].Workflow; d != nil {
		tasks = d.Tasks
	}
	each(fmt.Sprintf("workflow of %d tasks, per task p50 / p99", tasks), wf(gap), wfLocal(gap))
	each("  first 10 / last 10 tasks, p50", wf(ends), wfLocal(ends))
	parts := func(c *WorkflowCost) string {
		return fmt.Sprintf("%.3f + %.3f + %.3f ms", c.EndP50Ms, c.GateP50Ms, c.StartP50Ms)
	}
	each("  end + gate + start, p50", wf(parts), wfLocal(parts))
	each("  mean beyond the turns", wf(mean), wfLocal(mean))
	_ = tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head = []string{"deployed target"}
	for _, d := range r.Deployed {
		head = append(head, d.label())
	}
	row(head...)
	for _, t := range deployedTargets {
		cells := []string{t.what}
		for i := range r.Deployed {
			met, got, ok := t.judge(&r.Deployed[i])
			switch {
			case !ok:
				cells = append(cells, notMeasured)
			case met:
				cells = append(cells, "yes, "+got)
			default:
				cells = append(cells, "no, "+got)
			}
		}
		row(cells...)
	}
	_ = tw.Flush()
}
