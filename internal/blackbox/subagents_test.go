package blackbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
)

// TestSubagentsAsTheirUsers runs examples/subagents (a Lead that hands
// work to a Researcher and a Coder) and a workflow whose tasks delegate the
// same way, every process as the user the shipped configs give it: on
// nats.conf, with examples/go-hook's audit hook at the workflow's gates as
// the examples' deployment, and as tenant a of the multi-tenant config. A
// child's end reaches its parent only if the orchestrator may publish it;
// every turn of the tree leaves the index of unfinished turns.
func TestSubagentsAsTheirUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	t.Run("nats.conf", func(t *testing.T) {
		srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
		url := srv.ClientURL()
		password := func(role string) string { return filepath.Join(root, "deploy", "dev", role+".password") }
		as := func(role string) []string {
			return []string{"--nats", url, "--user", role, "--password-file", password(role)}
		}
		secret, err := os.ReadFile(password("exampleworker"))
		if err != nil {
			t.Fatal(err)
		}
		audit := filepath.Join(t.TempDir(), "checkpoints.jsonl")
		hooks := []string{"NATS_URL=" + url, "NATS_USER=exampleworker",
			"NATS_PASSWORD=" + strings.TrimSpace(string(secret)), "AUDIT_FILE=" + audit, "MAX_TOOL_CALLS=100"}
		runSubagents(t, root, as, hooks)
		if data, err := os.ReadFile(audit); err != nil || strings.Count(string(data), `"workflow_id":"subagents-flow"`) < 2 {
			t.Errorf("the audit hook stored %q (%v), want a checkpoint of each of the workflow's two tasks", data, err)
		}
	})
	t.Run("tenants", func(t *testing.T) {
		path := filepath.Join(root, "deploy", "tenants", "tenants.yaml")
		srv := testkit.StartConfig(t, filepath.Join(filepath.Dir(path), "nats.conf"))
		url := srv.ClientURL()
		as := func(role string) []string {
			return []string{"--nats", url, "--creds", tenants.SeedPath(path, "a", role)}
		}
		runSubagents(t, root, as, nil)
	})
}

// runSubagents provisions as admin, starts a tool worker and an
// orchestrator serving examples/subagents, and runs the Lead's turn and a
// two-task workflow of the Lead as the client, with hooks' environment (if
// any) for examples/go-hook, which then gates the workflow with its audit
// hook.
func runSubagents(t *testing.T, root string, as func(role string) []string, hooks []string) {
	cli := func(role string, cmd ...string) (string, int) {
		t.Helper()
		return run(t, root, append(append([]string{cmd[0]}, as(role)...), cmd[1:]...)...)
	}
	if out, code := cli("admin", "streams", "apply"); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	stack := &roleStack{t: t, root: root, as: as}
	_, ajs := stack.connect("admin")
	t.Cleanup(func() { testkit.CheckLogs(t, ajs) })
	worker := start(t, root, "toolworker", append(as("toolworker"), "--root", root)...)
	orch := start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "examples/subagents/AGENTS.md", "--allow-scripts")...)
	procs := []*process{worker, orch}
	policy := ""
	if hooks != nil {
		cmd := exec.Command(goHook(t))
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr, cmd.Env = out, out, append(os.Environ(), hooks...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		procs = append(procs, &process{cmd: cmd, out: out})
		testkit.WaitTool(t, ajs, events.HookKey("audit"))
		policy = "policy: {hooks: [audit]}\n"
	}
	for _, tool := range []string{"grep", "read_file", "echo"} {
		testkit.WaitTool(t, ajs, tool)
	}
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s output:\n%s", p.cmd.Path, p.out.String())
			}
		}
	})

	out, code := cli("client", "submit", "--watch", "--agent", "Lead", "--turn", "subagents-turn", "Document the hard step cap")
	if code != 0 || !strings.Contains(out, "tool.completed  Researcher ok") || !strings.Contains(out, "tool.completed  Coder ok") ||
		!strings.Contains(out, "finished: completed") {
		t.Fatalf("the Lead's turn as the client exited %d:\n%s", code, out)
	}
	wf := filepath.Join(t.TempDir(), "subagents.yaml")
	if err := os.WriteFile(wf, []byte("workflow_id: subagents-flow\nagent: Lead\ntasks:\n"+
		"  - {input: Document the hard step cap}\n  - {input: Document it again}\n"+policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := cli("client", "workflow", "run", "--watch", wf); code != 0 || !strings.Contains(out, "completed after 2 tasks") {
		t.Fatalf("a workflow of the Lead as the client exited %d:\n%s", code, out)
	}

	// Every turn of both trees has left the index of unfinished turns.
	live, err := ajs.KeyValue(context.Background(), bus.BucketLive)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the index of unfinished turns to empty", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := live.ListKeys(ctx)
		if err != nil {
			return false
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return ctx.Err() == nil && n == 0
	})
	for _, p := range procs {
		if strings.Contains(strings.ToLower(p.out.String()), "permissions violation") {
			t.Errorf("%s was denied something:\n%s", p.cmd.Path, p.out.String())
		}
	}
}
