package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// Limits of the built-in tools.
const (
	defaultReadLines = 2000
	maxGrepMatches   = 200
	defaultShellTime = 60 * time.Second
)

// Builtins returns the contract's built-in tools, with every file tool
// confined to root: an os.Root refuses "..", absolute paths and symlinks
// that lead outside it. shell is included only when allowShell is set.
func Builtins(root string, allowShell bool) ([]Tool, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("tools: root %s: %w", root, err)
	}
	r, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("tools: root %s: %w", root, err)
	}
	fsys := files{root: r}
	ts := []Tool{
		fn[readArgs]{spec: spec("read_file", "Reads a text file under the worker's root. offset skips lines, limit caps them (default 2000).",
			`{"type":"object","properties":{"path":{"type":"string","minLength":1},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1}},"required":["path"],"additionalProperties":false}`, 30*time.Second),
			call: fsys.read},
		fn[pathArgs]{spec: spec("list_dir", "Lists a directory under the worker's root; directories end with /.",
			`{"type":"object","properties":{"path":{"type":"string","minLength":1}},"required":["path"],"additionalProperties":false}`, 30*time.Second),
			call: fsys.list},
		fn[grepArgs]{spec: spec("grep", "Searches files under path (default the root) for a regular expression; glob filters file names (e.g. *.go).",
			`{"type":"object","properties":{"pattern":{"type":"string","minLength":1},"path":{"type":"string"},"glob":{"type":"string"}},"required":["pattern"],"additionalProperties":false}`, 60*time.Second),
			call: fsys.grep},
		fn[writeArgs]{spec: spec("write_file", "Writes content to a file under the worker's root, creating its directories.",
			`{"type":"object","properties":{"path":{"type":"string","minLength":1},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`, 30*time.Second),
			call: fsys.write},
		fn[echoArgs]{spec: spec("echo", "Returns text unchanged.",
			`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`, 10*time.Second),
			call: func(_ context.Context, a echoArgs) (Result, error) { return Result{Output: a.Text}, nil }},
		fn[sleepArgs]{spec: spec("sleep", "Waits ms milliseconds, then returns slept.",
			`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":3600000}},"required":["ms"],"additionalProperties":false}`, time.Hour),
			call: sleep},
	}
	if allowShell {
		ts = append(ts, fn[shellArgs]{spec: spec("shell", "Runs a command with sh -c in the worker's root and returns its output and exit status.",
			`{"type":"object","properties":{"command":{"type":"string","minLength":1},"timeout_ms":{"type":"integer","minimum":1}},"required":["command"],"additionalProperties":false}`, 10*time.Minute),
			call: shell(abs)})
	}
	return ts, nil
}

func spec(name, description, params string, timeout time.Duration) events.ToolSpec {
	return events.ToolSpec{Name: name, Description: description, Parameters: json.RawMessage(params), TimeoutMs: timeout.Milliseconds()}
}

type (
	pathArgs struct {
		Path string `json:"path"`
	}
	readArgs struct {
		Path   string `json:"path"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	grepArgs struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
		Glob    string `json:"glob"`
	}
	writeArgs struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	echoArgs struct {
		Text string `json:"text"`
	}
	sleepArgs struct {
		Ms int64 `json:"ms"`
	}
	shellArgs struct {
		Command   string `json:"command"`
		TimeoutMs int64  `json:"timeout_ms"`
	}
)

// files are the file tools over one root.
type files struct{ root *os.Root }

// clean turns a model's path into one relative to the root, refusing
// absolute paths with a message the model can act on.
func clean(p string) (string, error) {
	if p == "" {
		p = "."
	}
	if filepath.IsAbs(p) {
		return "", fmt.Errorf("%s: absolute paths are not allowed; use a path relative to the root", p)
	}
	return filepath.Clean(p), nil
}

func (f files) read(_ context.Context, a readArgs) (Result, error) {
	p, err := clean(a.Path)
	if err != nil {
		return Result{}, err
	}
	file, err := f.root.Open(p)
	if err != nil {
		return Result{}, err
	}
	defer file.Close()
	limit := a.Limit
	if limit <= 0 {
		limit = defaultReadLines
	}
	var out strings.Builder
	rd := bufio.NewReader(file)
	line, kept := 0, 0
	for out.Len() <= MaxOutput {
		text, err := rd.ReadString('\n')
		if text == "" && err != nil {
			if err == io.EOF {
				break
			}
			return Result{}, fmt.Errorf("%s: %w", p, err)
		}
		line++
		if line <= a.Offset {
			continue
		}
		if kept == limit {
			fmt.Fprintf(&out, "… [more lines after line %d: read on with offset %d]\n", line-1, line-1)
			break
		}
		out.WriteString(text)
		kept++
	}
	return Result{Output: truncate(out.String())}, nil
}

func (f files) list(_ context.Context, a pathArgs) (Result, error) {
	p, err := clean(a.Path)
	if err != nil {
		return Result{}, err
	}
	entries, err := fs.ReadDir(f.root.FS(), filepath.ToSlash(p))
	if err != nil {
		return Result{}, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return Result{Output: "(empty directory)"}, nil
	}
	return Result{Output: truncate(strings.Join(names, "\n"))}, nil
}

func (f files) grep(ctx context.Context, a grepArgs) (Result, error) {
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return Result{}, fmt.Errorf("pattern: %w", err)
	}
	p, err := clean(a.Path)
	if err != nil {
		return Result{}, err
	}
	if a.Glob != "" {
		if _, err := path.Match(a.Glob, ""); err != nil {
			return Result{}, fmt.Errorf("glob %q: %w", a.Glob, err)
		}
	}
	fsys := f.root.FS()
	var out strings.Builder
	matches := 0
	errFull := errors.New("full")
	err = fs.WalkDir(fsys, filepath.ToSlash(p), func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == ".jetloop" {
				return fs.SkipDir
			}
			return nil
		}
		if a.Glob != "" {
			if ok, _ := path.Match(a.Glob, d.Name()); !ok {
				return nil
			}
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil || bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
			return nil // unreadable or binary: not text to search
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			if !re.Match(line) {
				continue
			}
			if matches == maxGrepMatches {
				fmt.Fprintf(&out, "… [stopped at %d matches: narrow the pattern or path]\n", maxGrepMatches)
				return errFull
			}
			fmt.Fprintf(&out, "%s:%d: %s\n", name, i+1, line)
			matches++
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return Result{}, err
	}
	if matches == 0 {
		return Result{Output: "no matches"}, nil
	}
	return Result{Output: truncate(out.String())}, nil
}

func (f files) write(_ context.Context, a writeArgs) (Result, error) {
	p, err := clean(a.Path)
	if err != nil {
		return Result{}, err
	}
	if dir := filepath.Dir(p); dir != "." {
		if err := f.root.MkdirAll(dir, 0o755); err != nil {
			return Result{}, err
		}
	}
	if err := f.root.WriteFile(p, []byte(a.Content), 0o644); err != nil {
		return Result{}, err
	}
	return Result{Output: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), filepath.ToSlash(p))}, nil
}

func sleep(ctx context.Context, a sleepArgs) (Result, error) {
	t := time.NewTimer(time.Duration(a.Ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return Result{Output: "slept"}, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func shell(dir string) func(context.Context, shellArgs) (Result, error) {
	return func(ctx context.Context, a shellArgs) (Result, error) {
		timeout := defaultShellTime
		if a.TimeoutMs > 0 {
			timeout = time.Duration(a.TimeoutMs) * time.Millisecond
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(cctx, "sh", "-c", a.Command)
		cmd.Dir = dir
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		text := string(out)
		var exit *exec.ExitError
		switch {
		case cctx.Err() != nil:
			return Result{Output: truncate(text + fmt.Sprintf("\n[killed after %s]", timeout)), IsError: true}, nil
		case errors.As(err, &exit):
			return Result{Output: truncate(text + fmt.Sprintf("\n[exit status %d]", exit.ExitCode())), IsError: true}, nil
		case err != nil:
			return Result{}, err
		}
		return Result{Output: truncate(text)}, nil
	}
}
