package agents

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/jetloop/jetloop/schemas"
)

// MaxSteps is the hard ceiling on model steps in a turn, whatever an agent
// asks for. It is the same number as fsm.MaxSteps, which enforces it; it is
// repeated here so that reading agents does not depend on the machine.
const MaxSteps = 200

// MaxTimeout is the longest timeout a turn may have, 30 days: the maximum of
// limits.timeout_ms in schemas/common.schema.json, which a submission's
// limits and turn.started's effective limits must both meet. It also keeps
// the milliseconds of a timeout far from overflowing a time.Duration.
const MaxTimeout = 30 * 24 * time.Hour

// DefaultTimeout is the clock of a turn whose agent sets no timeout: every
// loop is bounded by a wall clock, as OpenBotStack's are. A day leaves
// room for long agent work and for a person to answer an approval or a
// question overnight; an agent may set up to MaxTimeout, a submission only
// less. The orchestrator's --default-timeout changes it.
const DefaultTimeout = 24 * time.Hour

// Agent is one agent of an AGENTS.md file: its front matter and its prompt.
// Zero values mean "not set"; the caller applies the defaults (fsm.EffectiveLimits).
type Agent struct {
	Name        string
	Description string
	Model       string
	// Steps caps the model calls of a turn: nil means only the ceiling
	// MaxSteps applies, 0 means text only. Never negative.
	Steps *int
	// Budget caps the tool calls of a turn; 0 means the default (50).
	Budget int
	// Tools lists the tools offered to the model, ask_user included; nil
	// means every tool, an empty list none. Subagents named agent:<Name>
	// are not in it: see Subagents.
	Tools []string
	// Subagents are the agents named agent:<Name> in tools: each is offered
	// to the model as a tool <Name> whose call runs a child turn of it.
	Subagents []string
	// SharedSession puts the children in the parent's session
	// (subagent_session: shared) instead of each in its own.
	SharedSession bool
	// Approval lists the tools whose calls wait for an approve control message.
	Approval []string
	// FinalTools lists the tools whose call ends the turn with its result.
	FinalTools []string
	// Timeout bounds a turn's wall-clock time; 0 means none.
	Timeout time.Duration
	// DoomLoop is how many identical consecutive tool calls stop a turn;
	// 0 means the default (3).
	DoomLoop int
	// KeepSteps is compaction: {keep_steps: N}: each model call sends the
	// system prompt, the first user message and the last N steps
	// (fsm.Compact). 0 means no compaction: the whole conversation.
	KeepSteps int
	// Summarizer and OverTokens are a summarizing compaction,
	// {agent: Name, over_tokens: N}: once a model call's input passes N
	// tokens, a child turn of the agent Name summarizes the steps before
	// the last KeepSteps (2 when unset), and later calls send the summary
	// instead (fsm.CompactionDue).
	Summarizer string
	OverTokens int
	// summarizerLine is the line of Summarizer, for Load's check.
	summarizerLine int
	// Prompt is the system prompt: the text after the front matter, trimmed.
	Prompt string
	// File is the file the agent came from.
	File string
	// Line is the line of the agent's opening "---".
	Line int

	// nameLine is where the name key is, so a duplicate can point at both.
	nameLine int
	// subagentLines are the lines of Subagents, so Load can point at an
	// unknown one.
	subagentLines []int
}

// StepCap is the most model steps a turn of this agent may take:
// min(steps ?? MaxSteps, MaxSteps).
func (a *Agent) StepCap() int {
	if a.Steps == nil {
		return MaxSteps
	}
	return min(max(*a.Steps, 0), MaxSteps)
}

// AllowsTool reports whether the agent may be offered the named tool: every
// tool when the agent lists none, else only those it lists.
func (a *Agent) AllowsTool(name string) bool {
	return a.Tools == nil || slices.Contains(a.Tools, name)
}

// Set is the agents read by [Load], known by name.
type Set struct {
	path   string
	dir    string
	agents map[string]*Agent
	names  []string
}

// Get returns the agent with the given name.
func (s *Set) Get(name string) (*Agent, bool) {
	a, ok := s.agents[name]
	return a, ok
}

// Names lists the agents' names, sorted.
func (s *Set) Names() []string {
	return slices.Clone(s.names)
}

// Path is the path given to [Load].
func (s *Set) Path() string { return s.path }

// Dir is the directory that paths in agents (such as model: script:FILE) are
// relative to: the file's directory, or the directory itself when [Load] was
// given a directory.
func (s *Set) Dir() string { return s.dir }

// Severity says whether a [Diagnostic] stops a set from loading.
type Severity string

const (
	// Warning is a mistake that was worked around: the set still loads.
	Warning Severity = "warning"
	// Error is a mistake that makes the set ambiguous: [Load] fails.
	Error Severity = "error"
)

// Diagnostic is one problem found in an agents file, at the line of the key
// (or "---") it is about. Line is 0 when the problem concerns the whole file.
type Diagnostic struct {
	File     string
	Line     int
	Severity Severity
	Message  string
	// Invalid marks a warning about what the file cannot mean as written
	// (an unknown key, a value of the wrong type or out of range): the set
	// loads, with the stated fallback, but [Check] makes it an error.
	Invalid bool
}

// String formats the diagnostic the way compilers do, so editors can jump
// to it: "path/to/file.md:3: warning: steps: -1 is negative; clamped to 0".
func (d Diagnostic) String() string {
	return fmt.Sprintf("%s: %s: %s", d.where(), d.Severity, d.Message)
}

func (d Diagnostic) where() string {
	if d.Line > 0 {
		return d.File + ":" + strconv.Itoa(d.Line)
	}
	return d.File
}

// Load reads the agents at path: one file with one or more agents, or a
// directory whose *.md files (in name order, hidden files skipped) are read
// the same way. It returns every diagnostic, and an error that sums up the
// error diagnostics when there is any (a missing, invalid or duplicate name,
// an unreadable file, no agent at all); the set is nil then. Warnings alone
// do not fail a load.
func Load(path string) (*Set, []Diagnostic, error) {
	var (
		diags []Diagnostic
		errs  []error
	)
	// fail records an error diagnostic; cause, when set, stays reachable
	// through the returned error (errors.Is(err, fs.ErrNotExist)).
	fail := func(file, msg string, cause error) {
		diags = append(diags, Diagnostic{File: file, Severity: Error, Message: msg})
		if cause != nil {
			errs = append(errs, fmt.Errorf("agents: %s: %w", file, cause))
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		fail(path, "cannot read: "+ioReason(err), err)
		return nil, diags, errors.Join(errs...)
	}
	set := &Set{path: path, dir: filepath.Dir(path), agents: map[string]*Agent{}}
	files := []string{path}
	if info.IsDir() {
		set.dir = path
		entries, err := os.ReadDir(path)
		if err != nil {
			fail(path, "cannot read: "+ioReason(err), err)
			return nil, diags, errors.Join(errs...)
		}
		files = files[:0]
		for _, e := range entries {
			// Hidden files are editor backups and lock files, not agents.
			if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".md") {
				files = append(files, filepath.Join(path, n))
			}
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			fail(f, "cannot read: "+ioReason(err), err)
			continue
		}
		agents, ds := Parse(f, data)
		diags = append(diags, ds...)
		if len(agents) == 0 && len(ds) == 0 && info.IsDir() {
			// An empty file in a directory is harmless but probably not meant.
			diags = append(diags, Diagnostic{File: f, Severity: Warning, Message: "no agent in this file"})
		}
		for _, a := range agents {
			if first, dup := set.agents[a.Name]; dup {
				diags = append(diags, duplicate(a, first))
				continue
			}
			set.agents[a.Name] = a
			set.names = append(set.names, a.Name)
		}
	}
	// An agent tool is resolved once every file is read: it may name an
	// agent defined after it, or in another file of the directory.
	for _, n := range set.names {
		a := set.agents[n]
		for i, sub := range a.Subagents {
			if _, ok := set.agents[sub]; !ok {
				diags = append(diags, Diagnostic{File: a.File, Line: a.subagentLines[i], Severity: Error,
					Message: fmt.Sprintf("tools: agent:%s names no agent (known: %s)", sub, strings.Join(slices.Sorted(maps.Keys(set.agents)), ", "))})
			}
		}
		if sum := a.Summarizer; sum != "" {
			switch _, ok := set.agents[sum]; {
			case !ok:
				diags = append(diags, Diagnostic{File: a.File, Line: a.summarizerLine, Severity: Error,
					Message: fmt.Sprintf("compaction: agent: %s names no agent (known: %s)", sum, strings.Join(slices.Sorted(maps.Keys(set.agents)), ", "))})
			case sum == a.Name:
				diags = append(diags, Diagnostic{File: a.File, Line: a.summarizerLine, Severity: Error,
					Message: fmt.Sprintf("compaction: agent: %s is the agent itself, which cannot start itself", sum)})
			}
		}
	}
	if len(set.agents) == 0 && !hasError(diags) {
		fail(path, `no agent found: an agent starts with a "---" line, YAML front matter with a name, and a closing "---"`, nil)
	}
	for _, d := range diags {
		// I/O failures are already in errs, wrapping their cause.
		if d.Severity == Error && !strings.HasPrefix(d.Message, "cannot read: ") {
			errs = append(errs, fmt.Errorf("agents: %s: %s", d.where(), d.Message))
		}
	}
	if len(errs) > 0 {
		return nil, diags, errors.Join(errs...)
	}
	slices.Sort(set.names)
	return set, diags, nil
}

// ioReason is an I/O error without the path that the diagnostic already names.
// Check is [Load] as a deployment's check should read the agents: what
// the orchestrator would work around but cannot run as written is an error
// too — a warning marked Invalid (an unknown key such as tols:, a value of
// the wrong type such as steps: ten) and an agent with no model, whose
// turns fail unless each submission names one. The set is nil when there
// is an error.
func Check(path string) (*Set, []Diagnostic, error) {
	set, diags, err := Load(path)
	if set != nil {
		for _, n := range set.names {
			if a := set.agents[n]; a.Model == "" {
				diags = append(diags, Diagnostic{File: a.File, Line: a.nameLine, Severity: Error,
					Message: fmt.Sprintf("%s: no model (such as model: openai/gpt-4.1-mini): its turns fail unless a submission names one", a.Name)})
			}
		}
	}
	// Load's own errors are in err already; a set means it had none, so an
	// error diagnostic then is one of the checks above.
	errs := []error{err}
	for i, d := range diags {
		if d.Invalid || (set != nil && d.Severity == Error) {
			diags[i].Severity = Error
			errs = append(errs, fmt.Errorf("agents: %s: %s", d.where(), d.Message))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, diags, err
	}
	return set, diags, nil
}

func ioReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func hasError(diags []Diagnostic) bool {
	return slices.ContainsFunc(diags, func(d Diagnostic) bool { return d.Severity == Error })
}

func duplicate(a, first *Agent) Diagnostic {
	return Diagnostic{File: a.File, Line: a.nameLine, Severity: Error,
		Message: fmt.Sprintf("duplicate agent %q (first at %s:%d)", a.Name, first.File, first.nameLine)}
}

// Parse reads the agents of one file; file names it in agents and
// diagnostics. Agents with an error in their name (missing, invalid, or a
// duplicate within the file) are left out; every other mistake is a warning
// and the agent is kept with a safe value in place of the bad one.
func Parse(file string, data []byte) ([]*Agent, []Diagnostic) {
	p := &parser{file: file, seen: map[string]*Agent{}}
	p.run(splitLines(data))
	return p.agents, p.diags
}

type parser struct {
	file   string
	agents []*Agent
	seen   map[string]*Agent
	diags  []Diagnostic
}

func (p *parser) add(line int, sev Severity, format string, args ...any) {
	p.diags = append(p.diags, Diagnostic{File: p.file, Line: line, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) warnf(line int, format string, args ...any) {
	p.add(line, Warning, format, args...)
}

// invalidf records a warning that [Check] counts as an error.
func (p *parser) invalidf(line int, format string, args ...any) {
	p.add(line, Warning, format, args...)
	p.diags[len(p.diags)-1].Invalid = true
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.add(line, Error, format, args...)
}

func splitLines(data []byte) []string {
	s := strings.TrimPrefix(string(data), "\uFEFF")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

func isFence(line string) bool {
	return strings.TrimRight(line, " \t") == "---"
}

// looksLikeName spots a block meant as front matter that failed to parse.
var looksLikeName = regexp.MustCompile(`^name\s*:`)

func (p *parser) run(lines []string) {
	var (
		cur      *Agent // nil while the text belongs to a rejected agent
		inAgent  bool   // text belongs to an agent, kept or rejected
		prompt   []string
		started  bool // a non-blank line has been seen
		warnedAt bool // text before the first agent has been reported
	)
	finish := func() {
		if cur != nil {
			cur.Prompt = strings.TrimSpace(strings.Join(prompt, "\n"))
		}
		prompt = nil
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		blank := strings.TrimSpace(line) == ""
		first := !started && !blank
		started = started || !blank
		if isFence(line) {
			if end, root, err := block(lines, i); end > 0 {
				open := i + 1
				switch {
				case root != nil && root.Kind == yaml.MappingNode && hasKey(root, "name"):
					finish()
					cur, inAgent = p.agent(open, root), true
					i = end
					continue
				case first && err != nil:
					// The file starts like front matter: a YAML mistake
					// is far likelier than a prompt that opens with a rule.
					l, msg := yamlError(err)
					p.errorf(open+l, "front matter: %s", msg)
					finish()
					cur, inAgent = nil, true
					i = end
					continue
				case first && root != nil && root.Kind == yaml.MappingNode:
					p.errorf(open, "missing name")
					finish()
					cur, inAgent = nil, true
					i = end
					continue
				case err != nil && slices.ContainsFunc(lines[i+1:end], looksLikeName.MatchString):
					l, msg := yamlError(err)
					p.warnf(open+l, "this block looks like front matter but is not valid YAML (%s); read as prompt text", msg)
				}
			}
		}
		switch {
		case inAgent:
			prompt = append(prompt, line)
		case !blank && !warnedAt:
			p.warnf(i+1, "text before the first agent is ignored")
			warnedAt = true
		}
	}
	finish()
}

// block parses the lines after the "---" at open up to the next "---". end
// is the index of that closing line, or -1 when there is none; root is the
// document's top node, nil when it is empty.
func block(lines []string, open int) (end int, root *yaml.Node, err error) {
	end = -1
	for j := open + 1; j < len(lines); j++ {
		if isFence(lines[j]) {
			end = j
			break
		}
	}
	if end < 0 {
		return -1, nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(strings.Join(lines[open+1:end], "\n")), &doc); err != nil {
		return end, nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	return end, root, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError splits a yaml error into the line it names (relative to the
// block, 0 when it names none) and its message.
func yamlError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, m[2]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

func hasKey(m *yaml.Node, key string) bool {
	for k := 0; k+1 < len(m.Content); k += 2 {
		if kn := deref(m.Content[k]); kn.Kind == yaml.ScalarNode && kn.Value == key {
			return true
		}
	}
	return false
}

// deref follows aliases (*anchor) to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// agent reads the front matter m of the agent whose "---" is at line open. It
// returns nil when the agent must be left out.
func (p *parser) agent(open int, m *yaml.Node) *Agent {
	a := &Agent{File: p.file, Line: open}
	before := len(p.diags)
	nameOK := false
	seen := map[string]int{}
	var approvalLines, finalLines []int
	for k := 0; k+1 < len(m.Content); k += 2 {
		kn, v := deref(m.Content[k]), deref(m.Content[k+1])
		line := open + kn.Line
		if kn.Kind != yaml.ScalarNode {
			p.invalidf(line, "key %s is not a string; ignored", describe(kn))
			continue
		}
		key := kn.Value
		if first, dup := seen[key]; dup {
			// YAML forbids duplicate keys, and which one the author meant is
			// a guess: for tools or approval the wrong guess grants too much.
			p.errorf(line, "duplicate key %q (first at line %d)", key, first)
			continue
		}
		seen[key] = line
		switch key {
		case "name":
			a.nameLine = line
			nameOK = p.name(line, v, a)
		case "description":
			a.Description = p.text(line, key, v)
		case "model":
			a.Model = p.text(line, key, v)
		case "steps":
			// 0 (text only) is the safe reading of a cap nobody can read.
			n, ok := intValue(v)
			switch {
			case !ok:
				p.invalidf(line, "steps: %s is not an integer; clamped to 0", describe(v))
				n = 0
			case n < 0:
				p.invalidf(line, "steps: %d is negative; clamped to 0", n)
				n = 0
			}
			a.Steps = &n
		case "budget":
			a.Budget = p.atLeast(line, key, v, 1, "50")
		case "doom_loop":
			a.DoomLoop = p.atLeast(line, key, v, 2, "3")
		case "timeout":
			a.Timeout = p.duration(line, v)
		case "compaction":
			a.KeepSteps, a.Summarizer, a.OverTokens, a.summarizerLine = p.compaction(open, line, v)
		case "tools":
			// A tools list nobody can read offers nothing rather than everything.
			var lines []int
			a.Tools, lines = p.list(open, line, key, v)
			if a.Tools == nil {
				a.Tools = []string{}
			}
			a.Tools, a.Subagents, a.subagentLines = p.subagents(a.Tools, lines)
		case "subagent_session":
			switch s := p.text(line, key, v); s {
			case "shared":
				a.SharedSession = true
			case "own", "":
			default:
				p.invalidf(line, "subagent_session: %q is neither shared nor own; children get sessions of their own", s)
			}
		case "approval":
			a.Approval, approvalLines = p.list(open, line, key, v)
		case "final_tools":
			a.FinalTools, finalLines = p.list(open, line, key, v)
		default:
			p.invalidf(line, "unknown key %q", key)
		}
	}
	if a.Tools != nil {
		// A subagent is offered as a tool named after its agent.
		offered := append(slices.Clone(a.Tools), a.Subagents...)
		p.offered("approval", a.Approval, approvalLines, offered)
		p.offered("final_tools", a.FinalTools, finalLines, offered)
	}
	if len(p.diags) == before {
		// The checks above are the precise ones, the schema the reference:
		// should they drift apart, say so rather than stay silent.
		if err := schemas.ValidateValue("agent", plain(m)); err != nil {
			p.warnf(open, "front matter: %v", err)
		}
	}
	if !nameOK {
		return nil
	}
	if first, dup := p.seen[a.Name]; dup {
		p.diags = append(p.diags, duplicate(a, first))
		return nil
	}
	p.seen[a.Name] = a
	p.agents = append(p.agents, a)
	return a
}

func (p *parser) name(line int, v *yaml.Node, a *Agent) bool {
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
		p.errorf(line, "missing name")
	case v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str":
		p.errorf(line, "name: %s is not a string", describe(v))
	case !validName.MatchString(v.Value):
		p.errorf(line, "name: %q is invalid: use 1 to 64 letters, digits, '_' or '-'", v.Value)
	default:
		a.Name = v.Value
		return true
	}
	return false
}

// text reads a string value; a number or boolean is taken as written, since
// that is almost certainly what the author meant by it.
func (p *parser) text(line int, key string, v *yaml.Node) string {
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str":
		return v.Value
	case v.Kind == yaml.ScalarNode && v.ShortTag() != "!!null":
		p.warnf(line, "%s: %s is not a string; read as %q", key, describe(v), v.Value)
		return v.Value
	default:
		p.invalidf(line, "%s: %s is not a string; ignored", key, describe(v))
		return ""
	}
}

func (p *parser) atLeast(line int, key string, v *yaml.Node, least int, def string) int {
	n, ok := intValue(v)
	switch {
	case !ok:
		p.invalidf(line, "%s: %s is not an integer; the default (%s) applies", key, describe(v), def)
	case n < least:
		p.invalidf(line, "%s: %d is less than %d; the default (%s) applies", key, n, least, def)
	default:
		return n
	}
	return 0
}

func (p *parser) duration(line int, v *yaml.Node) time.Duration {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		p.invalidf(line, "timeout: %s is not a duration such as 90s or 10m; no timeout", describe(v))
		return 0
	}
	d, err := time.ParseDuration(v.Value)
	switch {
	case err != nil:
		p.invalidf(line, "timeout: %q is not a duration such as 90s or 10m; no timeout", v.Value)
	case d <= 0:
		p.invalidf(line, "timeout: %q is not positive; no timeout", v.Value)
	case d > MaxTimeout:
		// Not clamped: a turn meant to run for years is a typo, and the
		// agent's author should choose what it becomes.
		p.errorf(line, "timeout: %q is longer than the ceiling of %s (30 days)", v.Value, MaxTimeout)
	default:
		return d
	}
	return 0
}

// compaction reads compaction: {keep_steps: N, agent: Name, over_tokens:
// N}. Anything unreadable is a warning and means no compaction (or, for
// agent and over_tokens, no summarizing): the agent then sends its whole
// conversation, as an agent without the key does, which can cost tokens but
// never hides a message the author meant the model to see. With an agent,
// keep_steps defaults to DefaultKeepSteps.
func (p *parser) compaction(open, line int, v *yaml.Node) (keep int, agent string, over, agentLine int) {
	const off = "no compaction"
	if v.Kind != yaml.MappingNode {
		p.invalidf(line, "compaction: %s is not a mapping such as {keep_steps: 8}; %s", describe(v), off)
		return 0, "", 0, 0
	}
	seen := map[string]bool{}
	keepBad := false
	for k := 0; k+1 < len(v.Content); k += 2 {
		kn, val := deref(v.Content[k]), deref(v.Content[k+1])
		l := open + kn.Line
		if kn.Kind != yaml.ScalarNode || (kn.Value != "keep_steps" && kn.Value != "agent" && kn.Value != "over_tokens") {
			p.invalidf(l, "compaction: unknown key %s", describe(kn))
			continue
		}
		if seen[kn.Value] {
			p.invalidf(l, "compaction: duplicate key %s; the first applies", kn.Value)
			continue
		}
		seen[kn.Value] = true
		switch kn.Value {
		case "keep_steps":
			n, ok := intValue(val)
			switch {
			case !ok:
				p.invalidf(l, "compaction: keep_steps: %s is not an integer; %s", describe(val), off)
				keepBad = true
			case n < 1:
				p.invalidf(l, "compaction: keep_steps: %d is less than 1; %s", n, off)
				keepBad = true
			default:
				keep = n
			}
		case "agent":
			if val.Kind != yaml.ScalarNode || !validName.MatchString(val.Value) {
				p.invalidf(l, "compaction: agent: %s is not an agent's name; no summarizing", describe(val))
				continue
			}
			agent, agentLine = val.Value, open+val.Line
		case "over_tokens":
			n, ok := intValue(val)
			if !ok || n < 1 {
				p.invalidf(l, "compaction: over_tokens: %s is not an integer of at least 1; no summarizing", describe(val))
				continue
			}
			over = n
		}
	}
	if (agent == "") != (over == 0) {
		if agent == "" && !seen["agent"] {
			p.invalidf(line, "compaction: over_tokens without agent; no summarizing")
		} else if over == 0 && !seen["over_tokens"] {
			p.invalidf(line, "compaction: agent without over_tokens; no summarizing")
		}
		agent, over, agentLine = "", 0, 0
	}
	switch {
	case keepBad:
		return 0, "", 0, 0
	case !seen["keep_steps"] && agent != "":
		keep = DefaultKeepSteps
	case !seen["keep_steps"]:
		p.invalidf(line, "compaction: keep_steps is missing; %s", off)
	}
	return keep, agent, over, agentLine
}

// DefaultKeepSteps is how many of the latest steps a summarizing compaction
// keeps as they are when the agent does not say.
const DefaultKeepSteps = 2

// list reads a list of tool names and the line of each. A single name is
// taken as a list of one; anything unreadable is left out with a warning.
func (p *parser) list(open, line int, key string, v *yaml.Node) ([]string, []int) {
	switch {
	case v.Kind == yaml.SequenceNode:
		names, lines := make([]string, 0, len(v.Content)), make([]int, 0, len(v.Content))
		for _, e := range v.Content {
			e = deref(e)
			l := open + e.Line
			if e.Kind != yaml.ScalarNode || e.ShortTag() != "!!str" || e.Value == "" {
				p.invalidf(l, "%s: %s is not a tool name; ignored", key, describe(e))
				continue
			}
			names, lines = append(names, e.Value), append(lines, l)
		}
		return names, lines
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value != "":
		p.warnf(line, "%s: %q is not a list; read as [%s]", key, v.Value, v.Value)
		return []string{v.Value}, []int{line}
	default:
		p.invalidf(line, "%s: %s is not a list of tool names; ignored", key, describe(v))
		return nil, nil
	}
}

// subagents splits the agent:<Name> entries of a tools list from the tools
// workers serve. A name that is not a valid agent name is an error: a tool
// the model is offered must name exactly one agent.
func (p *parser) subagents(names []string, lines []int) (tools, subs []string, subLines []int) {
	tools = make([]string, 0, len(names))
	for i, n := range names {
		name, ok := strings.CutPrefix(n, SubagentPrefix)
		if !ok {
			tools = append(tools, n)
			continue
		}
		switch {
		case !validName.MatchString(name):
			p.errorf(lines[i], "tools: %q: an agent's name is 1 to 64 letters, digits, '_' or '-'", n)
		case slices.Contains(subs, name):
			p.warnf(lines[i], "tools: %q is listed twice", n)
		default:
			subs, subLines = append(subs, name), append(subLines, lines[i])
		}
	}
	return tools, subs, subLines
}

// SubagentPrefix marks an agent in tools: agent:<Name>.
const SubagentPrefix = "agent:"

// offered warns about tools named in approval or final_tools that the agent
// is never offered: the setting can have no effect, so it is likely a typo.
func (p *parser) offered(key string, names []string, lines []int, tools []string) {
	for i, n := range names {
		if !slices.Contains(tools, n) {
			p.warnf(lines[i], "%s: %q is not in tools, so it is never offered", key, n)
		}
	}
}

// intValue reads an integer, accepting a float with no fraction (5.0) as
// JSON Schema's "integer" does.
func intValue(v *yaml.Node) (int, bool) {
	if v.Kind != yaml.ScalarNode {
		return 0, false
	}
	switch v.ShortTag() {
	case "!!int":
		var n int
		if err := v.Decode(&n); err != nil {
			return 0, false
		}
		return n, true
	case "!!float":
		var f float64
		if err := v.Decode(&f); err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int(f), true
	}
	return 0, false
}

// describe shows a value in a message as the author wrote it.
func describe(v *yaml.Node) string {
	switch v.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch v.ShortTag() {
		case "!!str":
			return strconv.Quote(v.Value)
		case "!!null":
			return "an empty value"
		}
		return v.Value
	}
	return "a value"
}

// plain converts a YAML node to the JSON-like values the schema validator
// takes: maps with string keys, slices, strings, numbers, booleans and nil.
func plain(n *yaml.Node) any {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for k := 0; k+1 < len(n.Content); k += 2 {
			key := deref(n.Content[k]).Value
			if _, dup := m[key]; !dup {
				m[key] = plain(n.Content[k+1])
			}
		}
		return m
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, e := range n.Content {
			s[i] = plain(e)
		}
		return s
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return n.Value
		}
		switch v := v.(type) {
		case nil, bool, string, int, int64, uint64:
			return v
		case float64:
			// The validator cannot compare infinities or NaN with minimum.
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return n.Value
			}
			return v
		}
		// Timestamps and binaries are text in JSON.
		return n.Value
	}
	return nil
}
