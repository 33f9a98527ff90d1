package blackbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// TestChaos is the chaos soak: a 3-node cluster from the shipped nats.conf
// (sync always), every stream with three replicas and each node's store on
// a forgetful disk of its own; two orchestrators and three tool workers as
// their shipped users; the power-loss test's steady load of turns. Faults
// are drawn from a printed seed, one after another, each once the load has
// made progress since the last: a node, an orchestrator or a worker killed
// with SIGKILL and started again, or paused (SIGSTOP, SIGCONT) for one to
// four seconds, a node's power pulled (its disk crashed), or a node cut off
// the others for two to eight seconds (its routes, which run through the
// test's proxies, blackholed; see network). At the end it
// checks the power-loss test's invariants — no event read is gone or
// changed, every acknowledged turn ended as its script says, every log
// verifies — and that each log's seq runs without a gap or a repeat and no
// call's result or step's model answer was appended twice (two
// orchestrators may both think they own a partition after a pause: the
// appends' fencing is what must hold). A call may run twice only in the
// windows docs/reliability.md names: its worker killed or paused while its
// turn was open, or its worker unable to store the result or confirm its
// acknowledgement at once (a node's fault left the inbox or the jobs'
// consumer without a leader for the ack wait); those are counted. A call
// that a fault held up past its deadline ends in an error result the
// model reads (the turn goes on): counted, not a failure, for a turn open
// at a fault. A turn offered no worker tools (its calls end "not
// available") is a failure: the registry's entries must outlive a fault
// that kept the workers from refreshing them. A process that gives up at
// start is started again, as a supervisor would, and counted. It prints a
// table of the faults and what they cost.
//
// CHAOS_DURATION (default 40s; `make chaos` runs 5m) is how long faults are
// injected, CHAOS_SEED replays a run; -short skips it.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster on FUSE filesystems under faults")
	}
	requireFUSE(t)
	d := 40 * time.Second
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("CHAOS_DURATION=%q: %v", v, err)
		}
	}
	c := &chaos{powerLoss: newPowerLoss(t, "always", envSeed(t, "CHAOS_SEED"), 3),
		faults: map[string]int{}, excuse: map[string]string{}, faulted: map[string]bool{}}
	// The logs in four streams, whose leaders the nodes share: the layout
	// a cluster is for (docs/scaling.md).
	c.eventStreams = 4
	c.run(d)
}

// chaos is the soak's cluster, its processes and what its faults did.
type chaos struct {
	*powerLoss
	orchs, workers []*process

	faults map[string]int
	// excuse says, of a turn open while a worker was killed or paused, why
	// one of its calls may have run twice.
	excuse map[string]string
	// recovered are, for each fault, when it ended and the turns open then.
	recovered []round
	// faulted are the turns open at a fault, when it began or ended.
	faulted map[string]bool
	// restarts counts the processes that gave up at start.
	restarts int
	// everyWorker are the tool worker processes started, killed ones too.
	everyWorker []*process
}

// Why a turn's call may end in an error under faults.
const deadlineAfterFault = "past its deadline after a fault"

var faultKinds = []string{"node killed", "node paused", "node disk crashed", "node partitioned",
	"orchestrator killed", "orchestrator paused", "worker killed", "worker paused"}

func (c *chaos) orchestrator() *process {
	return start(c.t, c.dir, "orchestrator", append(c.as("orchestrator"),
		"--agents", filepath.Join(c.dir, "AGENTS.md"), "--ack-wait", "5s", "--allow-scripts")...)
}

func (c *chaos) worker(i int) *process {
	p := start(c.t, c.dir, "toolworker", append(c.as("toolworker"),
		"--root", c.dir, "--name", fmt.Sprintf("w%d", i+1), "--tools", "shell,echo", "--allow-shell",
		"--concurrency", "16", "--ack-wait", "5s")...)
	c.everyWorker = append(c.everyWorker, p)
	return p
}

// unconfirmed excuses the turns of the calls whose worker ran them and
// then could not store their result or have their job's acknowledgement
// confirmed at once (it says so in its log): a node's fault left the inbox
// or the jobs' consumer without a leader, the job's heartbeats went
// nowhere, and after the ack wait the job came again to another worker,
// which ran it again.
func (c *chaos) unconfirmed() {
	for _, p := range c.everyWorker {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if !strings.Contains(line, "ack not confirmed") && !strings.Contains(line, "cannot publish a result") {
				continue
			}
			var v struct{ Turn, Msg, Err string }
			// A workflow's task's call is excused as its workflow's.
			if json.Unmarshal([]byte(line), &v) == nil && v.Turn != "" && c.excuse[loadID(v.Turn)] == "" {
				c.excuse[loadID(v.Turn)] = fmt.Sprintf("its worker logged %q (%s)", v.Msg, v.Err)
			}
		}
	}
}

// serve waits until p serves. A process that gives up at start (its setup
// has a deadline of its own, which a cluster recovering from a fault can
// outlast) is started again with again, as a supervisor would, and counted.
func (c *chaos) serve(p *process, again func() *process) *process {
	c.t.Helper()
	for {
		gaveUp := false
		testkit.WaitFor(c.t, p.cmd.Args[0]+" to serve", func() bool {
			out := p.out.String()
			gaveUp = strings.Contains(out, `"level":"ERROR","msg":"`+filepath.Base(p.cmd.Path)+` stopped"`)
			return gaveUp || strings.Contains(out, "serving")
		})
		if !gaveUp {
			return p
		}
		c.restarts++
		c.t.Logf("%s gave up at start, started again: %s", filepath.Base(p.cmd.Path), strings.TrimSpace(p.out.String()))
		p.kill9(c.t)
		p = again()
	}
}

func (c *chaos) run(d time.Duration) {
	t := c.t
	began := time.Now()
	c.startAll()
	c.workers = []*process{c.worker(0), c.worker(1), c.worker(2)}
	c.orchs = []*process{c.orchestrator(), c.orchestrator()}
	for i := range c.workers {
		c.workers[i] = c.serve(c.workers[i], func() *process { return c.worker(i) })
	}
	for i := range c.orchs {
		c.orchs[i] = c.serve(c.orchs[i], c.orchestrator)
	}
	for _, tool := range []string{"shell", "echo"} {
		testkit.WaitTool(t, c.js, tool)
	}
	t.Logf("cluster and processes up in %s", time.Since(began).Round(time.Millisecond))
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		c.submitter(1 << 20)
	}()
	soak := time.Now()
	for time.Since(soak) < d {
		// Progress since the last fault: the cluster is back.
		done := c.reader.finishedCount()
		testkit.WaitForOr(t, "turns to finish after a fault", func() bool { return c.reader.finishedCount() >= done+3 }, c.stuck)
		c.fault(faultKinds[c.rng.IntN(len(faultKinds))])
	}
	c.mu.Lock()
	c.stop = true
	c.mu.Unlock()
	<-submitted
	turns := c.acked()
	// Every one acknowledged: a submission whose acknowledgement was lost
	// may have run too, and finished before them.
	testkit.WaitForOr(t, fmt.Sprintf("%d turns to finish", turns), func() bool { return len(c.open()) == 0 }, c.stuck)
	t.Logf("%d turns finished %s after the last fault", turns, time.Since(soak.Add(d)).Round(time.Millisecond))

	lost, changed := c.compare()
	if lost+changed > 0 {
		t.Errorf("%d events read are gone, %d changed", lost, changed)
	}
	errored := c.checkTurns(turns, func(turn, output string) string {
		if c.faulted[turn] && strings.Contains(output, "deadline") {
			return deadlineAfterFault
		}
		return ""
	})
	steps := c.checkLogs(turns)
	testkit.CheckLogs(t, c.js)
	c.unconfirmed()
	rerun, excused := c.checkLedger(turns, c.excuse, errored)
	c.report(turns, steps, lost+changed, rerun, excused, errored, time.Since(began))
}

// stuck logs the turns that have not finished, for a run that stopped.
func (c *chaos) stuck() {
	for _, turn := range c.acceptedTurns() {
		if !c.reader.isFinished(turn) {
			c.t.Logf("unfinished: %s: %s", turn, testkit.Dump(testkit.Log(c.t, c.js, turn)))
		}
	}
}

// open are the acknowledged turns that have not finished.
func (c *chaos) open() []string {
	var open []string
	for _, turn := range c.acceptedTurns() {
		if !c.reader.isFinished(turn) {
			open = append(open, turn)
		}
	}
	return open
}

// fault injects one fault of kind on a target drawn from the seed, and
// returns once what it stopped is back.
func (c *chaos) fault(kind string) {
	t := c.t
	t.Helper()
	c.faults[kind]++
	hold := time.Second + time.Duration(c.rng.IntN(3000))*time.Millisecond
	pause := func(p *process) {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		// The fault is the pause itself: how long is drawn from the seed.
		time.Sleep(hold)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	excuse := func(why string) {
		for _, turn := range c.open() {
			c.excuse[turn] = why
		}
	}
	for _, turn := range c.open() {
		c.faulted[turn] = true
	}
	var target string
	switch kind {
	case "node killed":
		m := c.machines[c.rng.IntN(len(c.machines))]
		target = m.name
		m.server.kill9(t)
		c.startServer(m)
	case "node paused":
		m := c.machines[c.rng.IntN(len(c.machines))]
		target = m.name
		pause(m.server)
	case "node disk crashed":
		m := c.machines[c.rng.IntN(len(c.machines))]
		target = m.name
		c.crashDisk(m)
		c.startServer(m)
	case "node partitioned":
		i := c.rng.IntN(len(c.machines))
		// Long enough for the others to elect leaders without it, and for
		// it to lead what it led alone for a while.
		hold *= 2
		target = fmt.Sprintf("%s for %s", c.machines[i].name, hold.Round(time.Millisecond))
		c.net.partition(i)
		time.Sleep(hold)
		c.net.heal(i)
	case "orchestrator killed":
		i := c.rng.IntN(len(c.orchs))
		target = fmt.Sprintf("orchestrator %d", i+1)
		c.orchs[i].kill9(t)
		c.orchs[i] = c.serve(c.orchestrator(), c.orchestrator)
	case "orchestrator paused":
		i := c.rng.IntN(len(c.orchs))
		target = fmt.Sprintf("orchestrator %d", i+1)
		pause(c.orchs[i])
	case "worker killed":
		i := c.rng.IntN(len(c.workers))
		target = fmt.Sprintf("w%d", i+1)
		excuse("worker " + target + " was killed")
		c.workers[i].kill9(t)
		c.workers[i] = c.serve(c.worker(i), func() *process { return c.worker(i) })
	case "worker paused":
		i := c.rng.IntN(len(c.workers))
		target = fmt.Sprintf("w%d", i+1)
		excuse(fmt.Sprintf("worker %s was paused for %s (ack wait 5s)", target, hold.Round(time.Millisecond)))
		pause(c.workers[i])
	}
	open := c.open()
	for _, turn := range open {
		c.faulted[turn] = true
	}
	c.recovered = append(c.recovered, round{kind: kind, open: open, restart: time.Now()})
	t.Logf("%s %s: %s", time.Now().Format("15:04:05.000"), kind, target)
}

// checkLogs checks what the shared checks do not say outright, of the
// logs of the load's first submissions (their workflows' tasks and their
// subagents too): seq runs 1, 2, 3 … with no gap or repeat, no event id
// twice, and no call's result or step's model answer appended twice. It
// returns the steps the turns ran.
func (c *chaos) checkLogs(turns int) int {
	steps := 0
	for i := range turns {
		for _, turn := range c.logsOf(i) {
			steps += c.checkLog(turn)
		}
	}
	return steps
}

// checkLog checks one log as checkLogs says, and returns its steps.
func (c *chaos) checkLog(turn string) (steps int) {
	t := c.t
	t.Helper()
	log := testkit.Log(t, c.js, turn)
	ids := map[string]bool{}
	answers := map[int]int{}
	for j, e := range log {
		if e.Seq != j+1 {
			t.Errorf("%s: event %d has seq %d", turn, j+1, e.Seq)
		}
		if ids[e.ID] {
			t.Errorf("%s: event id %s twice", turn, e.ID)
		}
		ids[e.ID] = true
		switch e.Type {
		case events.StepStarted:
			steps++
		case events.ModelCompleted:
			answers[e.Step]++
		}
	}
	results := map[string]int{}
	for _, r := range of[events.ToolCompletedData](t, log, events.ToolCompleted) {
		results[r.CallID]++
	}
	for call, n := range results {
		if n > 1 {
			t.Errorf("%s: the result of %s appended %d times", turn, call, n)
		}
	}
	for step, n := range answers {
		if n > 1 {
			t.Errorf("%s: step %d's model answer appended %d times", turn, step, n)
		}
	}
	return steps
}

// report prints the soak's table.
func (c *chaos) report(turns, steps, lost, rerun, excused int, errored map[string]string, took time.Duration) {
	late := 0
	for _, why := range errored {
		if why == deadlineAfterFault {
			late++
		}
	}
	// Recovery by the kind of fault, and over all.
	recovery := map[string][]time.Duration{}
	for _, rd := range c.recovered {
		for _, turn := range rd.open {
			if at, ok := c.reader.firstAfter(turn, rd.restart); ok {
				recovery[rd.kind] = append(recovery[rd.kind], at.Sub(rd.restart))
				recovery[""] = append(recovery[""], at.Sub(rd.restart))
			}
		}
	}
	quantiles := func(kind string) (p50, worst time.Duration) {
		ds := recovery[kind]
		slices.Sort(ds)
		if len(ds) == 0 {
			return 0, 0
		}
		return ds[len(ds)/2], ds[len(ds)-1]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | count | recovery p50 | recovery max |\n|---|---|---|---|\n")
	total := 0
	for _, kind := range faultKinds {
		p50, worst := quantiles(kind)
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", kind, c.faults[kind], p50.Round(100*time.Millisecond), worst.Round(100*time.Millisecond))
		total += c.faults[kind]
	}
	p50, worst := quantiles("")
	fmt.Fprintf(&b, "| **all** | %d | %s | %s |\n", total, p50.Round(100*time.Millisecond), worst.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "| (a process that gave up at start, started again) | %d | | |\n\n", c.restarts)
	fmt.Fprintf(&b, "| turns | steps | events read | lost or changed | calls run twice (excused) | turns with a call past its deadline | recovery p50 | recovery max | took |\n|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d (%d) | %d | %s | %s | %s |\n", turns, steps, c.reader.count(), lost, rerun, excused, late,
		p50.Round(time.Millisecond), worst.Round(time.Millisecond), took.Round(time.Second))
	c.t.Log(b.String())
}
