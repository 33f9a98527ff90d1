package blackbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// scaleConcurrency is each worker process's --concurrency in
// BenchmarkToolScaling: fixed, so that only the number of processes varies.
const scaleConcurrency = 8

// BenchmarkToolScaling measures how tool throughput grows with worker
// processes: 1, then 2, then 4 real toolworker processes (built without the
// race detector) share the durable consumer of sleep, each with
// --concurrency 8, while jobs of sleep {ms: 100} are published straight to
// the jobs stream the way the orchestrator does. Each sub-benchmark reports
// calls/s and its ratio to one worker (x_vs_1); the ceiling is
// workers × 8 / 100 ms = 80 calls/s per worker.
//
//	go test -run '^$' -bench BenchmarkToolScaling -benchtime 640x ./internal/blackbox/
func BenchmarkToolScaling(b *testing.B) {
	bin := b.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "github.com/jetloop/jetloop/cmd/toolworker").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	srv := testkit.Start(b)
	nc, js := srv.Connect(b)
	testkit.EnsureStreams(b, js)
	// Results are counted for the round's own turn; one of an earlier
	// round's turn (a job answered twice) fails the benchmark.
	var answered, strays atomic.Int64
	var current atomic.Pointer[string]
	sub, err := nc.Subscribe("jetloop.inbox.*.*", func(m *nats.Msg) {
		if p := current.Load(); p != nil && m.Subject == *p {
			answered.Add(1)
		} else {
			strays.Add(1)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()

	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
			_ = w.Wait()
		}
	}()
	round := 0
	var single float64
	for _, n := range []int{1, 2, 4} {
		for len(workers) < n {
			workers = append(workers, startWorker(b, bin, srv.ClientURL(), fmt.Sprintf("bench%d", len(workers)+1)))
		}
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			round++
			turn := fmt.Sprintf("bench-%d", round)
			subject := events.ToolResultSubject("sleep", turn)
			current.Store(&subject)
			answered.Store(0)
			b.ResetTimer()
			for i := range b.N {
				// Distinct call ids: a worker answers a job of a call it ran
				// (same turn and call id) with that call's result.
				job := events.ToolJob{TurnID: turn, SessionID: turn, Step: 1, CallID: fmt.Sprintf("%s-c%d", turn, i), Tool: "sleep",
					Arguments: json.RawMessage(`{"ms":100}`), Deadline: time.Now().Add(10 * time.Minute).UTC()}
				data, _ := json.Marshal(job)
				if _, err := js.PublishAsync(events.ToolSubject("sleep"), data, jetstream.WithMsgID("tool:"+turn+":"+job.CallID)); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("jobs not stored")
			}
			deadline := time.Now().Add(5 * time.Minute)
			for answered.Load() < int64(b.N) {
				if n := strays.Load(); n > 0 {
					b.Fatalf("%d results of calls of earlier rounds", n)
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d calls answered", answered.Load(), b.N)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "calls/s")
			if n == 1 {
				single = rate
			} else if single > 0 {
				b.ReportMetric(rate/single, "x_vs_1")
			}
		})
	}
}

// startWorker starts a toolworker serving sleep and waits until it serves.
func startWorker(b *testing.B, bin, url, name string) *exec.Cmd {
	b.Helper()
	cmd := exec.Command(filepath.Join(bin, "toolworker"), "--nats", url, "--root", b.TempDir(), "--name", name,
		"--tools", "sleep", "--concurrency", fmt.Sprint(scaleConcurrency))
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	testkit.WaitForOr(b, "worker "+name+" to serve", func() bool { return strings.Contains(out.String(), "serving") }, func() {
		_ = cmd.Process.Kill()
		b.Logf("worker %s:\n%s", name, out.String())
	})
	return cmd
}
