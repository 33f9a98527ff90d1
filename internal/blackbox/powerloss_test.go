package blackbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/lazyfs"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	plainOnce sync.Once
	plainDir  string
	plainErr  error
)

// plainBinaries builds nats-server (the version go.mod pins) and lazyfsd
// once per test run, without the race detector: it would slow the disk the
// server syncs to, and the server is not what is tested.
func plainBinaries(t *testing.T) string {
	t.Helper()
	plainOnce.Do(func() {
		plainDir, plainErr = os.MkdirTemp("", "jetloop-plain-")
		if plainErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", plainDir+string(filepath.Separator),
			"github.com/nats-io/nats-server/v2", "github.com/jetloop/jetloop/internal/lazyfs/lazyfsd")
		if out, err := cmd.CombinedOutput(); err != nil {
			plainErr = errors.New(string(out))
		}
	})
	if plainErr != nil {
		t.Fatalf("build: %v", plainErr)
	}
	return plainDir
}

// requireFUSE skips a test where FUSE cannot be mounted, and fails it under
// CI=true, where it must run.
func requireFUSE(t *testing.T) {
	t.Helper()
	if err := lazyfs.Supported(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skipf("%v: the power-loss tests need it", err)
	}
}

// TestPowerLoss pulls the power on a server with the shipped nats.conf
// (sync_interval: always), its store on a filesystem that forgets what was
// not fsynced (internal/lazyfs), while an orchestrator and a tool worker,
// each as its shipped user, run a steady load of turns, workflows of two
// such turns and turns that start a subagent, whose tool calls append to a
// ledger outside that filesystem. In each round, at a moment
// drawn from the seed, the filesystem crashes and the server is killed
// with SIGKILL — every other round the orchestrator and the worker too —
// then all come back and the load goes on. At the end:
//   - every event the test had read is in the log, byte for byte;
//   - every submission the server acknowledged ended as its script says
//     (a workflow completed after its tasks, a parent with its child's
//     answer);
//   - every log is well-formed and verifies (CheckLogs, replay --verify);
//   - no tool call ran twice unless its worker was killed while the turn
//     was under way (those are counted and reported).
//
// It found, both fixed: after the restart the jobs stream (kept in memory)
// was gone, and the orchestrator, as its shipped user, was not allowed to
// make it again, so every turn waiting on a tool hung; and a tool worker
// started before the orchestrator exited, finding no jobs stream.
//
// POWERLOSS_ROUNDS, POWERLOSS_TURNS and POWERLOSS_SEED make it longer or
// replay a run; -short skips it.
func TestPowerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("a server on a FUSE filesystem, crashed in rounds")
	}
	requireFUSE(t)
	// 60 submissions write some 1,400 events: make test's share of time.
	rounds, turns := envInt(t, "POWERLOSS_ROUNDS", 4), envInt(t, "POWERLOSS_TURNS", 60)
	seed := envSeed(t, "POWERLOSS_SEED")
	pl := newPowerLoss(t, "always", seed, 1)
	// The seed picks the logs' layout too: one stream (the default) or four
	// (docs/protocol.md, "Where a log is stored"), so that runs cover both
	// and a seed replays its own.
	pl.eventStreams = []int{1, 4}[seed%2]
	t.Logf("the logs in %d stream(s)", pl.eventStreams)
	pl.run(rounds, turns)
}

// TestPowerLossDefaultSyncLoses is TestPowerLoss's control: the same
// server with NATS's default sync (a flush every two minutes) loses what it
// acknowledged when the power goes, and the test sees it. It is what shows
// that TestPowerLoss can fail.
func TestPowerLossDefaultSyncLoses(t *testing.T) {
	if testing.Short() {
		t.Skip("a server on a FUSE filesystem, crashed once")
	}
	requireFUSE(t)
	pl := newPowerLoss(t, "", envSeed(t, "POWERLOSS_SEED"), 1)
	pl.startAll()
	go pl.submitter(40)
	testkit.WaitFor(t, "events to be read", func() bool { return pl.reader.count() >= 150 })
	pl.crash(true)
	pl.startServer(pl.machines[0])
	lost, changed := pl.compare()
	t.Logf("control (sync_interval default): %d events read before the crash, %d lost, %d changed; %d submissions acknowledged",
		pl.reader.count(), lost, changed, pl.acked())
	if lost+changed == 0 {
		t.Fatal("with NATS's default sync a power loss lost nothing: the power-loss test cannot see a loss")
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// envSeed is the seed of a run: the variable's, or a new one, printed so a
// failure can be replayed.
func envSeed(t *testing.T, name string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(name); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
	}
	t.Logf("seed %d (%s=%d replays it)", seed, name, seed)
	return seed
}

// powerLoss is one server on a forgetful filesystem and the processes on
// it, as their shipped users.
type powerLoss struct {
	t    *testing.T
	root string
	// dir holds the agents, the servers' configurations and the ledger
	// (calls.log): everything but the stores, each on its machine's disk.
	dir string
	// url is the servers' client URLs, comma-separated.
	url      string
	rng      *rand.Rand
	machines []*machine
	// net carries a cluster's routes (nil for one server).
	net *network

	orch, worker *process
	js           jetstream.JetStream
	reader       *eventReader
	// eventStreams is how many streams hold the logs (events.Layout): 0
	// is the default.
	eventStreams int

	mu       sync.Mutex
	accepted map[string]bool
	stop     bool
}

// machine is a server and the forgetful disk its store is on.
type machine struct {
	name, backing, mnt, conf string
	fsd, server              *process
}

// newPowerLoss prepares n servers (a cluster when n > 1), each from the
// shipped nats.conf with the sync setting given ("always", or "" for
// NATS's default), each on a disk of its own, mounted.
func newPowerLoss(t *testing.T, sync string, seed uint64, n int) *powerLoss {
	t.Helper()
	binaries(t)
	pl := &powerLoss{t: t, root: repoRoot(t), dir: t.TempDir(),
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), accepted: map[string]bool{}}
	t.Cleanup(func() {
		pl.mu.Lock()
		pl.stop = true
		pl.mu.Unlock()
	})
	if err := os.WriteFile(filepath.Join(pl.dir, "AGENTS.md"), []byte(powerLossAgents), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pl.dir, "child.json"), []byte(childScript), 0o644); err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2*n)
	for i := range ports {
		ports[i] = testkit.FreePort(t)
	}
	var urls []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	pl.url = strings.Join(urls, ",")
	if n > 1 {
		pl.net = newNetwork(t, ports[n:])
	}
	for i := range n {
		m := &machine{name: fmt.Sprintf("jetloop-%d", i+1), backing: t.TempDir(), mnt: t.TempDir()}
		var cluster string
		if n > 1 {
			// Its routes go through the test's links, which can cut it off.
			// It advertises a port where nothing listens: a server that
			// learns of it from another connects by its routes only, never
			// around the links.
			cluster = fmt.Sprintf("\ncluster {\n  name: jetloop-chaos\n  listen: 127.0.0.1:%d\n  advertise: 127.0.0.1:%d\n  routes: [%s]\n}\n",
				ports[n+i], testkit.FreePort(t), strings.Join(pl.net.routes(i), ", "))
		}
		pl.writeConf(m, ports[i], sync, cluster)
		pl.mount(m)
		pl.machines = append(pl.machines, m)
	}
	return pl
}

// writeConf writes the repository's nats.conf as it is but for its port,
// its name, its store (on the machine's forgetful disk), its includes
// (relative to where it is written), what cluster adds and, for the control
// run, its sync setting.
func (pl *powerLoss) writeConf(m *machine, port int, sync, cluster string) {
	t := pl.t
	data, err := os.ReadFile(filepath.Join(pl.root, "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	// An include is relative to the file that names it.
	rel, err := filepath.Rel(pl.dir, pl.root)
	if err != nil {
		t.Fatal(err)
	}
	edits := [][2]string{
		{"listen: 127.0.0.1:4222", fmt.Sprintf("listen: 127.0.0.1:%d", port)},
		{"server_name: jetloop-1", "server_name: " + m.name},
		{`store_dir: "./.jetloop/nats"`, fmt.Sprintf("store_dir: %q", filepath.Join(m.mnt, "nats"))},
		{`include "deploy/`, fmt.Sprintf(`include "%s/deploy/`, rel)},
		{"sync_interval: always", "sync_interval: always"},
	}
	if sync != "always" {
		edits[4][1] = "# sync_interval: NATS's default"
	}
	for _, e := range edits {
		if !strings.Contains(conf, e[0]) {
			t.Fatalf("nats.conf no longer has %q: update the power-loss test", e[0])
		}
		conf = strings.ReplaceAll(conf, e[0], e[1])
	}
	m.conf = filepath.Join(pl.dir, m.name+".conf")
	if err := os.WriteFile(m.conf, []byte(conf+cluster), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mount starts the machine's lazyfsd and waits until its filesystem is
// mounted. At the end of the test it is unmounted before the directories
// go.
func (pl *powerLoss) mount(m *machine) {
	t := pl.t
	t.Helper()
	p := startPath(t, pl.dir, filepath.Join(plainBinaries(t), "lazyfsd"), "--backing", m.backing, "--mount", m.mnt)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			_ = p.cmd.Wait()
		}
		// A lazyfsd that could not unmount leaves a dead mount.
		_ = syscall.Unmount(m.mnt, syscall.MNT_DETACH)
	})
	testkit.WaitFor(t, "the filesystem to be mounted", func() bool { return strings.Contains(p.out.String(), "mounted") })
	m.fsd = p
}

// as is the connection flags of a shipped role.
func (pl *powerLoss) as(role string) []string {
	return []string{"--nats", pl.url, "--user", role, "--password-file", filepath.Join(pl.root, "deploy", "dev", role+".password")}
}

func (pl *powerLoss) startServer(m *machine) {
	t := pl.t
	t.Helper()
	p := startPath(t, pl.dir, filepath.Join(plainBinaries(t), "nats-server"), "-c", m.conf)
	testkit.WaitFor(t, m.name+" to be ready", func() bool { return strings.Contains(p.out.String(), "Server is ready") })
	m.server = p
}

// crashDisk pulls the power on a machine: its filesystem drops what was
// not synced and freezes, its server is killed, and so are the processes
// also names, and the filesystem is mounted again on what it had synced.
// Nothing is started again.
func (pl *powerLoss) crashDisk(m *machine, also ...*process) {
	t := pl.t
	t.Helper()
	_ = m.fsd.cmd.Process.Signal(syscall.SIGUSR1)
	testkit.WaitFor(t, "the filesystem to crash", func() bool { return strings.Contains(m.fsd.out.String(), "crashed") })
	m.server.kill9(t)
	for _, p := range also {
		p.kill9(t)
	}
	_ = m.fsd.cmd.Process.Signal(syscall.SIGTERM)
	if err := m.fsd.cmd.Wait(); err != nil {
		t.Fatalf("lazyfsd: %v\n%s", err, m.fsd.out.String())
	}
	pl.mount(m)
}

// startProcesses starts the tool worker and the orchestrator together, as
// a machine's boot does, and waits until both serve: the worker first, so
// that it finds no jobs stream after a restart lost it, and must wait for
// the orchestrator to make it again.
func (pl *powerLoss) startProcesses() {
	pl.worker = start(pl.t, pl.dir, "toolworker", append(pl.as("toolworker"),
		"--root", pl.dir, "--name", "w", "--tools", "shell,echo", "--allow-shell", "--concurrency", "16", "--ack-wait", "5s")...)
	pl.orch = start(pl.t, pl.dir, "orchestrator", append(pl.as("orchestrator"),
		"--agents", filepath.Join(pl.dir, "AGENTS.md"), "--ack-wait", "5s", "--allow-scripts")...)
	for _, p := range []*process{pl.worker, pl.orch} {
		testkit.WaitFor(pl.t, p.cmd.Args[0]+" to serve", func() bool { return strings.Contains(p.out.String(), "serving") })
	}
}

// startAll starts the servers, provisions them as admin (every stream
// with a replica on each) and starts the test's reader of the logs; on one
// server, the processes too.
func (pl *powerLoss) startAll() {
	t := pl.t
	t.Helper()
	for _, m := range pl.machines {
		pl.startServer(m)
	}
	password, err := os.ReadFile(filepath.Join(pl.root, "deploy", "dev", "admin.password"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(pl.url, nats.UserInfo("admin", strings.TrimSpace(string(password))),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if pl.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// A cluster answers JetStream requests once it has elected a leader.
	testkit.WaitFor(t, "JetStream to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := pl.js.AccountInfo(ctx)
		return err == nil
	})
	apply := append([]string{"streams"}, pl.as("admin")...)
	apply = append(apply, "--replicas", strconv.Itoa(len(pl.machines)), "--event-streams", strconv.Itoa(pl.eventStreams), "apply")
	if out, code := run(t, pl.dir, apply...); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	pl.reader = readEvents(t, pl.js)
	if len(pl.machines) == 1 {
		pl.startProcesses()
		for _, tool := range []string{"shell", "echo"} {
			testkit.WaitTool(t, pl.js, tool)
		}
	}
}

// powerLossAgents are the failure tests' agents, and a Parent that hands
// part of its work to a Child: a subagent whose script is childScript.
const powerLossAgents = failureAgents + `---
name: Parent
model: script
tools: [shell, echo, agent:Child]
---
Hand part of the work to Child.
---
name: Child
model: script:child.json
tools: [echo]
---
Echo, then answer.
`

const childScript = `{"responses": [
	{"text": "child one", "tool_calls": [{"name": "echo", "arguments": {"text": "child"}}]},
	{"text": "child done"}]}`

// turn is the id of the load's i-th submission: a turn's, or a workflow's.
func (pl *powerLoss) turn(i int) string { return fmt.Sprintf("pl-%03d", i) }

// What the load's submissions are: of every five, three turns, a workflow
// and a turn that starts a subagent.
type loadKind int

const (
	plainTurn loadKind = iota
	workflowRun
	parentTurn
)

func kindOf(i int) loadKind {
	switch i % 5 {
	case 1:
		return workflowRun
	case 3:
		return parentTurn
	}
	return plainTurn
}

// isLoadID says whether a log's id is one the load submitted, not a
// workflow's task or a subagent.
func isLoadID(id string) bool { return strings.HasPrefix(id, "pl-") && strings.Count(id, "-") == 1 }

// loadID is the submission a log belongs to: a workflow's task's turn
// (<workflow_id>-<task>) belongs to its workflow.
func loadID(id string) string {
	if strings.HasPrefix(id, "pl-") && strings.Count(id, "-") == 2 {
		return id[:strings.LastIndexByte(id, '-')]
	}
	return id
}

// script is a turn's, named label: a step that calls shell, one that calls
// shell and echo at once, then the answer. Each shell call appends its
// name to the ledger (<label>/<n>), so every execution leaves a line. A
// parent calls Child instead of echo.
func script(label string, parent bool) string {
	shell := func(n int) string {
		return fmt.Sprintf(`{"name": "shell", "arguments": {"command": "echo %s/%d >> calls.log"}}`, label, n)
	}
	other := fmt.Sprintf(`{"name": "echo", "arguments": {"text": "%s"}}`, label)
	if parent {
		other = fmt.Sprintf(`{"name": "Child", "arguments": {"task": "help %s"}}`, label)
	}
	return fmt.Sprintf(`{"responses": [
		{"text": "%[1]s one", "tool_calls": [%[2]s]},
		{"text": "%[1]s two", "tool_calls": [%[3]s, %[4]s]},
		{"text": "%[1]s done"}]}`, label, shell(1), shell(2), other)
}

// workflowTasks is how many tasks each of the load's workflows runs.
const workflowTasks = 2

// taskLabel names a workflow's k-th task (from 1) in its script and the
// ledger.
func taskLabel(workflow string, k int) string { return fmt.Sprintf("%s-t%d", workflow, k) }

// labels are the scripts a submission of the load runs, in order.
func (pl *powerLoss) labels(i int) []string {
	id := pl.turn(i)
	if kindOf(i) != workflowRun {
		return []string{id}
	}
	var out []string
	for k := 1; k <= workflowTasks; k++ {
		out = append(out, taskLabel(id, k))
	}
	return out
}

// submission is the load's i-th: its subject and data.
func (pl *powerLoss) submission(i int) (string, []byte) {
	id := pl.turn(i)
	input := []events.Message{{Role: events.RoleUser, Content: "go"}}
	switch kindOf(i) {
	case workflowRun:
		var tasks []events.Task
		for _, label := range pl.labels(i) {
			tasks = append(tasks, events.Task{Input: json.RawMessage(`"go"`), Model: "script",
				Script: json.RawMessage(script(label, false))})
		}
		data, _ := json.Marshal(events.WorkflowSubmit{WorkflowID: id, Agent: "Any", Tasks: tasks})
		return events.SubjectWorkflow, data
	case parentTurn:
		data, _ := json.Marshal(events.Submit{TurnID: id, Agent: "Parent", Model: "script",
			Script: json.RawMessage(script(id, true)), Input: input})
		return events.SubjectSubmit, data
	}
	data, _ := json.Marshal(events.Submit{TurnID: id, Agent: "Any", Model: "script",
		Script: json.RawMessage(script(id, false)), Input: input})
	return events.SubjectSubmit, data
}

// submitter submits n turns and workflows, at most 16 unfinished at a
// time, each sent again until the server acknowledges it (the same id: a
// second copy is dropped as a duplicate). It runs beside the test and
// stops with it.
func (pl *powerLoss) submitter(n int) {
	for i := range n {
		turn := pl.turn(i)
		subject, data := pl.submission(i)
		for {
			if pl.stopped() {
				return
			}
			if i-pl.reader.finishedCount() >= 16 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := pl.js.Publish(ctx, subject, data, jetstream.WithMsgID(turn))
			cancel()
			if err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		pl.mu.Lock()
		pl.accepted[turn] = true
		pl.mu.Unlock()
	}
}

func (pl *powerLoss) stopped() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.stop
}

func (pl *powerLoss) acked() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.accepted)
}

// crash pulls the power on the one machine: with all, the orchestrator
// and the worker go with the server.
func (pl *powerLoss) crash(all bool) {
	pl.t.Helper()
	if all {
		pl.crashDisk(pl.machines[0], pl.orch, pl.worker)
		return
	}
	pl.crashDisk(pl.machines[0])
}

// round is what one crash did, for the report and the checks.
type round struct {
	all bool
	// kind is the chaos soak's fault.
	kind string
	// open are the turns submitted and unfinished when the power went.
	open     []string
	restart  time.Time
	recovery []time.Duration
}

// run runs rounds crashes over a load of turns, then waits for every turn
// and checks them.
func (pl *powerLoss) run(rounds, turns int) {
	t := pl.t
	began := time.Now()
	pl.startAll()
	go pl.submitter(turns)
	var rs []*round
	for r := range rounds {
		// A moment drawn from the seed: a number of events read, somewhere
		// in this round's share of the load (a submission writes some 20
		// events or more, its workflow's tasks and its subagent counted).
		per := 19 * turns / rounds
		target := r*per + per/4 + pl.rng.IntN(per/2)
		testkit.WaitFor(t, fmt.Sprintf("%d events read", target), func() bool { return pl.reader.count() >= target })
		rd := &round{all: r%2 == 1}
		for _, turn := range pl.acceptedTurns() {
			if !pl.reader.isFinished(turn) {
				rd.open = append(rd.open, turn)
			}
		}
		read := pl.reader.count()
		pl.crash(rd.all)
		pl.startServer(pl.machines[0])
		rd.restart = time.Now()
		if rd.all {
			pl.startProcesses()
		}
		rs = append(rs, rd)
		t.Logf("round %d: power lost after %d events read, %d turns open, every process killed: %v", r+1, read, len(rd.open), rd.all)
	}
	testkit.WaitForOr(t, fmt.Sprintf("%d turns to finish", turns), func() bool { return pl.reader.finishedCount() >= turns }, func() {
		for i := range turns {
			if turn := pl.turn(i); !pl.reader.isFinished(turn) {
				t.Logf("unfinished: %s: %s", turn, testkit.Dump(testkit.Log(t, pl.js, turn)))
			}
		}
	})
	lost, changed := pl.compare()
	if lost+changed > 0 {
		t.Errorf("%d events read before a crash are gone, %d changed", lost, changed)
	}
	pl.checkTurns(turns, nil)
	testkit.CheckLogs(t, pl.js)
	pl.verify(rs)
	excuse := map[string]string{}
	for _, rd := range rs {
		if rd.all {
			for _, turn := range rd.open {
				excuse[turn] = "its worker was killed"
			}
		}
	}
	rerun, excused := pl.checkLedger(turns, excuse, nil)
	var recovery []time.Duration
	for _, rd := range rs {
		for _, turn := range rd.open {
			if at, ok := pl.reader.firstAfter(turn, rd.restart); ok {
				recovery = append(recovery, at.Sub(rd.restart))
			}
		}
	}
	slices.Sort(recovery)
	p50, worst := time.Duration(0), time.Duration(0)
	if len(recovery) > 0 {
		p50, worst = recovery[len(recovery)/2], recovery[len(recovery)-1]
	}
	t.Logf("%d rounds, %d turns (%d submissions acknowledged), %d events read, 0 lost; %d tool calls ran twice, %d of them excused (their worker was killed); recovery p50 %s, max %s; took %s",
		rounds, turns, pl.acked(), pl.reader.count(), rerun, excused, p50.Round(time.Millisecond), worst.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond))
}

func (pl *powerLoss) acceptedTurns() []string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	var turns []string
	for turn := range pl.accepted {
		turns = append(turns, turn)
	}
	slices.Sort(turns)
	return turns
}

// compare reads every log as the server has it now and counts the events
// the reader had read that are gone or differ.
func (pl *powerLoss) compare() (lost, changed int) {
	t := pl.t
	t.Helper()
	now := storedEvents(t, pl.js)
	for turn, seen := range pl.reader.snapshot() {
		for seq, data := range seen {
			got, ok := now[turn][seq]
			switch {
			case !ok:
				lost++
			case string(got) != string(data):
				changed++
				if changed <= 5 {
					t.Logf("%s event %d changed:\nread   %s\nstored %s", turn, seq, data, got)
				}
			}
		}
	}
	return lost, changed
}

// storedEvents reads every event the events streams hold, by turn and seq;
// nothing when they are gone.
func storedEvents(t *testing.T, js jetstream.JetStream) map[string]map[int][]byte {
	t.Helper()
	out := map[string]map[int][]byte{}
	var layout events.Layout
	found := true
	testkit.WaitFor(t, "the events streams' layout", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		layout, err = bus.FindLayout(ctx, js)
		found = !errors.Is(err, jetstream.ErrStreamNotFound)
		return err == nil || !found
	})
	if !found {
		return out
	}
	for _, name := range layout.Names() {
		var stream jetstream.Stream
		var info *jetstream.StreamInfo
		testkit.WaitFor(t, "the state of "+name, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var err error
			if stream, err = js.Stream(ctx, name); err != nil {
				return false
			}
			info, err = stream.Info(ctx)
			return err == nil
		})
		// Gets from the leader: a direct get may be answered by a replica
		// still catching up after a fault, which has not stored what the
		// leader acknowledged (bus.leaderReads), and the event would look lost.
		stream.CachedInfo().Config.AllowDirect = false
		for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m, err := stream.GetMsg(ctx, seq)
			cancel()
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("stored message %d of %s: %v", seq, name, err)
			}
			recordEvents(out, m.Data, nil)
		}
	}
	return out
}

// recordEvents adds the events of a stored message to a map by turn and seq,
// and calls changed for one whose seq it already has with other bytes.
func recordEvents(into map[string]map[int][]byte, data []byte, changed func(turn string, seq int, before, after []byte)) int {
	parts, err := events.Split(data)
	if err != nil {
		return 0
	}
	for _, part := range parts {
		var e struct {
			TurnID string `json:"turn_id"`
			Seq    int    `json:"seq"`
		}
		if json.Unmarshal(part, &e) != nil {
			continue
		}
		if into[e.TurnID] == nil {
			into[e.TurnID] = map[int][]byte{}
		}
		if before, ok := into[e.TurnID][e.Seq]; ok && string(before) != string(part) && changed != nil {
			changed(e.TurnID, e.Seq, before, part)
		}
		into[e.TurnID][e.Seq] = part
	}
	return len(parts)
}

// checkTurns checks that every submission ended as its script says: a
// turn completed with its answer, after its three tool calls (a parent's
// third its Child's answer); a workflow completed after its tasks, each
// task's turn so. A call that ended in an error is a failure, unless
// known names why it may (a fault held it past its deadline); it returns
// the submissions that had one, with that reason.
func (pl *powerLoss) checkTurns(turns int, known func(turn, output string) string) map[string]string {
	excused := map[string]string{}
	t := pl.t
	t.Helper()
	for i := range turns {
		id := pl.turn(i)
		if kindOf(i) != workflowRun {
			pl.checkTurn(id, id, kindOf(i) == parentTurn, known, excused)
			continue
		}
		log := testkit.Log(t, pl.js, id)
		if len(log) == 0 || log[len(log)-1].Type != events.WorkflowFinished {
			t.Errorf("workflow %s did not finish: %d events", id, len(log))
			continue
		}
		fin := of[events.WorkflowFinishedData](t, log, events.WorkflowFinished)[0]
		if fin.StopReason != events.StopCompleted || len(fin.Tasks) != workflowTasks {
			t.Errorf("workflow %s finished %s after %d tasks (%s), want completed after %d", id, fin.StopReason, len(fin.Tasks), fin.Error, workflowTasks)
		}
		for k, task := range of[events.TaskStartedData](t, log, events.TaskStarted) {
			pl.checkTurn(task.TurnID, taskLabel(id, k+1), false, func(_, output string) string {
				if known == nil {
					return ""
				}
				return known(id, output)
			}, excused)
		}
	}
	return excused
}

// checkTurn checks one turn of the load, its script's label, keeping in
// excused (by its submission) why a call of it ended in an error.
func (pl *powerLoss) checkTurn(turn, label string, parent bool, known func(turn, output string) string, excused map[string]string) {
	t := pl.t
	t.Helper()
	log := testkit.Log(t, pl.js, turn)
	if len(log) == 0 || log[len(log)-1].Type != events.TurnFinished {
		t.Errorf("%s did not finish: %d events", turn, len(log))
		return
	}
	fin := of[events.TurnFinishedData](t, log, events.TurnFinished)[0]
	if fin.StopReason != events.StopCompleted || fin.Output != label+" done" {
		t.Errorf("%s finished %s with %q (%s)", turn, fin.StopReason, fin.Output, fin.Error)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 3 {
		t.Errorf("%s: %d tool.completed, want 3", turn, len(done))
	}
	for _, d := range done {
		if !d.IsError {
			if parent && d.Name == "Child" && (d.Output != "child done" || d.ChildTurnID == "") {
				t.Errorf("%s: Child answered %q (turn %q), want %q", turn, d.Output, d.ChildTurnID, "child done")
			}
			continue
		}
		if why := ""; known != nil {
			if why = known(turn, d.Output); why != "" {
				excused[loadID(turn)] = why
				t.Logf("%s: %s: %s (%s)", turn, d.Name, d.Output, why)
				continue
			}
		}
		t.Errorf("%s: %s failed: %s", turn, d.Name, d.Output)
	}
}

// logsOf are the logs of the load's i-th submission: its own, its
// workflow's tasks' turns, its subagents'.
func (pl *powerLoss) logsOf(i int) []string {
	t := pl.t
	t.Helper()
	ids := []string{pl.turn(i)}
	for j := 0; j < len(ids); j++ {
		log := testkit.Log(t, pl.js, ids[j])
		for _, task := range of[events.TaskStartedData](t, log, events.TaskStarted) {
			ids = append(ids, task.TurnID)
		}
		for _, d := range of[events.ToolCompletedData](t, log, events.ToolCompleted) {
			if d.ChildTurnID != "" {
				ids = append(ids, d.ChildTurnID)
			}
		}
	}
	return ids
}

// verify runs jetloop replay --verify, as the viewer, on the turns open at
// each crash (a few a round): the log an operator would read back.
func (pl *powerLoss) verify(rs []*round) {
	t := pl.t
	t.Helper()
	for _, rd := range rs {
		for _, turn := range rd.open[:min(3, len(rd.open))] {
			out, code := run(t, pl.dir, append([]string{"replay"}, append(pl.as("viewer"), "--verify", turn)...)...)
			if code != 0 || !strings.Contains(out, "verified: ") {
				t.Errorf("replay --verify %s exited %d:\n%s", turn, code, out)
			}
		}
	}
}

// checkLedger counts the tool calls of the first turns the ledger shows
// ran more than once. A call may run again when its worker was killed (or
// paused past its ack wait) while its turn was open, which excuse says of
// the turn; any other is a failure.
//
// A call of a turn whose calls ended in an error checkTurns excused may
// never have run.
func (pl *powerLoss) checkLedger(turns int, excuse map[string]string, errored map[string]string) (rerun, excused int) {
	t := pl.t
	t.Helper()
	lines := map[string]int{}
	f, err := os.Open(filepath.Join(pl.dir, "calls.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines[sc.Text()]++
	}
	for i := range turns {
		turn := pl.turn(i)
		for _, label := range pl.labels(i) {
			for n := 1; n <= 2; n++ {
				call := fmt.Sprintf("%s/%d", label, n)
				switch runs := lines[call]; {
				case runs == 0 && errored[turn] == "":
					t.Errorf("%s never ran", call)
				case runs > 1 && excuse[turn] != "":
					rerun++
					excused++
					t.Logf("%s ran %d times: %s while the turn was open", call, runs, excuse[turn])
				case runs > 1:
					rerun++
					t.Errorf("%s ran %d times, its worker alive", call, runs)
				}
			}
		}
	}
	return rerun, excused
}

// eventReader reads every event as it is stored, as a viewer would, and
// keeps it: what was read must never change or go.
type eventReader struct {
	t        *testing.T
	mu       sync.Mutex
	seen     map[string]map[int][]byte
	readAt   map[string][]time.Time
	finished map[string]bool
	n        int
}

func readEvents(t *testing.T, js jetstream.JetStream) *eventReader {
	t.Helper()
	r := &eventReader{t: t, seen: map[string]map[int][]byte{}, readAt: map[string][]time.Time{}, finished: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	layout, err := bus.FindLayout(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range layout.Names() {
		r.follow(ctx, js, name)
	}
	return r
}

// follow reads stream into r with an ordered consumer, which follows it
// across a server's restart.
func (r *eventReader) follow(ctx context.Context, js jetstream.JetStream, stream string) {
	t := r.t
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetloop.events.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.n += recordEvents(r.seen, m.Data(), func(turn string, seq int, before, after []byte) {
			r.t.Errorf("%s event %d read twice, different:\n%s\n%s", turn, seq, before, after)
		})
		subj := m.Subject()
		turn := subj[strings.LastIndexByte(subj, '.')+1:]
		// A workflow's recovery is its tasks' too.
		r.readAt[loadID(turn)] = append(r.readAt[loadID(turn)], now)
		switch events.Type(m.Headers().Get(events.HeaderType)) {
		case events.TurnFinished, events.WorkflowFinished:
			r.finished[turn] = true
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
}

func (r *eventReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// finishedCount counts the load's submissions that finished.
func (r *eventReader) finishedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id := range r.finished {
		if isLoadID(id) {
			n++
		}
	}
	return n
}

func (r *eventReader) isFinished(turn string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finished[turn]
}

// firstAfter is when the first message of a turn's log was read after t.
func (r *eventReader) firstAfter(turn string, t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.readAt[turn] {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

func (r *eventReader) snapshot() map[string]map[int][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]map[int][]byte, len(r.seen))
	for turn, seen := range r.seen {
		out[turn] = maps.Clone(seen)
	}
	return out
}
