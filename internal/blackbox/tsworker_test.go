package blackbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The TypeScript example worker, examples/worker-ts, and its one tool.
const tsTool = "word_count"

var (
	tsOnce     sync.Once
	tsBuildErr error
)

// tsWorkerDir builds the TypeScript worker once per test run and returns its
// directory. Without its node_modules (npm ci) the test fails under CI=true
// and is skipped elsewhere.
func tsWorkerDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts the binaries and the TypeScript worker")
	}
	dir := filepath.Join(repoRoot(t), "examples", "worker-ts")
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
	_, node := exec.LookPath("node")
	if _, err := os.Stat(tsc); err != nil || node != nil {
		msg := "the TypeScript worker needs node and its packages: run `npm ci --prefix examples/worker-ts` (make test does)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tsOnce.Do(func() {
		out, err := exec.Command(tsc, "-p", dir).CombinedOutput()
		if err != nil {
			tsBuildErr = fmt.Errorf("tsc: %v\n%s", err, out)
		}
	})
	if tsBuildErr != nil {
		t.Fatal(tsBuildErr)
	}
	return dir
}

// startTS starts the TypeScript worker named name on the server at url.
func startTS(t *testing.T, url, name string, args ...string) *process {
	t.Helper()
	dir := tsWorkerDir(t)
	cmd := exec.Command("node", append([]string{"dist/main.js", "--nats", url, "--name", name}, args...)...)
	cmd.Dir = dir
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker-ts %s output:\n%s", name, out.String())
		}
	})
	return &process{cmd: cmd, out: out}
}

// TestTSWorkerServesATurn runs a turn whose scripted model calls the
// TypeScript worker's tool, with the real orchestrator, and checks that the
// worker made its streams and buckets exactly as the Go processes do.
func TestTSWorkerServesATurn(t *testing.T) {
	tsWorkerDir(t)
	srv := testkit.Start(t)
	url := srv.ClientURL()
	root := repoRoot(t)
	nc, js := srv.Connect(t)
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	answers := record(t, nc, events.DirectResultSubject(tsTool, "*"), events.ToolResultSubject(tsTool, "*"))

	// The worker starts first, on an empty server: it creates what it uses.
	worker := startTS(t, url, "ts-1")
	testkit.WaitTool(t, js, tsTool)
	sameStreams(t, js)

	orch := start(t, root, "orchestrator", "--nats", url, "--agents", "data/AGENTS.md", "--allow-scripts")
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(`responses:
  - text: "Counting."
    tool_calls:
      - {name: word_count, arguments: {text: "the quick brown fox\njumps"}}
  - text: "Five words."
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, root, "submit", "--nats", url, "--watch", "--turn", "ts-turn", "--agent", "General",
		"--script", script, "How many words?")
	if code != 0 {
		t.Fatalf("submit --watch exited %d:\n%s", code, out)
	}

	var completed []events.ToolCompletedData
	var finished events.TurnFinishedData
	for _, e := range turnLog(t, js, "ts-turn") {
		switch e.Type {
		case "tool.completed":
			var d events.ToolCompletedData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			completed = append(completed, d)
		case "turn.finished":
			if err := json.Unmarshal(e.Data, &finished); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Its result went to the turn's owner, not through the inbox.
	handed := func(o observed) bool { return strings.HasPrefix(o.subject, events.DirectPrefix) }
	answers.wait(t, "the result handed to the turn's owner", handed)
	if answers.count(handed) != 1 || answers.count(func(observed) bool { return true }) != 1 {
		t.Errorf("the worker's answers: %v, want one handed to the turn's owner", answers)
	}
	want := events.ToolCompletedData{Name: tsTool, Output: "5 words, 2 lines, 25 characters", Worker: "ts-1", Attempts: 1}
	if len(completed) != 1 {
		t.Fatalf("tool.completed events: %+v, want one", completed)
	}
	got := completed[0]
	got.CallID, got.DurationMs = "", 0
	if got != want {
		t.Fatalf("tool.completed = %+v, want %+v", got, want)
	}
	if finished.StopReason.String() != "completed" || finished.Output != "Five words." {
		t.Fatalf("turn.finished = %+v", finished)
	}

	if code := worker.stop(t); code != 0 {
		t.Fatalf("worker-ts exited %d after SIGTERM", code)
	}
	// Its last worker gone, the tool is withdrawn at once, not at its TTL.
	if _, err := kvGet(t, js, events.BucketTools, tsTool); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("%s still advertised after its only worker stopped: %v", tsTool, err)
	}
	if _, err := kvGet(t, js, "JETLOOP_WORKERS", tsTool+".ts-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the worker's presence key outlived it: %v", err)
	}
	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
}

// sameStreams compares the streams, buckets and consumer the TypeScript
// worker created with those the Go tool worker creates on a server of its
// own: whichever process starts first, the configuration is the same.
func sameStreams(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ref := testkit.Start(t)
	_, refJS := ref.Connect(t)
	goWorker := start(t, t.TempDir(), "toolworker", "--nats", ref.ClientURL(), "--root", ".", "--tools", "echo")
	testkit.WaitTool(t, refJS, "echo")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{events.StreamInbox, events.StreamJobs, events.StreamDead, "KV_" + events.BucketTools, "KV_JETLOOP_WORKERS"} {
		got, want := streamConfig(ctx, t, js, name), streamConfig(ctx, t, refJS, name)
		if got != want {
			t.Errorf("stream %s differs from the Go worker's:\n got: %s\nwant: %s", name, got, want)
		}
	}
	got, err := js.Consumer(ctx, events.StreamJobs, "tool_"+tsTool)
	if err != nil {
		t.Fatal(err)
	}
	want, err := refJS.Consumer(ctx, events.StreamJobs, "tool_echo")
	if err != nil {
		t.Fatal(err)
	}
	gotCfg, wantCfg := got.CachedInfo().Config, want.CachedInfo().Config
	wantCfg.Name, wantCfg.Durable, wantCfg.FilterSubject = gotCfg.Name, gotCfg.Durable, gotCfg.FilterSubject
	if g, w := mustJSON(t, gotCfg), mustJSON(t, wantCfg); g != w {
		t.Errorf("consumer %s differs from the Go worker's:\n got: %s\nwant: %s", gotCfg.Durable, g, w)
	}
	if code := goWorker.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
}

func streamConfig(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return mustJSON(t, s.CachedInfo().Config)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTSWorkerJobs sends jobs straight to the TypeScript worker and checks
// each answer the protocol asks for, down to the order of a result and its
// acknowledgement, which a core subscription to the ack subjects sees.
func TestTSWorkerJobs(t *testing.T) {
	tsWorkerDir(t)
	srv := testkit.Start(t)
	url := srv.ClientURL()
	nc, js := srv.Connect(t)
	wire := record(t, nc, events.ToolResultSubject("word_count", "*"), "$JS.ACK."+events.StreamJobs+".>", "jetloop.dead.>")
	// Every call takes 4 s, longer than the ack wait: only heartbeats keep
	// a job from being handed to the worker's next free slot. (Heartbeats
	// come every third of the ack wait, which leaves a loaded machine 2 s
	// of stall.)
	worker := startTS(t, url, "ts-jobs", "--ack-wait", "3s", "--delay", "4s", "--concurrency", "4")
	testkit.WaitTool(t, js, tsTool)

	soon := time.Now().Add(time.Minute)
	ok := publishJob(t, js, "t-ok", "c-ok", map[string]any{"text": "one two three"}, soon)
	bad := publishJob(t, js, "t-bad", "c-bad", map[string]any{"txt": "x"}, soon)
	late := publishJob(t, js, "t-late", "c-late", map[string]any{"text": "x"}, time.Now().Add(-time.Second))
	short := publishJob(t, js, "t-short", "c-short", map[string]any{"text": "x"}, time.Now().Add(300*time.Millisecond))

	r := wire.result(t, "c-ok")
	if r.res.Output != "3 words, 1 line, 13 characters" || r.res.IsError || r.res.Worker != "ts-jobs" ||
		r.res.Attempt != 1 || r.res.Tool != tsTool || r.res.TurnID != "t-ok" {
		t.Errorf("result of c-ok: %+v", r.res)
	}
	// The dedup id names the turn: call ids are a provider's, and some
	// reuse them across turns (docs/protocol.md, "Dedup ids").
	if id := r.header.Get(jetstream.MsgIDHeader); id != "result:t-ok:c-ok" {
		t.Errorf("result of c-ok has Nats-Msg-Id %q, want result:t-ok:c-ok", id)
	}
	// Heartbeats, then the result, then the ack, all of the first delivery.
	wire.wait(t, "the ack of c-ok", ackOf(ok, "+ACK"))
	beats, res, ack := wire.first(ackOf(ok, "+WPI")), r.index, wire.first(ackOf(ok, "+ACK"))
	if beats < 0 || beats > res || ack < res {
		t.Errorf("c-ok: heartbeat at %d, result at %d, ack at %d; want heartbeat < result < ack\n%s", beats, res, ack, wire)
	}
	if n := wire.count(func(o observed) bool { return o.ack != nil && o.ack.seq == ok && o.ack.delivered > 1 }); n > 0 {
		t.Errorf("c-ok was delivered again despite its heartbeats\n%s", wire)
	}

	if r := wire.result(t, "c-bad"); !r.res.IsError || !strings.Contains(r.res.Output, "invalid arguments") {
		t.Errorf("result of c-bad: %+v", r.res)
	}
	for _, call := range []string{"c-late", "c-short"} {
		if r := wire.result(t, call); !r.res.IsError || !strings.Contains(r.res.Output, "deadline passed") {
			t.Errorf("result of %s: %+v", call, r.res)
		}
	}
	for _, seq := range []uint64{bad, late, short} {
		wire.wait(t, fmt.Sprintf("the ack of job %d", seq), ackOf(seq, "+ACK"))
	}

	// A job that is not one: a dead letter with the reason, terminated,
	// and an error result when it names its call.
	notJSON := publishRaw(t, js, "bogus", []byte("not json"))
	noDeadline := publishRaw(t, js, "c-nodeadline", []byte(`{"turn_id":"t-inv","session_id":"t-inv","step":1,"call_id":"c-nodeadline","tool":"word_count","arguments":{}}`))
	for _, seq := range []uint64{notJSON, noDeadline} {
		wire.wait(t, fmt.Sprintf("job %d to be terminated", seq), ackOf(seq, "+TERM"))
		dead := wire.wait(t, fmt.Sprintf("the dead letter of job %d", seq), func(o observed) bool {
			return o.subject == "jetloop.dead.job" && o.header.Get("Nats-Msg-Id") == fmt.Sprintf("dead:%s:%d", events.StreamJobs, seq)
		})
		if dead.header.Get(events.HeaderError) == "" || dead.header.Get("Jetloop-Subject") != events.ToolSubject(tsTool) {
			t.Errorf("dead letter of job %d: headers %v", seq, dead.header)
		}
	}
	if r := wire.result(t, "c-nodeadline"); !r.res.IsError || !strings.Contains(r.res.Output, "invalid job") {
		t.Errorf("result of c-nodeadline: %+v", r.res)
	}

	// A cancelled turn's call stops and is acknowledged without a result.
	cancelled := publishJob(t, js, "t-cancel", "c-cancel", map[string]any{"text": "x"}, soon)
	testkit.WaitFor(t, "c-cancel to start", func() bool { return strings.Contains(worker.out.String(), "call=c-cancel") })
	if err := nc.Publish(events.CancelSubject("t-cancel"), nil); err != nil {
		t.Fatal(err)
	}
	wire.wait(t, "the ack of the cancelled call", ackOf(cancelled, "+ACK"))
	if n := wire.count(func(o observed) bool { return o.res != nil && o.res.CallID == "c-cancel" }); n != 0 {
		t.Errorf("a cancelled call was answered\n%s", wire)
	}

	// SIGTERM while a call runs: the call finishes and is answered and
	// acknowledged, then the worker withdraws and exits 0.
	drained := publishJob(t, js, "t-drain", "c-drain", map[string]any{"text": "last words"}, soon)
	testkit.WaitFor(t, "c-drain to start", func() bool { return strings.Contains(worker.out.String(), "call=c-drain") })
	if code := worker.stop(t); code != 0 {
		t.Fatalf("worker-ts exited %d after SIGTERM", code)
	}
	if r := wire.result(t, "c-drain"); r.res.IsError || r.res.Output != "2 words, 1 line, 10 characters" {
		t.Errorf("result of the drained call: %+v", r.res)
	}
	wire.wait(t, "the ack of the drained call", ackOf(drained, "+ACK"))
	if _, err := kvGet(t, js, events.BucketTools, tsTool); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("%s still advertised after its worker stopped: %v", tsTool, err)
	}
}

// TestTSWorkerFailover kills one of two TypeScript workers in the middle of
// a call whose job may be delivered only once: the other answers it with an
// error result from JetStream's max-deliveries advisory and deletes the job.
func TestTSWorkerFailover(t *testing.T) {
	tsWorkerDir(t)
	srv := testkit.Start(t)
	url := srv.ClientURL()
	nc, js := srv.Connect(t)
	wire := record(t, nc, events.ToolResultSubject("word_count", "*"))
	// The killed worker is still counted at the end: its entries outlive
	// the test, not the 15 s the workers would give them.
	p := bus.DefaultProvision(1 << 20)
	p.ToolsTTL = 10 * time.Minute
	for _, b := range p.Buckets() {
		if _, err := js.CreateKeyValue(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--max-deliver", "1", "--ack-wait", "2s", "--delay", "10m", "--concurrency", "1"}
	workers := map[string]*process{"ts-a": startTS(t, url, "ts-a", flags...), "ts-b": startTS(t, url, "ts-b", flags...)}
	testkit.WaitFor(t, "both workers to be counted", func() bool {
		e, err := kvGet(t, js, events.BucketTools, tsTool)
		var info events.ToolInfo
		return err == nil && json.Unmarshal(e, &info) == nil && info.Workers == 2
	})

	publishJob(t, js, "t-lost", "c-lost", map[string]any{"text": "x"}, time.Now().Add(10*time.Minute))
	var runner, survivor string
	testkit.WaitFor(t, "a worker to start c-lost", func() bool {
		for name, p := range workers {
			if strings.Contains(p.out.String(), "call=c-lost") {
				runner = name
			}
		}
		return runner != ""
	})
	for name := range workers {
		if name != runner {
			survivor = name
		}
	}
	if err := workers[runner].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[runner].cmd.Wait()

	r := wire.result(t, "c-lost")
	if !r.res.IsError || r.res.Worker != survivor || r.res.Attempt != 1 ||
		!strings.Contains(r.res.Output, "no worker finished the call in 1 attempts") {
		t.Errorf("result of the lost call: %+v", r.res)
	}
	testkit.WaitFor(t, "the exhausted job to leave the queue", func() bool {
		s, err := js.Stream(context.Background(), events.StreamJobs)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})

	if code := workers[survivor].stop(t); code != 0 {
		t.Fatalf("worker-ts exited %d after SIGTERM", code)
	}
	// The killed worker's presence lasts until its TTL; the one that
	// stopped has withdrawn and the count says so.
	e, err := kvGet(t, js, events.BucketTools, tsTool)
	var info events.ToolInfo
	if err != nil || json.Unmarshal(e, &info) != nil || info.Workers != 1 {
		t.Errorf("after one worker died and one stopped: %s (%v), want workers 1", e, err)
	}
}

// observed is one message a test saw on the wire, decoded where it is a
// tool result or a JetStream acknowledgement.
type observed struct {
	subject string
	header  nats.Header
	data    []byte
	res     *events.ToolResult
	ack     *ackInfo
}

// ackInfo is what an acknowledgement's subject and body say.
type ackInfo struct {
	kind      string // +ACK, +WPI, -NAK, +TERM
	seq       uint64 // the job's stream sequence
	delivered int
}

// wire keeps every message of some subjects in the order one connection
// received them.
type wire struct {
	mu   sync.Mutex
	msgs []observed
}

func record(t *testing.T, nc *nats.Conn, subjects ...string) *wire {
	t.Helper()
	// One channel for all subscriptions keeps the order the server sent.
	ch := make(chan *nats.Msg, 4096)
	for _, s := range subjects {
		sub, err := nc.ChanSubscribe(s, ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	w := &wire{}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-done:
				return
			case m := <-ch:
				o := observed{subject: m.Subject, header: m.Header, data: m.Data}
				if strings.HasPrefix(m.Subject, "jetloop.inbox.result@") {
					var r events.ToolResult
					if json.Unmarshal(m.Data, &r) == nil {
						o.res = &r
					}
				}
				o.ack = parseAck(m)
				w.mu.Lock()
				w.msgs = append(w.msgs, o)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// parseAck reads $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.… (or
// the form with a domain and account hash after ACK).
func parseAck(m *nats.Msg) *ackInfo {
	tok := strings.Split(m.Subject, ".")
	if len(tok) < 9 || tok[0] != "$JS" || tok[1] != "ACK" {
		return nil
	}
	off := 2
	if len(tok) >= 11 {
		off = 4
	}
	a := &ackInfo{kind: strings.Fields(string(m.Data) + " +ACK")[0]}
	if _, err := fmt.Sscan(tok[off+2], &a.delivered); err != nil {
		return nil
	}
	if _, err := fmt.Sscan(tok[off+3], &a.seq); err != nil {
		return nil
	}
	return a
}

// ackOf matches an acknowledgement of kind for the job at stream sequence seq.
func ackOf(seq uint64, kind string) func(observed) bool {
	return func(o observed) bool { return o.ack != nil && o.ack.seq == seq && o.ack.kind == kind }
}

func (w *wire) first(match func(observed) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.IndexFunc(w.msgs, match)
}

func (w *wire) count(match func(observed) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.msgs {
		if match(o) {
			n++
		}
	}
	return n
}

// wait returns the first message that matches, waiting for it.
func (w *wire) wait(t *testing.T, what string, match func(observed) bool) observed {
	t.Helper()
	testkit.WaitFor(t, what, func() bool { return w.first(match) >= 0 })
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.msgs[slices.IndexFunc(w.msgs, match)]
}

// seen is a tool result and its place on the wire.
type seen struct {
	res    events.ToolResult
	header nats.Header
	index  int
}

// result waits for the result of a call.
func (w *wire) result(t *testing.T, call string) seen {
	t.Helper()
	match := func(o observed) bool { return o.res != nil && o.res.CallID == call }
	o := w.wait(t, "the result of "+call, match)
	return seen{res: *o.res, header: o.header, index: w.first(match)}
}

func (w *wire) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for i, o := range w.msgs {
		fmt.Fprintf(&b, "%3d %s %s\n", i, o.subject, o.data)
	}
	return b.String()
}

// publishJob publishes a tool job for the TypeScript worker's tool the way
// an orchestrator does and returns its stream sequence.
func publishJob(t *testing.T, js jetstream.JetStream, turn, call string, args map[string]any, deadline time.Time) uint64 {
	t.Helper()
	data, err := json.Marshal(events.ToolJob{TurnID: turn, SessionID: turn, Step: 1, CallID: call, Tool: tsTool,
		Arguments: json.RawMessage(mustJSON(t, args)), Deadline: deadline.UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return publishRaw(t, js, call, data)
}

func publishRaw(t *testing.T, js jetstream.JetStream, call string, data []byte) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, events.ToolSubject(tsTool), data, jetstream.WithMsgID("tool:"+call))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func kvGet(t *testing.T, js jetstream.JetStream, bucket, key string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// TestTSWorkerAsItsDeployment runs a turn that calls the TypeScript
// worker's tool on a server with the repository's nats.conf, each process
// as its own user: the worker as exampleworker, in the examples'
// deployment account, which it reaches through the API prefix it finds.
func TestTSWorkerAsItsDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	tsWorkerDir(t)
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	url := srv.ClientURL()
	as := func(role string) []string {
		return []string{"--nats", url, "--user", role, "--password-file", filepath.Join(root, "deploy", "dev", role+".password")}
	}
	if out, code := run(t, root, append([]string{"streams"}, append(as("admin"), "apply")...)...); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	secret, err := os.ReadFile(filepath.Join(root, "deploy", "dev", "exampleworker.password"))
	if err != nil {
		t.Fatal(err)
	}
	worker := startTS(t, url, "ts-acl", "--user", "exampleworker", "--password", strings.TrimSpace(string(secret)))
	admin := dialRole(t, root, url, "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitTool(t, ajs, tsTool)
	orch := start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "data/AGENTS.md", "--allow-scripts")...)
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(`responses:
  - tool_calls:
      - {name: word_count, arguments: {text: "one two three"}}
  - text: "Three."
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, root, append(append([]string{"submit"}, as("client")...), "--watch", "--turn", "ts-acl-turn",
		"--agent", "General", "--script", script, "How many words?")...)
	if code != 0 || !strings.Contains(out, "3 words") || !strings.Contains(out, "completed") {
		t.Fatalf("submit --watch as the client exited %d:\n%s", code, out)
	}
	if code := worker.stop(t); code != 0 {
		t.Fatalf("worker-ts exited %d after SIGTERM", code)
	}
	if _, err := kvGet(t, ajs, events.BucketTools, tsTool); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("%s still advertised after its only worker stopped: %v", tsTool, err)
	}
	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	for _, o := range []string{worker.out.String(), orch.out.String(), out} {
		if strings.Contains(strings.ToLower(o), "permissions violation") {
			t.Errorf("denied something:\n%s", o)
		}
	}
}

// TestTSWorkerServesAHook runs a workflow whose policy names the hook audit,
// served by the TypeScript worker (--audit) as exampleworker on the
// repository's nats.conf: the hook is advertised under hook.audit, stores
// every task's checkpoint (the last included), answers continue under the
// protocol's message id, and is withdrawn when its worker stops.
func TestTSWorkerServesAHook(t *testing.T) {
	tsWorkerDir(t)
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	url := srv.ClientURL()
	as := func(role string) []string {
		return []string{"--nats", url, "--user", role, "--password-file", filepath.Join(root, "deploy", "dev", role+".password")}
	}
	if out, code := run(t, root, append([]string{"streams"}, append(as("admin"), "apply")...)...); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	secret, err := os.ReadFile(filepath.Join(root, "deploy", "dev", "exampleworker.password"))
	if err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "checkpoints.jsonl")
	worker := startTS(t, url, "ts-hook", "--user", "exampleworker", "--password", strings.TrimSpace(string(secret)), "--audit", audit)
	admin := dialRole(t, root, url, "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.CheckLogs(t, ajs) })
	key := events.HookKey("audit")
	testkit.WaitTool(t, ajs, key)
	v, err := kvGet(t, ajs, events.BucketTools, key)
	if err != nil {
		t.Fatal(err)
	}
	var info events.ToolInfo
	if err := json.Unmarshal(v, &info); err != nil || info.Name != "audit" || info.Workers != 1 {
		t.Fatalf("%s advertised as %s (%v), want the hook audit with 1 worker", key, v, err)
	}
	orch := start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "data/AGENTS.md", "--allow-scripts")...)
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(wf, []byte(`workflow_id: ts-hooks
agent: General
tasks:
  - {input: one, model: script, script: {responses: [{text: first}]}}
  - {input: two, model: script, script: {responses: [{text: second}]}}
policy: {hooks: [audit]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, root, append(append([]string{"workflow"}, as("client")...), "run", "--watch", wf)...)
	if code != 0 || !strings.Contains(out, "completed after 2 tasks") {
		t.Fatalf("workflow run --watch as the client exited %d:\n%s", code, out)
	}

	data, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l auditLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		stored = append(stored, fmt.Sprintf("%s:%d:%t:%d", l.WorkflowID, l.Task, l.Last, l.TaskMetrics.Steps))
	}
	if want := []string{"ts-hooks:1:false:1", "ts-hooks:2:true:1"}; !slices.Equal(stored, want) {
		t.Errorf("audit stored %v, want %v", stored, want)
	}
	var by []string
	for _, e := range turnLog(t, ajs, "ts-hooks") {
		if e.Type == events.WorkflowGated {
			var g events.WorkflowGatedData
			if err := json.Unmarshal(e.Data, &g); err != nil {
				t.Fatal(err)
			}
			if g.By == "audit" {
				by = append(by, fmt.Sprintf("%d:%s", g.Task, g.Decision))
			}
		}
	}
	if want := []string{"2:continue", "3:continue"}; !slices.Equal(by, want) {
		t.Errorf("gated by audit: %v, want %v", by, want)
	}
	// The answer went under its protocol id: the same id again is a
	// duplicate the stream drops.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := ajs.Publish(ctx, events.HookAnswerSubject("ts-hooks"),
		[]byte(`{"workflow_id":"ts-hooks","task":2,"hook":"audit","decision":"stop","reason":"again"}`),
		jetstream.WithMsgID(events.HookAnswerID("ts-hooks", 2, "audit")))
	if err != nil || !ack.Duplicate {
		t.Errorf("an answer under %s was not a duplicate: %+v, %v", events.HookAnswerID("ts-hooks", 2, "audit"), ack, err)
	}
	if out, code := run(t, root, append(append([]string{"replay"}, as("client")...), "--verify", "ts-hooks")...); code != 0 {
		t.Errorf("replay --verify ts-hooks exited %d:\n%s", code, out)
	}

	if code := worker.stop(t); code != 0 {
		t.Fatalf("worker-ts exited %d after SIGTERM", code)
	}
	if _, err := kvGet(t, ajs, events.BucketTools, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("%s still advertised after its only worker stopped: %v", key, err)
	}
	// A hook that fails (its file is a directory) ends the workflow error
	// with its message, not denied.
	bad := startTS(t, url, "ts-hook-bad", "--user", "exampleworker", "--password", strings.TrimSpace(string(secret)), "--audit", t.TempDir())
	testkit.WaitTool(t, ajs, key)
	if err := os.WriteFile(wf, []byte(`workflow_id: ts-hooks-bad
agent: General
tasks:
  - {input: one, model: script, script: {responses: [{text: first}]}}
  - {input: two, model: script, script: {responses: [{text: second}]}}
policy: {hooks: [audit]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	badOut, code := run(t, root, append(append([]string{"workflow"}, as("client")...), "run", "--watch", wf)...)
	if code == 0 || !strings.Contains(badOut, "error after 1 tasks") || !strings.Contains(badOut, "hook audit failed: EISDIR") {
		t.Errorf("a failing hook: workflow run --watch exited %d:\n%s", code, badOut)
	}
	if code := bad.stop(t); code != 0 {
		t.Fatalf("worker-ts exited %d after SIGTERM", code)
	}
	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	for _, o := range []string{worker.out.String(), bad.out.String(), orch.out.String(), out, badOut} {
		if strings.Contains(strings.ToLower(o), "permissions violation") {
			t.Errorf("denied something:\n%s", o)
		}
	}
}
