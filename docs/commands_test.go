package docs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// How the pages mark their commands (README.md and docs/*.md):
//
//   - a fenced block tagged sh (or bash, shell) holds commands, one a line
//     (a trailing \ continues one); a block tagged console holds a
//     transcript, whose commands are the lines that start with "$ ";
//   - such a block runs, command by command and in the page's order, against
//     a fresh `jetloop dev` started by the test (NATS_URL set, the built
//     binaries first on PATH), in a scratch directory that links every
//     top-level entry of the repository, so files named from the repository
//     root resolve and what the commands write is thrown away;
//   - a command must exit 0, unless it says otherwise in a comment:
//     "# exit status 1", "# exit status 0 or 1";
//   - a command that ends with & stays up in the background until the page
//     is done (a server, an orchestrator); when its comment says `ready
//     when it says "TEXT"`, the next command waits until its output has
//     TEXT;
//   - a block tagged "sh manual" (or "console manual") needs what a test
//     does not have: a production server, an API key, a process that stays
//     up. Its commands are only checked: every flag of a jetloop,
//     orchestrator or toolworker command is one its --help names, a make
//     target is in the Makefile, a package or directory named is there;
//   - an indented code block that holds a command is an error: it would
//     escape both.
//
// The README's first block (make demo, make test) is the one exception: the
// page must open with it; `make demo` runs here as `jetloop demo`, and
// `make test` is what runs this test.

// page is a markdown page and the commands found in it.
type page struct {
	name     string // relative to the repository root
	run      []command
	manual   []command
	indented []command // commands in indented code blocks
}

// command is one command of a page.
type command struct {
	line int    // where it starts
	text string // continuation lines joined
}

var fence = regexp.MustCompile("^(```+|~~~+)\\s*([^\\s`]*)\\s*(.*)$")

// parsePage finds the commands of a markdown page.
func parsePage(name, src string) page {
	p := page{name: name}
	lines := strings.Split(src, "\n")
	var (
		inFence  string // the fence's marker while inside one
		kind     string // "run", "manual" or "" (not commands)
		console  bool
		pending  *command
		prevText = true // the line before was text, not blank
	)
	add := func(c command) {
		switch kind {
		case "run":
			p.run = append(p.run, c)
		case "manual":
			p.manual = append(p.manual, c)
		}
	}
	for i, l := range lines {
		n := i + 1
		if inFence != "" {
			if strings.HasPrefix(strings.TrimSpace(l), inFence) && strings.Trim(strings.TrimSpace(l), inFence[:1]) == "" {
				inFence, kind, pending = "", "", nil
				continue
			}
			if kind == "" {
				continue
			}
			text := l
			if console {
				if pending == nil {
					cmd, ok := strings.CutPrefix(l, "$ ")
					if !ok {
						continue // sample output
					}
					text = cmd
				}
			} else if pending == nil && (strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#")) {
				continue
			}
			if pending != nil {
				pending.text += "\n" + text
			} else {
				pending = &command{line: n, text: text}
			}
			if strings.HasSuffix(text, "\\") {
				continue
			}
			add(*pending)
			pending = nil
			continue
		}
		if m := fence.FindStringSubmatch(strings.TrimSpace(l)); m != nil && !strings.HasPrefix(l, "    ") {
			inFence = m[1]
			console = m[2] == "console"
			kind = ""
			switch m[2] {
			case "sh", "bash", "shell", "console":
				kind = "run"
				if strings.Contains(" "+m[3]+" ", " manual ") {
					kind = "manual"
				}
			}
			continue
		}
		// An indented code block starts after a blank line (inside a list
		// item, indented text is the item's).
		if strings.HasPrefix(l, "    ") && !prevText {
			t := strings.TrimPrefix(strings.TrimSpace(l), "$ ")
			if looksLikeCommand(t) {
				p.indented = append(p.indented, command{line: n, text: t})
			}
			continue
		}
		prevText = strings.TrimSpace(l) != ""
	}
	return p
}

// looksLikeCommand says whether a line of an indented block is a command a
// reader would run.
func looksLikeCommand(s string) bool {
	for _, p := range []string{"jetloop ", "bin/", "orchestrator ", "toolworker ", "go run ", "go test ", "make ", "npm ", "node "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// pages are the README and every page of docs/.
func pages(t *testing.T) []page {
	t.Helper()
	names := []string{"README.md"}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		names = append(names, filepath.Join("docs", d))
	}
	var ps []page
	for _, n := range names {
		src, err := os.ReadFile(filepath.Join("..", n))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, parsePage(n, string(src)))
	}
	return ps
}

// readmeHead is how the README opens: its first lines stay these two
// commands.
const readmeHead = "# jetloop\n\n" +
	"    make demo   # a real agent turn on an embedded JetStream server with the scripted model, traced live\n" +
	"    make test   # vet, gofmt and every test with the race detector; installs its Go modules itself\n"

// The parser finds what the rules above say, and nothing else.
func TestParsePage(t *testing.T) {
	src := "text\n\n```sh\njetloop a   # exit status 1\n# a comment\n\njetloop b \\\n  --x\n```\n" +
		"```console\n$ jetloop c\noutput\n$ jetloop d\n```\n" +
		"```sh manual\njetloop e\n```\n```json\n{\"x\": 1}\n```\n" +
		"\n    jetloop f\n\n- a list\n    jetloop g continues the item\n"
	p := parsePage("x.md", src)
	var got []string
	for _, c := range p.run {
		got = append(got, strconv.Itoa(c.line)+":"+c.text)
	}
	want := []string{"4:jetloop a   # exit status 1", "7:jetloop b \\\n  --x", "11:jetloop c", "13:jetloop d"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("run %q, want %q", got, want)
	}
	if len(p.manual) != 1 || p.manual[0].text != "jetloop e" {
		t.Errorf("manual %+v", p.manual)
	}
	if len(p.indented) != 1 || p.indented[0].text != "jetloop f" {
		t.Errorf("indented %+v", p.indented)
	}
	for text, want := range map[string][]int{"jetloop a": {0}, "jetloop a # exit status 1": {1}, "x # exit status 0 or 3": {0, 3}} {
		if got := expectedStatus(text); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("expectedStatus(%q) = %v, want %v", text, got, want)
		}
	}
}

var exitStatus = regexp.MustCompile(`#.*\bexit status (\d+(?:\s+or\s+\d+)*)`)

// expectedStatus is the exit status a command's comment allows (0 unless
// it says).
func expectedStatus(text string) []int {
	m := exitStatus.FindStringSubmatch(text)
	if m == nil {
		return []int{0}
	}
	var out []int
	for _, f := range strings.Fields(m[1]) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinaries builds the three commands, once for all the tests.
func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "jetloop-docs-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "github.com/jetloop/jetloop/cmd/...")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// scratch is a directory that links every top-level entry of the
// repository: commands see the repository's files, and what they write
// stays in it.
func scratch(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root := repoRoot(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".git", ".jetloop", "bin":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// freeURL is a NATS URL on a free loopback port.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "nats://" + l.Addr().String()
}

// startDev starts `jetloop dev` in dir and returns its NATS URL once it
// says it serves; the process stops with the test.
func startDev(t *testing.T, bin, dir string) string {
	t.Helper()
	url := freeURL(t)
	cmd := exec.Command(filepath.Join(bin, "jetloop"), "dev", "--nats", url, "--root", repoRoot(t))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "NATS_URL=") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
		exited <- cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("jetloop dev stopped before it served:\n%s", stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("jetloop dev did not start within 2 minutes:\n%s", stderr.String())
	}
	return url
}

// shell runs one command with bash in dir, its output and exit status.
func shell(ctx context.Context, dir string, env []string, text string) (string, int, error) {
	cmd := exec.CommandContext(ctx, "bash", "-c", text)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return string(out), ee.ExitCode(), nil
	}
	if err != nil {
		return string(out), -1, err
	}
	return string(out), 0, nil
}

// Every command the README and docs/ tell a reader to run runs, in each
// page's order, against a fresh jetloop dev, and exits as the page says.
func TestDocumentedCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a jetloop dev per page")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := buildBinaries(t)
	for _, p := range pages(t) {
		if len(p.run) == 0 {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			dir := scratch(t)
			url := startDev(t, bin, dir)
			env := append(os.Environ(), "NATS_URL="+url, "NO_COLOR=1", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			for _, c := range p.run {
				if code, ready, ok := background(c.text); ok {
					startBackground(t, p.name, dir, env, c, code, ready)
					continue
				}
				runCommand(t, p.name, dir, env, c)
			}
		})
	}
}

// readyWhen is how a background command's comment says what it prints once
// it serves.
var readyWhen = regexp.MustCompile(`ready when it says "([^"]+)"`)

// background reports whether a command runs in the background (it ends
// with &), its code without the &, and the text that says it is ready.
func background(text string) (code, ready string, ok bool) {
	code, comment, _ := strings.Cut(text, " #")
	code = strings.TrimSpace(code)
	if !strings.HasSuffix(code, "&") || strings.HasSuffix(code, "&&") {
		return "", "", false
	}
	if m := readyWhen.FindStringSubmatch(comment); m != nil {
		ready = m[1]
	}
	return strings.TrimSpace(strings.TrimSuffix(code, "&")), ready, true
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBackground starts a command that stays up, in a process group of
// its own that is stopped (SIGTERM, then SIGKILL) when the page is done,
// and waits until its output says ready.
func startBackground(t *testing.T, name, dir string, env []string, c command, code, ready string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", code)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s:%d: %s: %v", name, c.line, c.text, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("%s:%d: %s:\n%s", name, c.line, code, out.String())
		}
	})
	if ready == "" {
		return
	}
	deadline := time.After(3 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(out.String(), ready) {
		select {
		case <-exited:
			t.Fatalf("%s:%d: %s stopped before it said %q:\n%s", name, c.line, code, ready, out.String())
		case <-deadline:
			t.Fatalf("%s:%d: %s did not say %q within 3 minutes:\n%s", name, c.line, code, ready, out.String())
		case <-tick.C:
		}
	}
}

// runCommand runs one documented command and checks its exit status. A
// command expected to succeed that exits 3 ("could not do its work now":
// no such turn or dead letter yet, a turn not paused yet) or 1 (a watch
// that saw a rejection a re-sent submission is about to replace) is tried
// again for a while: a person reads the previous output before typing the
// next command, and the test types faster than a turn pauses, a dead letter
// is written or a retried submission is taken.
func runCommand(t *testing.T, name, dir string, env []string, c command) {
	t.Helper()
	want := expectedStatus(c.text)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		out, status, err := shell(ctx, dir, env, c.text)
		cancel()
		if err != nil {
			t.Fatalf("%s:%d: %s\n%v (a command that stays up belongs in a manual block)\n%s", name, c.line, c.text, err, out)
		}
		for _, w := range want {
			if status == w {
				return
			}
		}
		if (status == 3 || status == 1) && want[0] == 0 && len(want) == 1 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		t.Fatalf("%s:%d: %s\nexit status %d, want %v\n%s", name, c.line, c.text, status, want, out)
	}
}

// The README opens with the two commands, and they are what they say:
// make demo runs jetloop demo, which serves its turn and exits 0.
func TestReadmeHead(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(src), readmeHead) {
		t.Fatalf("README.md does not open with make demo and make test:\n%s", readmeHead)
	}
	if len(src) > 15*1024 {
		t.Errorf("README.md is %d bytes: keep it under 15 KiB (details belong in docs/)", len(src))
	}
	makefile := readMakefile(t)
	for _, target := range []string{"demo", "test"} {
		if _, ok := makefile[target]; !ok {
			t.Errorf("the Makefile has no target %q", target)
		}
	}
	if !strings.Contains(makefile["demo"], "./cmd/jetloop demo") {
		t.Fatalf("make demo runs %q, not jetloop demo", makefile["demo"])
	}
	if testing.Short() {
		return
	}
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, status, err := shell(ctx, scratch(t), append(os.Environ(), "NO_COLOR=1"), filepath.Join(bin, "jetloop")+" demo")
	if err != nil || status != 0 {
		t.Fatalf("jetloop demo: exit status %d, %v\n%s", status, err, out)
	}
}

// readMakefile maps each target of the Makefile to its recipe.
func readMakefile(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{}
	target := ""
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "\t") && target != "" {
			targets[target] += strings.TrimSpace(l) + "\n"
			continue
		}
		target = ""
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.ContainsAny(name, " \t=$%#.") && name != "" {
			target = name
			targets[target] += ""
		}
	}
	return targets
}

// No command hides in an indented code block, where neither the runner
// nor the checks would see it.
func TestNoUntaggedCommands(t *testing.T) {
	for _, p := range pages(t) {
		for _, c := range p.indented {
			if p.name == "README.md" && c.line <= 4 {
				continue // the head, checked by TestReadmeHead
			}
			t.Errorf("%s:%d: %q is in an indented block: put it in a fenced block tagged sh, console or \"sh manual\"", p.name, c.line, c.text)
		}
	}
}

// Commands that cannot run here (a production server, an API key, a
// process that stays up) still name only flags, targets and paths that
// exist.
func TestManualCommandsParse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := buildBinaries(t)
	makefile := readMakefile(t)
	helps := map[string]string{}
	for _, p := range pages(t) {
		for _, c := range append(p.manual, p.run...) {
			for _, simple := range simpleCommands(c.text) {
				if err := checkCommand(t, bin, makefile, helps, simple); err != nil {
					t.Errorf("%s:%d: %s: %v", p.name, c.line, strings.TrimSpace(simple), err)
				}
			}
		}
	}
}

// verbs are the second words of jetloop's commands that have them.
var verbs = map[string]map[string]bool{
	"workflow": {"run": true, "watch": true, "show": true, "abort": true, "approve": true, "deny": true},
	"streams":  {"apply": true, "check": true},
	"agents":   {"check": true},
	"dead":     {"show": true, "retry": true},
}

var (
	operators  = regexp.MustCompile(`\s*(?:&&|\|\||[;|&])\s*`)
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)
	flagWord   = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)(?:=.*)?$`)
	quoted     = regexp.MustCompile(`"[^"]*"|'[^']*'|\$\([^)]*\)`)
)

// simpleCommands splits a command line into its simple commands (pipes,
// lists and background jobs), without comments and quoted text.
func simpleCommands(text string) []string {
	var out []string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		line = quoted.ReplaceAllString(line, "X")
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		for _, s := range operators.Split(line, -1) {
			if strings.TrimSpace(s) != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// globalValueFlags are the flags every jetloop command takes that take a
// value.
var globalValueFlags = map[string]bool{"nats": true, "context": true, "creds": true, "user": true, "password": true,
	"password-file": true, "js-prefix": true, "tls-ca": true, "tenant": true, "tenants": true}

// checkCommand checks one simple command: a jetloop binary's flags against
// its --help (helps caches them), a make target, a go package's directory.
func checkCommand(t *testing.T, bin string, makefile map[string]string, helps map[string]string, simple string) error {
	words := strings.Fields(simple)
	for len(words) > 0 && assignment.MatchString(words[0]) {
		words = words[1:] // VAR=value before the program
	}
	if len(words) == 0 {
		return nil
	}
	prog, args := words[0], words[1:]
	if prog == "go" && len(args) >= 2 && args[0] == "run" && strings.HasPrefix(args[1], "./cmd/") {
		prog, args = filepath.Base(args[1]), args[2:]
	}
	switch filepath.Base(prog) {
	case "make":
		for _, a := range args {
			if _, ok := makefile[a]; !ok && !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
				return fmt.Errorf("the Makefile has no target %q", a)
			}
		}
		return nil
	case "go":
		for _, a := range args {
			if strings.HasPrefix(a, "./") {
				if _, err := os.Stat(filepath.Join(repoRoot(t), strings.TrimSuffix(a, "/..."))); err != nil {
					return fmt.Errorf("no such package: %s", a)
				}
			}
		}
		return nil
	case "jetloop", "orchestrator", "toolworker":
	default:
		return nil // another program: its own documentation is its business
	}
	base := filepath.Base(prog)
	// The command and its verb: only words known to be such, as anything
	// else before --help would be taken for an argument (watch TURN would
	// wait for the turn).
	var sub []string
	if base == "jetloop" {
		// The flags every command takes may stand before the command
		// (jetloop --tenant a submit …): the command is the first word
		// that is neither such a flag nor its value.
		i := 0
		for i < len(args) && strings.HasPrefix(args[i], "-") {
			if name := strings.TrimLeft(args[i], "-"); !strings.Contains(name, "=") && globalValueFlags[name] {
				i++
			}
			i++
		}
		if i < len(args) {
			sub = append(sub, args[i])
			for _, a := range args[i+1:] {
				if verbs[args[i]][a] {
					sub = append(sub, a)
					break
				}
			}
		}
	}
	key := base + " " + strings.Join(sub, " ")
	help, ok := helps[key]
	if !ok {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, base), append(append([]string{}, sub...), "--help")...)
		out, _ := cmd.CombinedOutput() // the status of --help is the CLI's own business
		cancel()
		help = string(out)
		helps[key] = help
	}
	for _, a := range args {
		m := flagWord.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		if !regexp.MustCompile(`(?m)(^|[\s,\[(|])--?` + regexp.QuoteMeta(m[1]) + `\b`).MatchString(help) {
			return fmt.Errorf("%s has no flag --%s (%s --help)", key, m[1], key)
		}
	}
	return nil
}
