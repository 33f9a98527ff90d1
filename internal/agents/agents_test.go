package agents

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/schemas"
)

// docExample is the AGENTS.md example of docs/agents.md, with its
// comments, as written there.
const docExample = `---
name: Refactorer
description: Small, safe code changes
model: openai/gpt-4.1-mini
steps: 5            # step cap; unset = only the hard ceiling MAX_STEPS = 200; 0 = text only
budget: 50          # tool calls per turn
tools: [read_file, list_dir, grep, write_file]
approval: [write_file]   # calls that wait for an approve control message
final_tools: [submit_answer]   # a call to one of these ends the turn with its result
timeout: 10m        # wall clock per turn
doom_loop: 3        # identical consecutive tool calls that stop the turn
---
You are Refactorer. …
`

// parse runs Parse on src as file "a.md" and returns the diagnostics as
// strings, which is how users see them.
func parse(t *testing.T, src string) ([]*Agent, []string) {
	t.Helper()
	agents, diags := Parse("a.md", []byte(src))
	return agents, strs(diags)
}

func strs(diags []Diagnostic) []string {
	out := make([]string, 0, len(diags))
	for _, d := range diags {
		out = append(out, d.String())
	}
	return out
}

func checkDiags(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("diagnostics:\n got %q\nwant %q", got, want)
	}
}

func intp(n int) *int { return &n }

func TestParseDocExample(t *testing.T) {
	agents, diags := parse(t, docExample)
	// submit_answer is not in tools, so the model could never call it.
	checkDiags(t, diags, []string{`a.md:9: warning: final_tools: "submit_answer" is not in tools, so it is never offered`})
	want := &Agent{
		Name:        "Refactorer",
		Description: "Small, safe code changes",
		Model:       "openai/gpt-4.1-mini",
		Steps:       intp(5),
		Budget:      50,
		Tools:       []string{"read_file", "list_dir", "grep", "write_file"},
		Approval:    []string{"write_file"},
		FinalTools:  []string{"submit_answer"},
		Timeout:     10 * time.Minute,
		DoomLoop:    3,
		Prompt:      "You are Refactorer. …",
		File:        "a.md",
		Line:        1,
		nameLine:    2,
	}
	if len(agents) != 1 || !reflect.DeepEqual(agents[0], want) {
		t.Fatalf("got %+v\nwant %+v", agents, want)
	}
	if agents[0].StepCap() != 5 {
		t.Errorf("StepCap = %d, want 5", agents[0].StepCap())
	}
}

// TestParseBoundaries covers where agents start and end: which "---" lines
// open front matter and which are prompt text.
func TestParseBoundaries(t *testing.T) {
	type agent struct {
		name   string
		line   int
		prompt string
	}
	tests := []struct {
		name  string
		src   string
		want  []agent
		diags []string
	}{
		{
			name: "several agents in one file",
			src:  "---\nname: A\n---\nFirst.\n\n---\nname: B\nmodel: script\n---\n  Second,\n  two lines.  \n---\nname: C\n---\n",
			want: []agent{{"A", 1, "First."}, {"B", 6, "Second,\n  two lines."}, {"C", 12, ""}},
		},
		{
			name: "a horizontal rule stays in the prompt",
			src:  "---\nname: A\n---\nIntro.\n\n---\n\nMore.\n---\nname: B\n---\nb\n",
			want: []agent{{"A", 1, "Intro.\n\n---\n\nMore."}, {"B", 9, "b"}},
		},
		{
			name: "a mapping without a name stays in the prompt",
			src:  "---\nname: A\n---\nIntro.\n---\ntitle: Rules\nsize: 3\n---\nEnd.\n",
			want: []agent{{"A", 1, "Intro.\n---\ntitle: Rules\nsize: 3\n---\nEnd."}},
		},
		{
			name: "a rule with no closing line stays in the prompt",
			src:  "---\nname: A\n---\nText.\n---\n",
			want: []agent{{"A", 1, "Text.\n---"}},
		},
		{
			name: "fences may carry trailing spaces, lines CRLF endings",
			src:  "---  \r\nname: A\r\n---\t\r\nHello.\r\n",
			want: []agent{{"A", 1, "Hello."}},
		},
		{
			name: "a byte order mark is not text",
			src:  "\uFEFF---\nname: A\n---\nHi.\n",
			want: []agent{{"A", 1, "Hi."}},
		},
		{
			name:  "text before the first agent is ignored with one warning",
			src:   "\n# Our agents\n\nSee below.\n---\nname: A\n---\nHi.\n",
			want:  []agent{{"A", 5, "Hi."}},
			diags: []string{"a.md:2: warning: text before the first agent is ignored"},
		},
		{
			name:  "a file that starts with a rule but no mapping has no agent",
			src:   "---\nJust prose.\n---\n",
			diags: []string{"a.md:1: warning: text before the first agent is ignored"},
		},
		{
			name:  "missing name at the start of the file",
			src:   "---\nmodel: script\n---\nOrphan prompt.\n",
			diags: []string{"a.md:1: error: missing name"},
		},
		{
			name:  "missing name after blank lines",
			src:   "\n\n---\nmodel: script\n---\nOrphan.\n---\nname: B\n---\nb\n",
			want:  []agent{{"B", 7, "b"}},
			diags: []string{"a.md:3: error: missing name"},
		},
		{
			name:  "invalid YAML at the start of the file",
			src:   "---\nname: A\n\tsteps: 3\n---\nx\n",
			diags: []string{"a.md:3: error: front matter: found a tab character that violates indentation"},
		},
		{
			name:  "invalid YAML that looks like front matter later on",
			src:   "---\nname: A\n---\nx\n---\nname: B\n\tsteps: 3\n---\ny\n",
			want:  []agent{{"A", 1, "x\n---\nname: B\n\tsteps: 3\n---\ny"}},
			diags: []string{"a.md:7: warning: this block looks like front matter but is not valid YAML (found a tab character that violates indentation); read as prompt text"},
		},
		{
			name:  "duplicate name",
			src:   "---\nname: A\n---\none\n---\nname: A\n---\ntwo\n",
			want:  []agent{{"A", 1, "one"}},
			diags: []string{`a.md:6: error: duplicate agent "A" (first at a.md:2)`},
		},
		{
			name:  "empty name",
			src:   "---\nname:\n---\nx\n",
			diags: []string{"a.md:2: error: missing name"},
		},
		{
			name:  "name with a space",
			src:   "---\nname: my agent\n---\nx\n",
			diags: []string{`a.md:2: error: name: "my agent" is invalid: use 1 to 64 letters, digits, '_' or '-'`},
		},
		{
			name:  "name too long",
			src:   "---\nname: " + strings.Repeat("a", 65) + "\n---\nx\n",
			diags: []string{`a.md:2: error: name: "` + strings.Repeat("a", 65) + `" is invalid: use 1 to 64 letters, digits, '_' or '-'`},
		},
		{
			name:  "name that is not a string",
			src:   "---\nname: 7\n---\nx\n---\nname: [A]\n---\ny\n",
			diags: []string{"a.md:2: error: name: 7 is not a string", "a.md:6: error: name: a list is not a string"},
		},
		{
			name:  "an invalid agent's prompt is not reported again",
			src:   "---\nname: a b\n---\nIgnored with its agent.\n---\nname: B\n---\nb\n",
			want:  []agent{{"B", 5, "b"}},
			diags: []string{`a.md:2: error: name: "a b" is invalid: use 1 to 64 letters, digits, '_' or '-'`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents, diags := parse(t, tt.src)
			checkDiags(t, diags, tt.diags)
			var got []agent
			for _, a := range agents {
				got = append(got, agent{a.Name, a.Line, a.Prompt})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("agents:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseSteps(t *testing.T) {
	tests := []struct {
		name  string
		value string // the steps line; "" leaves steps unset
		steps *int
		cap   int
		diags []string
	}{
		{name: "unset", value: "", steps: nil, cap: MaxSteps},
		{name: "zero is text only", value: "steps: 0", steps: intp(0), cap: 0},
		{name: "valid", value: "steps: 5", steps: intp(5), cap: 5},
		{name: "above the ceiling", value: "steps: 250", steps: intp(250), cap: MaxSteps},
		{name: "a float with no fraction", value: "steps: 5.0", steps: intp(5), cap: 5},
		{name: "negative", value: "steps: -1", steps: intp(0), cap: 0,
			diags: []string{"a.md:3: warning: steps: -1 is negative; clamped to 0"}},
		{name: "fraction", value: "steps: 2.5", steps: intp(0), cap: 0,
			diags: []string{"a.md:3: warning: steps: 2.5 is not an integer; clamped to 0"}},
		{name: "word", value: "steps: five", steps: intp(0), cap: 0,
			diags: []string{`a.md:3: warning: steps: "five" is not an integer; clamped to 0`}},
		{name: "quoted number", value: `steps: "5"`, steps: intp(0), cap: 0,
			diags: []string{`a.md:3: warning: steps: "5" is not an integer; clamped to 0`}},
		{name: "empty", value: "steps:", steps: intp(0), cap: 0,
			diags: []string{"a.md:3: warning: steps: an empty value is not an integer; clamped to 0"}},
		{name: "list", value: "steps: [1]", steps: intp(0), cap: 0,
			diags: []string{"a.md:3: warning: steps: a list is not an integer; clamped to 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents, diags := parse(t, "---\nname: A\n"+tt.value+"\n---\nprompt\n")
			checkDiags(t, diags, tt.diags)
			if len(agents) != 1 {
				t.Fatalf("got %d agents, want 1", len(agents))
			}
			a := agents[0]
			if !reflect.DeepEqual(a.Steps, tt.steps) {
				t.Errorf("Steps = %v, want %v", deref2(a.Steps), deref2(tt.steps))
			}
			if a.StepCap() != tt.cap {
				t.Errorf("StepCap() = %d, want %d", a.StepCap(), tt.cap)
			}
		})
	}
}

func deref2(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestParseKeys covers every other key: good values are kept, bad ones are
// warnings with the key's line and a safe fallback.
func TestParseKeys(t *testing.T) {
	tests := []struct {
		name  string
		front string // front matter after "name: A", from line 3
		check func(t *testing.T, a *Agent)
		diags []string
	}{
		{
			name:  "unknown key",
			front: "model: script\ncolour: blue",
			diags: []string{`a.md:4: warning: unknown key "colour"`},
		},
		{
			name:  "duplicate key",
			front: "steps: 1\nsteps: 2",
			check: func(t *testing.T, a *Agent) {
				if a.StepCap() != 1 {
					t.Errorf("StepCap = %d, want the first value 1", a.StepCap())
				}
			},
			diags: []string{`a.md:4: error: duplicate key "steps" (first at line 3)`},
		},
		{
			name:  "budget and doom_loop below their minimum",
			front: "budget: 0\ndoom_loop: 1",
			check: func(t *testing.T, a *Agent) {
				if a.Budget != 0 || a.DoomLoop != 0 {
					t.Errorf("Budget, DoomLoop = %d, %d, want the defaults (0)", a.Budget, a.DoomLoop)
				}
			},
			diags: []string{
				"a.md:3: warning: budget: 0 is less than 1; the default (50) applies",
				"a.md:4: warning: doom_loop: 1 is less than 2; the default (3) applies",
			},
		},
		{
			name:  "budget and doom_loop that are not integers",
			front: "budget: lots\ndoom_loop: 2.5",
			diags: []string{
				`a.md:3: warning: budget: "lots" is not an integer; the default (50) applies`,
				"a.md:4: warning: doom_loop: 2.5 is not an integer; the default (3) applies",
			},
		},
		{
			name:  "budget, doom_loop and timeout that are fine",
			front: "budget: 7\ndoom_loop: 2\ntimeout: 1h30m",
			check: func(t *testing.T, a *Agent) {
				if a.Budget != 7 || a.DoomLoop != 2 || a.Timeout != 90*time.Minute {
					t.Errorf("Budget, DoomLoop, Timeout = %d, %d, %v", a.Budget, a.DoomLoop, a.Timeout)
				}
			},
		},
		{
			name:  "bad timeouts",
			front: "timeout: 600",
			diags: []string{"a.md:3: warning: timeout: 600 is not a duration such as 90s or 10m; no timeout"},
		},
		{
			name:  "timeout in words",
			front: "timeout: ten minutes",
			diags: []string{`a.md:3: warning: timeout: "ten minutes" is not a duration such as 90s or 10m; no timeout`},
		},
		{
			name:  "zero timeout",
			front: "timeout: 0s",
			diags: []string{`a.md:3: warning: timeout: "0s" is not positive; no timeout`},
		},
		{
			name:  "tools as a block list",
			front: "tools:\n  - read_file\n  - grep\napproval:\n  - grep\n  - write_file",
			check: func(t *testing.T, a *Agent) {
				if !slices.Equal(a.Tools, []string{"read_file", "grep"}) || !slices.Equal(a.Approval, []string{"grep", "write_file"}) {
					t.Errorf("Tools, Approval = %q, %q", a.Tools, a.Approval)
				}
			},
			diags: []string{`a.md:8: warning: approval: "write_file" is not in tools, so it is never offered`},
		},
		{
			name:  "empty tools offer none",
			front: "tools: []",
			check: func(t *testing.T, a *Agent) {
				if a.Tools == nil || a.AllowsTool("read_file") || a.AllowsTool("ask_user") {
					t.Errorf("Tools = %#v allows tools", a.Tools)
				}
			},
		},
		{
			name:  "unreadable tools offer none rather than all",
			front: "tools: {read_file: true}",
			check: func(t *testing.T, a *Agent) {
				if a.Tools == nil || a.AllowsTool("read_file") {
					t.Errorf("Tools = %#v allows read_file", a.Tools)
				}
			},
			diags: []string{"a.md:3: warning: tools: a mapping is not a list of tool names; ignored"},
		},
		{
			name:  "a single tool name is a list of one",
			front: "tools: grep\nfinal_tools: [grep, 3]",
			check: func(t *testing.T, a *Agent) {
				if !slices.Equal(a.Tools, []string{"grep"}) || !slices.Equal(a.FinalTools, []string{"grep"}) {
					t.Errorf("Tools, FinalTools = %q, %q", a.Tools, a.FinalTools)
				}
			},
			diags: []string{
				`a.md:3: warning: tools: "grep" is not a list; read as [grep]`,
				"a.md:4: warning: final_tools: 3 is not a tool name; ignored",
			},
		},
		{
			name:  "approval without tools is not checked against them",
			front: "approval: [write_file]",
			check: func(t *testing.T, a *Agent) {
				if a.Tools != nil || !a.AllowsTool("write_file") {
					t.Errorf("Tools = %#v, want nil (every tool)", a.Tools)
				}
			},
		},
		{
			name:  "description and model",
			front: "description: 42\nmodel: [a, b]",
			check: func(t *testing.T, a *Agent) {
				if a.Description != "42" || a.Model != "" {
					t.Errorf("Description, Model = %q, %q", a.Description, a.Model)
				}
			},
			diags: []string{
				`a.md:3: warning: description: 42 is not a string; read as "42"`,
				"a.md:4: warning: model: a list is not a string; ignored",
			},
		},
		{
			name:  "compaction",
			front: "compaction: {keep_steps: 8}",
			check: func(t *testing.T, a *Agent) {
				if a.KeepSteps != 8 {
					t.Errorf("KeepSteps = %d, want 8", a.KeepSteps)
				}
			},
		},
		{
			name:  "compaction as a block mapping",
			front: "compaction:\n  keep_steps: 3",
			check: func(t *testing.T, a *Agent) {
				if a.KeepSteps != 3 {
					t.Errorf("KeepSteps = %d, want 3", a.KeepSteps)
				}
			},
		},
		{
			name:  "compaction keeping no step compacts nothing",
			front: "compaction:\n  keep_steps: 0",
			check: func(t *testing.T, a *Agent) {
				if a.KeepSteps != 0 {
					t.Errorf("KeepSteps = %d, want 0 (no compaction)", a.KeepSteps)
				}
			},
			diags: []string{"a.md:4: warning: compaction: keep_steps: 0 is less than 1; no compaction"},
		},
		{
			name:  "compaction that cannot be read compacts nothing",
			front: "compaction: 8\ndoom_loop: 4\n---\nprompt\n---\nname: B\ncompaction: {keep_steps: 2.5, keep: 1}\n---\nprompt\n---\nname: C\ncompaction: {}",
			diags: []string{
				"a.md:3: warning: compaction: 8 is not a mapping such as {keep_steps: 8}; no compaction",
				"a.md:9: warning: compaction: keep_steps: 2.5 is not an integer; no compaction",
				`a.md:9: warning: compaction: unknown key "keep"`,
				"a.md:14: warning: compaction: keep_steps is missing; no compaction",
			},
		},
		{
			name:  "anchors and aliases",
			front: "tools: &t [read_file]\napproval: *t",
			check: func(t *testing.T, a *Agent) {
				if !slices.Equal(a.Approval, []string{"read_file"}) {
					t.Errorf("Approval = %q", a.Approval)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents, diags := parse(t, "---\nname: A\n"+tt.front+"\n---\nprompt\n")
			checkDiags(t, diags, tt.diags)
			if len(agents) == 0 {
				t.Fatalf("got no agent")
			}
			for _, a := range agents[1:] {
				if a.KeepSteps != 0 {
					t.Errorf("%s: KeepSteps = %d after a warning, want 0", a.Name, a.KeepSteps)
				}
			}
			if tt.check != nil {
				tt.check(t, agents[0])
			}
		})
	}
}

func TestAllowsTool(t *testing.T) {
	tests := []struct {
		tools []string
		name  string
		want  bool
	}{
		{nil, "write_file", true},
		{nil, "ask_user", true},
		{[]string{}, "ask_user", false},
		{[]string{"grep", "ask_user"}, "ask_user", true},
		{[]string{"grep"}, "write_file", false},
	}
	for _, tt := range tests {
		a := &Agent{Tools: tt.tools}
		if got := a.AllowsTool(tt.name); got != tt.want {
			t.Errorf("Tools %#v: AllowsTool(%q) = %v, want %v", tt.tools, tt.name, got, tt.want)
		}
	}
}

func TestMaxStepsMatchesMachine(t *testing.T) {
	if MaxSteps != fsm.MaxSteps {
		t.Fatalf("agents.MaxSteps = %d, fsm.MaxSteps = %d", MaxSteps, fsm.MaxSteps)
	}
}

func TestDiagnosticString(t *testing.T) {
	tests := []struct {
		d    Diagnostic
		want string
	}{
		{Diagnostic{File: "path/to/file.md", Line: 3, Severity: Warning, Message: "steps: -1 is negative; clamped to 0"},
			"path/to/file.md:3: warning: steps: -1 is negative; clamped to 0"},
		{Diagnostic{File: "agents", Severity: Error, Message: "no agent found"},
			"agents: error: no agent found"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// write creates the files (name → content) under a new directory.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadFile(t *testing.T) {
	dir := write(t, map[string]string{"AGENTS.md": "---\nname: B\n---\nb\n---\nname: A\nsteps: -1\n---\na\n"})
	path := filepath.Join(dir, "AGENTS.md")
	set, diags, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	checkDiags(t, strs(diags), []string{path + ":7: warning: steps: -1 is negative; clamped to 0"})
	if got := set.Names(); !slices.Equal(got, []string{"A", "B"}) {
		t.Errorf("Names() = %q", got)
	}
	if set.Path() != path || set.Dir() != dir {
		t.Errorf("Path, Dir = %q, %q, want %q, %q", set.Path(), set.Dir(), path, dir)
	}
	a, ok := set.Get("A")
	if !ok || a.File != path || a.Line != 5 || a.Prompt != "a" {
		t.Errorf("Get(A) = %+v, %v", a, ok)
	}
	if _, ok := set.Get("C"); ok {
		t.Error("Get(C) found an agent that does not exist")
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := write(t, map[string]string{
		"b.md":        "---\nname: Beta\n---\nb\n",
		"a.md":        "---\nname: Alpha\n---\na\n---\nname: Alpha2\n---\na2\n",
		".backup.md":  "---\nname: Alpha\n---\nan editor's copy\n",
		"notes.txt":   "---\nname: Notes\n---\nnot an agents file\n",
		"sub/deep.md": "---\nname: Deep\n---\nsubdirectories are not read\n",
		"empty.md":    "",
	})
	set, diags, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	checkDiags(t, strs(diags), []string{filepath.Join(dir, "empty.md") + ": warning: no agent in this file"})
	if got := set.Names(); !slices.Equal(got, []string{"Alpha", "Alpha2", "Beta"}) {
		t.Errorf("Names() = %q", got)
	}
	if set.Path() != dir || set.Dir() != dir {
		t.Errorf("Path, Dir = %q, %q, want %q", set.Path(), set.Dir(), dir)
	}
	if b, _ := set.Get("Beta"); b.File != filepath.Join(dir, "b.md") {
		t.Errorf("Beta.File = %q", b.File)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := write(t, map[string]string{
		"dup/AGENTS.md":   "---\nname: A\n---\none\n---\nname: A\n---\ntwo\n",
		"across/a.md":     "---\nname: A\n---\none\n",
		"across/b.md":     "---\nname: B\n---\nb\n---\nname: A\n---\ntwo\n",
		"prose/AGENTS.md": "# Agents\n\nNone yet.\n",
		"noname/x.md":     "---\nmodel: script\n---\nx\n---\nname: B\n---\nb\n",
		"empty/.keep":     "",
	})
	at := func(name string) string { return filepath.Join(dir, name) }
	tests := []struct {
		name  string
		path  string
		diags []string
		err   string
	}{
		{
			name:  "duplicate in one file",
			path:  at("dup/AGENTS.md"),
			diags: []string{at("dup/AGENTS.md") + `:6: error: duplicate agent "A" (first at ` + at("dup/AGENTS.md") + ":2)"},
			err:   "agents: " + at("dup/AGENTS.md") + `:6: duplicate agent "A" (first at ` + at("dup/AGENTS.md") + ":2)",
		},
		{
			name:  "duplicate across files",
			path:  at("across"),
			diags: []string{at("across/b.md") + `:6: error: duplicate agent "A" (first at ` + at("across/a.md") + ":2)"},
			err:   "agents: " + at("across/b.md") + `:6: duplicate agent "A" (first at ` + at("across/a.md") + ":2)",
		},
		{
			name: "no agent",
			path: at("prose/AGENTS.md"),
			diags: []string{
				at("prose/AGENTS.md") + ":1: warning: text before the first agent is ignored",
				at("prose/AGENTS.md") + `: error: no agent found: an agent starts with a "---" line, YAML front matter with a name, and a closing "---"`,
			},
			err: "agents: " + at("prose/AGENTS.md") + `: no agent found: an agent starts with a "---" line, YAML front matter with a name, and a closing "---"`,
		},
		{
			name:  "empty directory",
			path:  at("empty"),
			diags: []string{at("empty") + `: error: no agent found: an agent starts with a "---" line, YAML front matter with a name, and a closing "---"`},
			err:   "agents: " + at("empty") + `: no agent found: an agent starts with a "---" line, YAML front matter with a name, and a closing "---"`,
		},
		{
			name:  "missing name fails even beside a good agent",
			path:  at("noname/x.md"),
			diags: []string{at("noname/x.md") + ":1: error: missing name"},
			err:   "agents: " + at("noname/x.md") + ":1: missing name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, diags, err := Load(tt.path)
			checkDiags(t, strs(diags), tt.diags)
			if err == nil || err.Error() != tt.err {
				t.Errorf("err = %v\nwant %s", err, tt.err)
			}
			if set != nil {
				t.Errorf("set = %v, want nil with an error", set)
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		path := at("nope.md")
		_, diags, err := Load(path)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want fs.ErrNotExist", err)
		}
		checkDiags(t, strs(diags), []string{path + ": error: cannot read: no such file or directory"})
	})
}

// shipped is data/AGENTS.md, the agents the orchestrator runs by default.
const shipped = "../../data/AGENTS.md"

func TestShippedAgents(t *testing.T) {
	set, diags, err := Load(shipped)
	if err != nil {
		t.Fatalf("Load(%s): %v", shipped, err)
	}
	checkDiags(t, strs(diags), nil)
	if got := set.Names(); !slices.Equal(got, []string{"Architect", "Chat", "General", "Refactorer"}) {
		t.Fatalf("Names() = %q", got)
	}
	tests := []struct {
		name     string
		cap      int
		allowed  []string
		refused  []string
		approval []string
		timeout  time.Duration
		budget   int
		keep     int
	}{
		{name: "General", cap: MaxSteps, allowed: []string{"read_file", "write_file", "shell", "ask_user"}},
		{name: "Refactorer", cap: 5, allowed: []string{"read_file", "list_dir", "grep", "write_file"}, refused: []string{"ask_user", "shell"},
			approval: []string{"write_file"}, timeout: 10 * time.Minute, budget: 50},
		{name: "Architect", cap: 20, allowed: []string{"read_file", "list_dir", "grep", "ask_user"}, refused: []string{"write_file"}, keep: 8},
		{name: "Chat", cap: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := set.Get(tt.name)
			if a.StepCap() != tt.cap {
				t.Errorf("StepCap() = %d, want %d", a.StepCap(), tt.cap)
			}
			if a.Model != "openai/gpt-4.1-mini" || a.Description == "" || a.Prompt == "" {
				t.Errorf("Model %q, Description %q, Prompt %q: want the model and some text", a.Model, a.Description, a.Prompt)
			}
			for _, tool := range tt.allowed {
				if !a.AllowsTool(tool) {
					t.Errorf("AllowsTool(%q) = false", tool)
				}
			}
			for _, tool := range tt.refused {
				if a.AllowsTool(tool) {
					t.Errorf("AllowsTool(%q) = true", tool)
				}
			}
			if !slices.Equal(a.Approval, tt.approval) || a.Timeout != tt.timeout || a.Budget != tt.budget || a.KeepSteps != tt.keep {
				t.Errorf("Approval, Timeout, Budget, KeepSteps = %q, %v, %d, %d", a.Approval, a.Timeout, a.Budget, a.KeepSteps)
			}
		})
	}
}

// frontMatter decodes a YAML front matter the way Parse hands it to the schema.
func frontMatter(t *testing.T, src string) any {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return plain(doc.Content[0])
}

// TestShippedAgentsMatchSchema checks the schema against real agents, not
// just against Parse.
func TestShippedAgentsMatchSchema(t *testing.T) {
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	agents, _ := Parse(shipped, data)
	lines := splitLines(data)
	for _, a := range agents {
		_, root, err := block(lines, a.Line-1)
		if err != nil || root == nil {
			t.Fatalf("%s: front matter at line %d: %v", a.Name, a.Line, err)
		}
		if err := schemas.ValidateValue("agent", plain(root)); err != nil {
			t.Errorf("%s: %v", a.Name, err)
		}
	}
}

// TestSchema checks the agent schema, and that Parse reports in its own words
// everything the schema rejects (so a schema message never reaches users).
func TestSchema(t *testing.T) {
	if err := schemas.Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		front string
		valid bool
	}{
		{"doc example", strings.TrimSuffix(strings.Split(docExample, "---\n")[1], "\n"), true},
		{"name only", "name: A", true},
		{"unknown keys are allowed", "name: A\ncolour: blue", true},
		{"steps takes anything", "name: A\nsteps: five", true},
		{"missing name", "model: script", false},
		{"invalid name", "name: my agent", false},
		{"name not a string", "name: 5", false},
		{"tools not a list", "name: A\ntools: grep", false},
		{"tools with a number", "name: A\ntools: [grep, 5]", false},
		{"approval with an empty name", `name: A` + "\n" + `approval: [""]`, false},
		{"final_tools not a list", "name: A\nfinal_tools: {a: b}", false},
		{"budget zero", "name: A\nbudget: 0", false},
		{"budget not an integer", "name: A\nbudget: 1.5", false},
		{"doom_loop one", "name: A\ndoom_loop: 1", false},
		{"timeout a number", "name: A\ntimeout: 600", false},
		{"timeout in words", "name: A\ntimeout: ten minutes", false},
		{"description a list", "name: A\ndescription: [a]", false},
		{"model a number", "name: A\nmodel: 4", false},
		{"compaction", "name: A\ncompaction: {keep_steps: 1}", true},
		{"compaction keeping no step", "name: A\ncompaction: {keep_steps: 0}", false},
		{"compaction not a mapping", "name: A\ncompaction: 8", false},
		{"compaction without keep_steps", "name: A\ncompaction: {}", false},
		{"compaction with another key", "name: A\ncompaction: {keep_steps: 2, summary: true}", false},
		{"summarizing compaction", "name: A\ncompaction: {agent: S, over_tokens: 9000}", true},
		{"summarizing compaction keeping 3", "name: A\ncompaction: {agent: S, over_tokens: 9000, keep_steps: 3}", true},
		{"summarizing compaction without a threshold", "name: A\ncompaction: {agent: S}", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := schemas.ValidateValue("agent", frontMatter(t, tt.front))
			if (err == nil) != tt.valid {
				t.Fatalf("valid = %v, want %v (err %v)", err == nil, tt.valid, err)
			}
			if tt.valid {
				return
			}
			_, diags := parse(t, "---\n"+tt.front+"\n---\nprompt\n")
			if len(diags) == 0 {
				t.Errorf("the schema rejects it (%v) but Parse reports nothing", err)
			}
			for _, d := range diags {
				if strings.Contains(d, "schema agent") {
					t.Errorf("Parse fell back on the schema's message: %s", d)
				}
			}
		})
	}
}

func TestSubagentTools(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "AGENTS.md")
	good := "---\nname: Lead\ntools: [read_file, agent:Researcher]\nsubagent_session: shared\n---\nLead.\n" +
		"---\nname: Researcher\ndescription: Finds things out\n---\nResearch.\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	set, diags, err := Load(path)
	if err != nil || len(diags) > 0 {
		t.Fatalf("load: %v %v", err, diags)
	}
	lead, _ := set.Get("Lead")
	if !slices.Equal(lead.Tools, []string{"read_file"}) || !slices.Equal(lead.Subagents, []string{"Researcher"}) || !lead.SharedSession {
		t.Fatalf("lead: tools %v subagents %v shared %v", lead.Tools, lead.Subagents, lead.SharedSession)
	}
	if lead.AllowsTool("agent:Researcher") {
		t.Fatal("agent:Researcher is no worker's tool")
	}
	bad := "---\nname: Lead\ntools:\n  - agent:Nobody\n---\nLead.\n"
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, diags, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "AGENTS.md:4: tools: agent:Nobody names no agent") {
		t.Fatalf("an unknown agent must fail the load at its line: %v %v", err, diags)
	}
}

// TestSummarizingCompaction: compaction {agent, over_tokens} names an agent
// of the set (keep_steps 2 unless given); an unknown agent or the agent
// itself is an error with the line; half of the pair is a warning and no
// summarizing.
func TestSummarizingCompaction(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "AGENTS.md")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("---\nname: Long\ncompaction: {agent: Sum, over_tokens: 9000}\n---\nLong.\n---\nname: Sum\n---\nSummarize.\n")
	set, diags, err := Load(path)
	if err != nil || len(diags) > 0 {
		t.Fatalf("load: %v %v", err, diags)
	}
	long, _ := set.Get("Long")
	if long.Summarizer != "Sum" || long.OverTokens != 9000 || long.KeepSteps != DefaultKeepSteps {
		t.Fatalf("Long: %+v", long)
	}
	for src, want := range map[string]string{
		"---\nname: Long\ncompaction:\n  agent: Nobody\n  over_tokens: 10\n---\nLong.\n": "AGENTS.md:4: compaction: agent: Nobody names no agent",
		"---\nname: Long\ncompaction: {agent: Long, over_tokens: 10}\n---\nLong.\n":      "AGENTS.md:3: compaction: agent: Long is the agent itself",
	} {
		write(src)
		if _, _, err := Load(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
	write("---\nname: Long\ncompaction: {agent: Sum, keep_steps: 3}\n---\nLong.\n---\nname: Sum\n---\nS.\n")
	set, diags, err = Load(path)
	long, _ = set.Get("Long")
	if err != nil || len(diags) != 1 || !strings.Contains(diags[0].Message, "agent without over_tokens; no summarizing") ||
		long.Summarizer != "" || long.KeepSteps != 3 {
		t.Fatalf("agent without over_tokens: %v %v %+v", err, diags, long)
	}
}

// TestCheck: Check fails what the orchestrator would load but cannot run as
// written, and passes the merely unusual with a warning; every agents file
// the repository ships passes it.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		text, want string
		fails      bool
	}{
		"nomodel":  {"---\nname: A\n---\nhi\n", "2: error: A: no model", true},
		"typo":     {"---\nname: A\nmodel: m\ntols: [echo]\n---\nhi\n", `4: error: unknown key "tols"`, true},
		"type":     {"---\nname: A\nmodel: m\nsteps: ten\n---\nhi\n", `4: error: steps: "ten" is not an integer`, true},
		"timeout":  {"---\nname: A\nmodel: m\ntimeout: soon\n---\nhi\n", "4: error: timeout:", true},
		"nested":   {"---\nname: A\nmodel: m\ncompaction: {keep: 2}\n---\nhi\n", "4: error: compaction: unknown key", true},
		"unusual":  {"---\nname: A\nmodel: m\ntools: [echo]\napproval: [write]\n---\nhi\n", `5: warning: approval: "write" is not in tools`, false},
		"one tool": {"---\nname: A\nmodel: m\ntools: echo\n---\nhi\n", "4: warning: tools:", false},
	} {
		path := filepath.Join(dir, name+".md")
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		set, diags, err := Check(path)
		var all []string
		for _, d := range diags {
			all = append(all, d.String())
		}
		got := strings.Join(all, "\n")
		if (err != nil) != tc.fails || (set == nil) != tc.fails || !strings.Contains(got, tc.want) {
			t.Errorf("%s: err %v, diagnostics:\n%s\nwant %q", name, err, got, tc.want)
		}
		// The orchestrator still loads each of them.
		if _, _, err := Load(path); err != nil {
			t.Errorf("%s: Load: %v", name, err)
		}
	}
	for _, path := range []string{"../../data/AGENTS.md", "../../examples/subagents/AGENTS.md", "../../examples/workflow/AGENTS.md", "../cli/builtin/AGENTS.md"} {
		if _, diags, err := Check(path); err != nil {
			t.Errorf("%s: %v %v", path, err, diags)
		}
	}
}
