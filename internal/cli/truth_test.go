package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSubmitSaysWhenRejected: a submission the orchestrator rejects exits 1
// with its reason (several agents and none named, a mistyped agent, a turn
// id in use); --no-wait returns once the inbox has it, as before.
func TestSubmitSaysWhenRejected(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--turn", "noagent", "hi"}, "agent"},
		{[]string{"submit", "--turn", "typo", "--agent", "Planner", "hi"}, "Planner"},
	} {
		code, out, errOut := e.jetloop(tc.args...)
		turn := tc.args[2]
		if code != ExitStopped || strings.TrimSpace(out) != turn || !strings.Contains(errOut, "rejected") || !strings.Contains(errOut, tc.want) {
			t.Errorf("jetloop %v: exit %d, want %d, a turn id on stdout and the reason on stderr\nstdout: %s\nstderr: %s",
				tc.args, code, ExitStopped, out, errOut)
		}
	}
	// --no-wait: exit 0 whatever becomes of it; the log says.
	e.mustRun(ExitOK, "submit", "--no-wait", "--turn", "nowait", "--agent", "Planner", "hi")
	if fin := e.finished("nowait"); fin.StopReason != "rejected" {
		t.Fatalf("nowait finished %s", fin.StopReason)
	}

	// A turn that ran: a different submission under its id would be
	// dropped by the inbox as a duplicate, or be a dead letter, and its log
	// would not say: submit refuses it. The same submission again changes
	// nothing and is fine.
	hi := e.script("hi.yaml", "responses: [{text: hello}]\n")
	e.mustRun(ExitOK, "submit", "--watch", "--agent", "Wide", "--script", hi, "--turn", "used", "hi")
	code, _, errOut := e.jetloop("submit", "--agent", "Wide", "--script", hi, "--turn", "used", "something else")
	if code != ExitStopped || !strings.Contains(errOut, "rejected") || !strings.Contains(errOut, "exists already") {
		t.Fatalf("a reused turn id: exit %d, want %d\nstderr: %s", code, ExitStopped, errOut)
	}
	if code, _, errOut := e.jetloop("submit", "--agent", "Wide", "--script", hi, "--turn", "used", "hi"); code != ExitOK ||
		!strings.Contains(errOut, "nothing changed") {
		t.Fatalf("a re-sent submission: exit %d\nstderr: %s", code, errOut)
	}

	// A rejected turn's id is free again, but a valid submission within the
	// inbox's duplicate window is dropped: submit says so.
	code, _, errOut = e.jetloop("submit", "--agent", "Wide", "--script", hi, "--turn", "typo", "hi")
	if code != ExitStopped || !strings.Contains(errOut, "duplicate") {
		t.Fatalf("a rejected turn's id again: exit %d\nstderr: %s", code, errOut)
	}
}

// TestSubmitWithoutOrchestrator: a turn that does not start within
// --start-timeout stays in the inbox; submit says so and exits 0.
func TestSubmitWithoutOrchestrator(t *testing.T) {
	e := newEnv(t)
	e.stopO()
	code, out, errOut := e.jetloop("submit", "--start-timeout", "300ms", "--turn", "later", "--agent", "Wide", "hi")
	if code != ExitOK || strings.TrimSpace(out) != "later" || !strings.Contains(errOut, "has not started") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestWatchUnknownTurn: watch of a turn with no events says so and exits 1
// (with --wait it waits: TestWatchWaitsForATurnToStart).
func TestWatchUnknownTurn(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	code, _, errOut := e.jetloop("watch", "nosuch")
	if code != ExitStopped || !strings.Contains(errOut, `no turn "nosuch"`) || !strings.Contains(errOut, "--wait") {
		t.Fatalf("watch nosuch: exit %d\nstderr: %s", code, errOut)
	}
	if d := time.Since(start); d < watchUnknownAfter {
		t.Fatalf("watch gave up after %s, before %s", d, watchUnknownAfter)
	}

}

// TestFlagsAfterArguments: flags may follow the arguments, and -- ends them.
func TestFlagsAfterArguments(t *testing.T) {
	e := newEnv(t)
	hi := e.script("hi.yaml", "responses: [{text: hello}]\n")
	e.mustRun(ExitOK, "submit", "hello", "there", "--agent", "Wide", "--script", hi, "--turn", "after")
	if fin := e.finished("after"); fin.StopReason != "completed" {
		t.Fatalf("finished %s", fin.StopReason)
	}
	// After --, a word that looks like a flag is text, and a flag's
	// value may be "--".
	e.mustRun(ExitOK, "submit", "--agent", "Wide", "--script", hi, "--turn", "dashes", "--metadata", "k=v", "--", "--not-a-flag")
	if log := e.log("dashes"); !strings.Contains(string(log[0].Data), `"content":"--not-a-flag"`) {
		t.Fatalf("turn.started: %s", log[0].Data)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(path, []byte("---\nname: A\nmodel: script\ntols: [echo]\nsteps: ten\n---\nhi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What will not run as written fails the check.
	out := e.mustRun(1, "agents", "check", path)
	if !strings.Contains(out, `error: unknown key "tols"`) || !strings.Contains(out, `error: steps: "ten" is not an integer`) {
		t.Fatalf("agents check printed:\n%s", out)
	}
	// Warnings alone pass a plain check and fail a strict one, whichever
	// side of the path --strict stands.
	unusual := filepath.Join(dir, "unusual.md")
	if err := os.WriteFile(unusual, []byte("---\nname: A\nmodel: script\ntools: echo\n---\nhi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := e.mustRun(ExitOK, "agents", "check", unusual); !strings.Contains(out, `warning: tools: "echo" is not a list`) {
		t.Fatalf("agents check printed:\n%s", out)
	}
	e.mustRun(1, "agents", "check", unusual, "--strict")
	e.mustRun(1, "agents", "--strict", "check", unusual)
	e.mustRun(ExitOK, "agents", "check", "--strict", filepath.Join(e.dir, "AGENTS.md"))
}

// TestGlobalFlagsBeforeTheCommand: the flags every command takes may stand
// before the command too, as jetloop help says and as `nats --server URL
// stream ls` takes them.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	e := newEnv(t)
	url := e.srv.ClientURL()
	hi := e.script("hi.yaml", "responses: [{text: hello}]\n")
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Main(t.Context(), args, &out, &errOut); code != want {
			t.Fatalf("jetloop %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String()
	}
	run(ExitOK, "--nats", url, "--no-color", "submit", "--watch", "--agent", "Wide", "--script", hi, "--turn", "before", "hi")
	if out := run(ExitOK, "--nats="+url, "turns"); !strings.Contains(out, "before") {
		t.Fatalf("turns:\n%s", out)
	}
	if out := run(ExitOK, "--nats", url, "streams", "check"); !strings.Contains(out, "matches") {
		t.Fatalf("streams check:\n%s", out)
	}
	if out := run(ExitOK, "--nats", url, "help", "turns"); !strings.Contains(out, "usage: jetloop turns") {
		t.Fatalf("help turns:\n%s", out)
	}
	run(ExitOK, "--nats", url, "--help")
	run(ExitUsage, "--nats", url)
	run(ExitUsage, "--no-such-flag", "turns")
}

// TestHelpEverywhere: --help on every command exits 0 and prints its forms,
// arguments included, on stdout; a flag error exits 2 with the forms.
func TestHelpEverywhere(t *testing.T) {
	for _, s := range specs {
		for _, help := range []string{"--help", "-h"} {
			var out, errOut bytes.Buffer
			code := Main(context.Background(), []string{s.name, help}, &out, &errOut)
			if code != ExitOK || errOut.Len() > 0 {
				t.Errorf("jetloop %s %s: exit %d\n%s", s.name, help, code, errOut.String())
			}
			for _, syn := range s.synopses {
				if want := strings.TrimSpace("jetloop " + s.name + " " + syn); !strings.Contains(out.String(), want) {
					t.Errorf("jetloop %s %s does not show %q:\n%s", s.name, help, want, out.String())
				}
			}
		}
		// Help after an argument is help too.
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), []string{s.name, "x", "--help"}, &out, &errOut); code != ExitOK {
			t.Errorf("jetloop %s x --help: exit %d", s.name, code)
		}
		out.Reset()
		errOut.Reset()
		if code := Main(context.Background(), []string{s.name, "--no-such-flag"}, &out, &errOut); code != ExitUsage ||
			!strings.Contains(errOut.String(), "usage: jetloop "+s.name) {
			t.Errorf("jetloop %s --no-such-flag: exit %d\n%s", s.name, code, errOut.String())
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"help", "submit"}} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), args, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "usage: jetloop") {
			t.Errorf("jetloop %v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), nil, &out, &errOut); code != ExitUsage || !strings.Contains(errOut.String(), "commands:") {
		t.Errorf("jetloop alone: exit %d\n%s", code, errOut.String())
	}
	// A command's plumbing (bench's flags for its own child process) is
	// not offered to people; --nats shows one default.
	out.Reset()
	Main(context.Background(), []string{"bench", "--help"}, &out, &errOut)
	if strings.Contains(out.String(), "internal:") || !strings.Contains(out.String(), "--quick") {
		t.Errorf("bench --help:\n%s", out.String())
	}
	t.Setenv("NATS_URL", "nats://elsewhere:4222")
	out.Reset()
	Main(context.Background(), []string{"help"}, &out, &errOut)
	if strings.Contains(out.String(), "elsewhere") {
		t.Errorf("help shows NATS_URL as a default:\n%s", out.String())
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), args, &out, &errOut); code != ExitOK || !strings.HasPrefix(out.String(), "jetloop ") ||
			!strings.Contains(out.String(), "go1.") {
			t.Errorf("jetloop %v: exit %d: %q %q", args, code, out.String(), errOut.String())
		}
	}
}

// TestCLIDoc: docs/cli.md is the commands' own help, as CLIDoc writes it.
// go test ./internal/cli -run TestCLIDoc -update rewrites it.
func TestCLIDoc(t *testing.T) {
	// The defaults that come from the environment are documented as
	// they read without it.
	for _, v := range []string{"NATS_URL", "NATS_USER", "NATS_CA"} {
		t.Setenv(v, "")
	}
	var b bytes.Buffer
	CLIDoc(&b)
	path := filepath.Join("..", "..", "docs", "cli.md")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, b.Bytes()) {
		t.Fatalf("docs/cli.md is not the commands' help: run go test ./internal/cli -run TestCLIDoc -update")
	}
}
