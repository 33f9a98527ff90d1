package blackbox

import (
	"net"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestServerRestart stops the one server in the middle of 100 turns and
// starts it again on its port and store (jobs kept in a file): an
// orchestrator and a tool worker process reconnect by themselves and every
// turn finishes, each tool call run once, no model call made twice but for
// the retries the logs show, no dead letter; both processes then stop
// gracefully.
//
// It caught two ways a call ran twice, both fixed: acknowledgements sent
// while the server stopped were lost (jobs are now acknowledged with the
// server's confirmation, bus.AckSure), and a model runner that could not
// publish its answer called the model again (it now publishes the answer
// it holds until it is stored).
func TestServerRestart(t *testing.T) {
	serverRestart(t, "file")
}

// TestServerRestartMemoryJobs is TestServerRestart with JETLOOP_JOBS in
// memory (`streams apply --jobs-storage memory`): the restart loses every
// job, and the orchestrator must derive those of the unfinished turns from
// their logs again.
// On a single server a memory stream does not survive a restart at all
// (the server forgets JETLOOP_JOBS itself, its consumers with it): the
// processes make them again as they found them, and the orchestrator
// re-publishes the jobs its unfinished turns wait on.
func TestServerRestartMemoryJobs(t *testing.T) {
	serverRestart(t, "memory")
}

func serverRestart(t *testing.T, jobsStorage string) {
	if testing.Short() {
		t.Skip("a server restart under two processes")
	}
	began := time.Now()
	binaries(t)
	dir := t.TempDir()
	srv := testkit.StartIn(t, dir, -1)
	port := srv.Addr().(*net.TCPAddr).Port
	url := srv.ClientURL()
	d := newDeployment(t, url)
	d.streams("--jobs-storage", jobsStorage)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	orch := d.orchestrator()
	worker := d.worker("wa")
	for _, tool := range workloadTools {
		testkit.WaitTool(t, js, tool)
	}
	const n = 100
	w := newWorkload(t, nc, js, "rs", d.dir, n)
	phase := time.Now()
	w.submit(0, n)
	w.waitDone(n / 4)
	srv.Shutdown()
	srv.WaitForShutdown()
	t.Logf("server stopped at %s after %d turns finished", time.Now().Format("15:04:05.000"), w.done())
	testkit.StartIn(t, dir, port)
	// Registered after the restart, so it runs before that server stops.
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	t.Logf("server restarted at %s after %d turns finished", time.Now().Format("15:04:05.000"), w.done())
	w.waitDone(n)
	t.Logf("%d turns in %s", n, time.Since(phase).Round(time.Millisecond))

	w.check(func(time.Time) bool { return false }, toolCalls(t, d.workers...))
	for _, p := range []*process{orch, worker} {
		if code := p.stop(t); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", p.cmd.Path, code)
		}
	}
	t.Logf("took %s in all", time.Since(began).Round(time.Millisecond))
}
