package orchestrator_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
)

// scriptAgents are the agents of the script tests: one whose own model is a
// script file of the agents directory, one whose every submission brings
// its script, one whose own script file is not a script.
const scriptAgents = `---
name: Scripted
model: script:scripts/own.yaml
---
Runs the operator's script.
---
name: Bare
model: script
---
Every submission brings its script.
---
name: Broken
model: script:notes.json
---
Its script file is something else.
`

// scriptHarness is a harness whose agents live in a directory with script
// files, good and bad, and with links, a FIFO and a directory where a
// script might be looked for.
func scriptHarness(t *testing.T) (*harness, string) {
	t.Helper()
	h := newHarness(t)
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("AGENTS.md", scriptAgents)
	write("scripts/own.yaml", "responses:\n  - tool_calls: [{name: echo, arguments: {text: own}}]\n  - text: \"the operator's script\"\n")
	write("scripts/good.yaml", "responses:\n  - text: \"a script of the agents directory\"\n")
	// Files that sit in the directory and are no scripts: what they hold
	// is no submitter's business.
	write("notes.json", `{"password": "hunter2", "api_key": "sk-secret"}`)
	write("broken.yaml", "responses:\n  - text: fine\n password: [hunter2\n")
	write("big.yaml", "responses:\n  - text: \""+strings.Repeat("x", 2<<20)+"\"\n")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	link("/etc/passwd", "passwd")
	link("/etc/jetloop-no-such-file", "nothing")
	link("/dev/zero", "zero")
	link("../"+filepath.Base(dir)+"/scripts/good.yaml", "roundabout")
	link("fifo", "to-fifo")
	link("scripts/good.yaml", "alias.yaml")
	set, _, err := agents.Load(filepath.Join(dir, "AGENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	h.Agents = set
	return h, dir
}

func scriptFile(turn, agent, name string) events.Submit {
	return events.Submit{TurnID: turn, Agent: agent, Model: "script:" + name,
		Input: []events.Message{{Role: events.RoleUser, Content: "go"}}}
}

// rejected waits for a turn's rejection and returns its error.
func (h *harness) rejected(turn string) string {
	h.t.Helper()
	log, fin := h.finished(turn)
	if len(log) != 1 || fin.StopReason != events.StopRejected || fin.Error == "" {
		h.t.Fatalf("%s: %d events, finished %+v, want only a rejection", turn, len(log), fin)
	}
	return fin.Error
}

// output waits for a turn to complete and returns its output.
func (h *harness) output(turn string) string {
	h.t.Helper()
	_, fin := h.finished(turn)
	if fin.StopReason != events.StopCompleted {
		h.t.Fatalf("%s: finished %+v, want completed", turn, fin)
	}
	return fin.Output
}

// TestScriptsAreOffByDefault: an orchestrator without WithAllowScripts
// refuses every scripted model a submission brings, its own or a fork's,
// saying how to turn scripts on, and runs the script an agent's own model
// names when the submission leaves the model alone.
func TestScriptsAreOffByDefault(t *testing.T) {
	h, _ := scriptHarness(t)
	h.worker()
	stop := h.orchestrator()
	// Turns to fork, run while scripts were on.
	h.submit(script("t-orig", "Bare", `{"responses": [
		{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"text": "done"}]}`))
	h.output("t-orig")
	h.submit(events.Submit{TurnID: "t-own-orig", Agent: "Scripted"})
	h.output("t-own-orig")
	stop()

	h.orchestrator(orchestrator.WithAllowScripts(false))
	inline := json.RawMessage(`{"responses": [{"text": "mine"}]}`)
	refused := []events.Submit{
		script("t-inline", "Bare", string(inline)),
		{TurnID: "t-inline-model", Agent: "Scripted", Model: "script", Script: inline},
		{TurnID: "t-inline-own", Agent: "Scripted", Script: inline},
		scriptFile("t-path", "Scripted", "scripts/good.yaml"),
		// Naming the agent's own script is still a submission's model.
		scriptFile("t-same", "Scripted", "scripts/own.yaml"),
		scriptFile("t-outside", "Scripted", "/etc/passwd"),
		{TurnID: "t-bare", Agent: "Bare"},
		// The fork inherits the script the original's submission carried.
		{TurnID: "t-fork", ForkedFrom: &events.ForkedFrom{TurnID: "t-orig", Step: 1}},
		{TurnID: "t-fork-model", Model: "script:scripts/good.yaml", ForkedFrom: &events.ForkedFrom{TurnID: "t-own-orig", Step: 1}},
	}
	for _, sub := range refused {
		h.submit(sub)
	}
	h.submit(events.Submit{TurnID: "t-own", Agent: "Scripted", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})
	h.submit(events.Submit{TurnID: "t-own-fork", ForkedFrom: &events.ForkedFrom{TurnID: "t-own-orig", Step: 1}})

	for _, sub := range refused {
		if got := h.rejected(sub.TurnID); got != orchestrator.ScriptsOff {
			t.Errorf("%s was rejected with %q, want %q", sub.TurnID, got, orchestrator.ScriptsOff)
		}
	}
	if !strings.Contains(orchestrator.ScriptsOff, "--allow-scripts") {
		t.Errorf("the refusal does not say how to turn scripts on: %q", orchestrator.ScriptsOff)
	}
	dead := h.deadLetters(len(refused))
	for _, d := range dead {
		if d.Header.Get(events.HeaderError) != orchestrator.ScriptsOff {
			t.Errorf("dead letter %s says %q", d.Data, d.Header.Get(events.HeaderError))
		}
	}
	// The operator's own script runs, and so does a fork that keeps it.
	if got := h.output("t-own"); got != "the operator's script" {
		t.Errorf("the agent's own script answered %q", got)
	}
	if got := h.output("t-own-fork"); got != "the operator's script" {
		t.Errorf("the fork of the agent's own script answered %q", got)
	}
}

// TestScriptFilesAreConfined: with scripts on, script:PATH reaches only
// regular files of at most 1 MiB inside the agents directory; everything
// else is refused at once, the same way whatever lies outside, and a file
// of the directory that is no script is refused without being quoted.
func TestScriptFilesAreConfined(t *testing.T) {
	h, dir := scriptHarness(t)
	h.start()

	refused := map[string]string{ // name → what the refusal must say
		"../x":                 "stay inside",
		"/etc/passwd":          "stay inside",
		"/etc/jetloop-no-file": "stay inside",
		"/dev/zero":            "stay inside",
		"scripts/../../x":      "stay inside",
		"../" + filepath.Base(dir) + "/scripts/good.yaml": "stay inside",
		"passwd":       "no readable file",
		"nothing":      "no readable file",
		"zero":         "no readable file",
		"missing.yaml": "no readable file",
		"fifo":         "a named pipe",
		"to-fifo":      "a named pipe",
		"scripts":      "a directory",
		"big.yaml":     "larger than",
		"notes.json":   "not a valid script",
		"broken.yaml":  "not a valid script (YAML syntax error on line 2)",
		"roundabout":   "no readable file",
	}
	turns := map[string]string{}
	i := 0
	for name := range refused {
		i++
		turn := fmt.Sprintf("t-bad-%d", i)
		turns[name] = turn
		h.submit(scriptFile(turn, "Bare", name))
	}
	h.submit(scriptFile("t-good", "Bare", "scripts/good.yaml"))
	h.submit(scriptFile("t-alias", "Bare", "alias.yaml"))
	h.submit(events.Submit{TurnID: "t-own", Agent: "Scripted"})
	h.submit(events.Submit{TurnID: "t-broken", Agent: "Broken"})

	got := map[string]string{}
	for name, want := range refused {
		reason := h.rejected(turns[name])
		got[name] = reason
		if !strings.Contains(reason, want) {
			t.Errorf("script:%s was refused with %q, want it to say %q", name, reason, want)
		}
		for _, secret := range []string{"hunter2", "password", "api_key", "root:", "xxxx"} {
			if strings.Contains(reason, secret) {
				t.Errorf("script:%s: the refusal %q quotes the file (%q)", name, reason, secret)
			}
		}
	}
	// Whether a file outside exists changes nothing in what a submitter is
	// told: only the name they sent differs.
	same := func(a, b string) {
		t.Helper()
		x := strings.Replace(got[a], a, "NAME", 1)
		y := strings.Replace(got[b], b, "NAME", 1)
		if x != y {
			t.Errorf("script:%s and script:%s are told apart: %q, %q", a, b, got[a], got[b])
		}
	}
	same("/etc/passwd", "/etc/jetloop-no-file")
	same("passwd", "nothing")
	same("passwd", "missing.yaml")

	if out := h.output("t-good"); out != "a script of the agents directory" {
		t.Errorf("script:scripts/good.yaml answered %q", out)
	}
	if out := h.output("t-alias"); out != "a script of the agents directory" {
		t.Errorf("a link to a script inside answered %q", out)
	}
	if out := h.output("t-own"); out != "the operator's script" {
		t.Errorf("the agent's own script answered %q", out)
	}
	// The operator's own script file is the operator's: its error says
	// what is wrong with it.
	if reason := h.rejected("t-broken"); !strings.Contains(reason, "password") {
		t.Errorf("the agent's own bad script is refused without detail: %q", reason)
	}
}

// TestScriptFileLimitIsExact: a script file of exactly 1 MiB is read, one
// byte more is not.
func TestScriptFileLimitIsExact(t *testing.T) {
	h, dir := scriptHarness(t)
	h.start()
	head := "responses:\n  - text: \"at the limit\"\n#"
	for name, size := range map[string]int{"limit.yaml": 1 << 20, "over.yaml": 1<<20 + 1} {
		doc := head + strings.Repeat("x", size-len(head)-1) + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.submit(scriptFile("t-limit", "Bare", "limit.yaml"))
	h.submit(scriptFile("t-over", "Bare", "over.yaml"))
	if out := h.output("t-limit"); out != "at the limit" {
		t.Errorf("a 1 MiB script answered %q", out)
	}
	if reason := h.rejected("t-over"); !strings.Contains(reason, "larger than") {
		t.Errorf("a script of 1 MiB + 1 byte: %q", reason)
	}
}
