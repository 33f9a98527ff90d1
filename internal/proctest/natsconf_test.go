package proctest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLeastPrivilegeUsers runs a turn on a server with the repository's
// nats.conf, each process as its own user: the orchestrator, the tool worker
// and the jetloop client must each need nothing their user may not do. A
// denied publish or subscribe is a "Permissions Violation" in a process's
// output, and usually a turn that never finishes.
func TestLeastPrivilegeUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	opts, err := server.ProcessConfigFile(filepath.Join(root, "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// Everything as configured but where the test must differ: a free
	// loopback port and a store of its own.
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", -1, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	url := srv.ClientURL()
	as := func(user string) []string { return []string{"--nats", url, "--user", user, "--password", user} }

	worker := start(t, root, "toolworker", append(as("toolworker"), "--root", root)...)
	orch := start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "data/AGENTS.md")...)
	natstest.WaitFor(t, "the tool worker to serve", func() bool { return strings.Contains(worker.out.String(), "serving") })
	natstest.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })

	// The test reads the streams back as the orchestrator's user, which may
	// read everything.
	nc, err := nats.Connect(url, nats.UserInfo("orchestrator", "orchestrator"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natstest.CheckLogs(t, js) })
	for _, tool := range []string{"read_file", "list_dir", "grep", "echo"} {
		waitForTool(t, js, tool)
	}

	args := append([]string{"submit"}, as("client")...)
	out, code := run(t, root, append(args, "--watch", "--turn", "acl-turn", "--agent", "General",
		"--model", "script:scripts/demo.yaml", "What is this project?")...)
	if code != 0 {
		t.Fatalf("submit --watch as the client user exited %d:\n%s", code, out)
	}
	for _, cmd := range [][]string{{"turns"}, {"show", "acl-turn"}, {"replay", "--verify", "acl-turn"}, {"dead"}} {
		if out, code := run(t, root, append(append([]string{cmd[0]}, as("client")...), cmd[1:]...)...); code != 0 {
			t.Fatalf("jetloop %s as the client user exited %d:\n%s", strings.Join(cmd, " "), code, out)
		}
	}

	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	if code := worker.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
	for name, p := range map[string]*process{"orchestrator": orch, "toolworker": worker} {
		if strings.Contains(strings.ToLower(p.out.String()), "permissions violation") {
			t.Errorf("the %s was denied something:\n%s", name, p.out.String())
		}
	}
}
