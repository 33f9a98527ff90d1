package blackbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// TestGoExamplesAsTheirUsers: the Go SDK's examples connect as users of the
// shipped nats.conf, each in its own account — go-worker as exampleworker
// (the examples' deployment, which serves invoice_total) and go-client as
// client — and find the accounts' API prefix themselves. A turn runs
// through each.
func TestGoExamplesAsTheirUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	url := srv.ClientURL()
	password := func(role string) string { return filepath.Join(root, "deploy", "dev", role+".password") }
	secret := func(role string) string {
		b, err := os.ReadFile(password(role))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	as := func(role string) []string {
		return []string{"--nats", url, "--user", role, "--password-file", password(role)}
	}
	if out, code := run(t, root, append([]string{"streams"}, append(as("admin"), "apply")...)...); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	admin := dialRole(t, root, url, "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.CheckLogs(t, ajs) })
	start(t, root, "toolworker", append(as("toolworker"), "--root", root)...)
	orch := start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "data/AGENTS.md", "--allow-scripts")...)

	build := func(name string) string {
		bin := filepath.Join(t.TempDir(), name)
		if out, err := exec.Command("go", "build", "-race", "-o", bin, "github.com/jetloop/jetloop/examples/"+name).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
		return bin
	}
	env := func(role string) []string {
		return append(os.Environ(), "NATS_URL="+url, "NATS_USER="+role, "NATS_PASSWORD="+secret(role))
	}
	gw := exec.Command(build("go-worker"))
	gwOut := &syncBuffer{}
	gw.Stdout, gw.Stderr, gw.Env = gwOut, gwOut, env("exampleworker")
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = gw.Process.Kill()
		_ = gw.Wait()
		if t.Failed() {
			t.Logf("go-worker output:\n%s", gwOut.String())
		}
	})
	testkit.WaitTool(t, ajs, "invoice_total")
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })

	out, code := run(t, root, append(append([]string{"submit"}, as("client")...), "--watch", "--agent", "General",
		"--script", "examples/go-worker/script.yaml", "--turn", "examples-worker", "What does C-42 owe?")...)
	if code != 0 || !strings.Contains(out, "C-42 owes 120.50 EUR") {
		t.Fatalf("a turn calling go-worker's tool, as the client, exited %d:\n%s", code, out)
	}

	gc := exec.Command(build("go-client"), "-agent", "General", "-script", filepath.Join(root, "examples", "go-client", "script.yaml"), "What is here?")
	gc.Env, gc.Dir, gc.Stdin = env("client"), root, strings.NewReader("README.md\n")
	if out, err := gc.CombinedOutput(); err != nil || !strings.Contains(string(out), "[completed]") {
		t.Fatalf("go-client as the client: %v\n%s", err, out)
	}
}
