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
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetloop/jetloop/internal/confined"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/output"
)

// Limits of the built-in tools.
const (
	defaultReadLines = 2000
	maxGrepMatches   = 200
	defaultShellTime = 60 * time.Second
	maxGrepLine      = 500     // bytes of a matching line shown
	maxScanLine      = 1 << 20 // a longer line ends the search of its file
	binarySniff      = 8000    // bytes looked at for a NUL, as git does
)

// Builtins returns the built-in tools (docs/operations.md, "The tool
// worker"), with every file tool confined to root: an os.Root refuses "..",
// absolute paths and symlinks that lead outside it. The file tools also
// refuse the protected directories (DefaultProtect unless WithProtect says
// otherwise) and files with more than one hard link. shell is included only
// when allowShell is set; then the process is also made non-dumpable (see
// hideEnviron), for good; a shell command is not bound by the protection.
func Builtins(root string, allowShell bool, opts ...BuiltinOption) ([]Tool, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("tools: root %s: %w", root, err)
	}
	fsys := files{protect: DefaultProtect}
	for _, opt := range opts {
		if err := opt(&fsys); err != nil {
			return nil, err
		}
	}
	if fsys.root, err = os.OpenRoot(abs); err != nil {
		return nil, fmt.Errorf("tools: root %s: %w", root, err)
	}
	ts := []Tool{
		fn[readArgs]{spec: spec("read_file", "Reads a text file under the worker's root. offset skips lines, limit caps them (default 2000). Files inside protected directories (such as .git) and files with more than one hard link are refused.",
			`{"type":"object","properties":{"path":{"type":"string","minLength":1},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1}},"required":["path"],"additionalProperties":false}`, 30*time.Second),
			call: fsys.read},
		fn[pathArgs]{spec: spec("list_dir", "Lists a directory under the worker's root; directories end with /. A protected directory (such as .git) is listed with (protected) after its name and cannot be listed itself.",
			`{"type":"object","properties":{"path":{"type":"string","minLength":1}},"required":["path"],"additionalProperties":false}`, 30*time.Second),
			call: fsys.list},
		fn[grepArgs]{spec: spec("grep", "Searches files under path (default the root) for a regular expression; glob filters file names (e.g. *.go). Protected directories (such as .git), binary files and files with more than one hard link are skipped.",
			`{"type":"object","properties":{"pattern":{"type":"string","minLength":1},"path":{"type":"string"},"glob":{"type":"string"}},"required":["pattern"],"additionalProperties":false}`, 60*time.Second),
			call: fsys.grep},
		fn[writeArgs]{spec: spec("write_file", "Writes content to a file under the worker's root, creating its directories; the file is replaced whole and is not executable. Protected directories (such as .git) and files with more than one hard link are refused.",
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
		if err := hideEnviron(); err != nil {
			return nil, err
		}
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
type files struct {
	root *os.Root
	// protect names the directories no file tool enters, at any depth.
	protect []string
}

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

// path cleans a model's path and refuses it when it leads into a protected
// directory; it returns the path with its symlinks resolved, the one to open.
func (f files) path(p string) (string, error) {
	p, err := clean(p)
	if err != nil {
		return "", err
	}
	return f.checkProtected(p)
}

// open opens a path under the root without blocking, and only when it is a
// regular file with one hard link or a directory. A FIFO would otherwise
// block its open until some other process opened the other end: the call
// would hang past its deadline and any abort, holding a slot and the
// worker's drain forever. The link count is read from the open file, so a
// link made after a check cannot slip through.
func (f files) open(p string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	file, err := f.root.OpenFile(p, flag|confined.Nonblock, perm)
	if err != nil {
		return nil, nil, err
	}
	info, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() && !info.IsDir() {
		_ = file.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file or a directory (%s)", filepath.ToSlash(p), info.Mode().Type())
	}
	if err := checkLinks(p, info); err != nil {
		_ = file.Close()
		return nil, nil, err
	}
	return file, info, nil
}

func (f files) read(_ context.Context, a readArgs) (Result, error) {
	p, err := f.path(a.Path)
	if err != nil {
		return Result{}, err
	}
	file, info, err := f.open(p, os.O_RDONLY, 0)
	if err != nil {
		return Result{}, err
	}
	defer file.Close()
	if info.IsDir() {
		return Result{}, fmt.Errorf("%s is a directory: use list_dir", filepath.ToSlash(p))
	}
	limit := a.Limit
	if limit <= 0 {
		limit = defaultReadLines
	}
	rd := bufio.NewReaderSize(file, 64<<10)
	if head, _ := rd.Peek(binarySniff); bytes.IndexByte(head, 0) >= 0 {
		return Result{}, fmt.Errorf("%s is a binary file (%d bytes), not text to read", filepath.ToSlash(p), info.Size())
	}
	// The file is read a buffer at a time and never kept beyond the output
	// cap, so a huge file or a huge single line costs no more memory than a
	// small one.
	room := MaxOutput - noteRoom
	var out strings.Builder
	var pos int64 // bytes consumed
	line, kept, atStart := 0, 0, true
	for {
		chunk, err := rd.ReadSlice('\n')
		if len(chunk) > 0 {
			pos += int64(len(chunk))
			if line >= a.Offset {
				if atStart && kept == limit {
					fmt.Fprintf(&out, "… [more lines after line %d: read on with offset %d]\n", line, line)
					break
				}
				if atStart {
					kept++
				}
				if out.Len()+len(chunk) > room {
					cut := output.CutAt(string(chunk), room-out.Len())
					out.Write(chunk[:cut])
					rest := int64(len(chunk) - cut)
					if info.Mode().IsRegular() {
						rest = info.Size() - pos + int64(len(chunk)-cut)
					}
					out.WriteString(output.Note(rest))
					fmt.Fprintf(&out, " [read on with offset %d]", line)
					break
				}
				out.Write(chunk)
			}
			atStart = chunk[len(chunk)-1] == '\n'
			if atStart {
				line++
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", p, err)
		}
	}
	return Result{Output: out.String()}, nil
}

func (f files) list(_ context.Context, a pathArgs) (Result, error) {
	p, err := f.path(a.Path)
	if err != nil {
		return Result{}, err
	}
	dir, info, err := f.open(p, os.O_RDONLY, 0)
	if err != nil {
		return Result{}, err
	}
	defer dir.Close()
	if !info.IsDir() {
		return Result{}, fmt.Errorf("%s is a file, not a directory: use read_file", filepath.ToSlash(p))
	}
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return Result{}, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		// A protected directory is shown, as ls would show it, so that
		// the model knows it is there and why it cannot look inside.
		if f.isProtected(e.Name()) {
			name += " (protected)"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return Result{Output: "(empty directory)"}, nil
	}
	return Result{Output: output.Cap(strings.Join(names, "\n"))}, nil
}

func (f files) grep(ctx context.Context, a grepArgs) (Result, error) {
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return Result{}, fmt.Errorf("pattern: %w", err)
	}
	p, err := f.path(a.Path)
	if err != nil {
		return Result{}, err
	}
	if info, err := f.root.Stat(p); err == nil {
		// A file searched by name is refused as read_file refuses it; in
		// a walk such a file is skipped.
		if err := checkLinks(p, info); err != nil {
			return Result{}, err
		}
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
	start := filepath.ToSlash(p)
	err = fs.WalkDir(fsys, start, func(name string, d fs.DirEntry, err error) error {
		if err != nil && name == start {
			return err
		}
		if err != nil {
			// One unreadable directory (another user's, mode 700) does
			// not end the search of the others.
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if f.isProtected(d.Name()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil // a .git file of a submodule or worktree
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // a symlink, even one inside the root, is not walked into
		}
		if a.Glob != "" {
			if ok, _ := path.Match(a.Glob, d.Name()); !ok {
				return nil
			}
		}
		return f.grepFile(name, re, func(n int, line []byte) error {
			if matches == maxGrepMatches {
				fmt.Fprintf(&out, "… [stopped at %d matches: narrow the pattern or path]\n", maxGrepMatches)
				return errFull
			}
			if len(line) > maxGrepLine {
				cut := output.CutAt(string(line), maxGrepLine)
				line = append(line[:cut:cut], fmt.Sprintf(" … [line cut: %d more bytes]", len(line)-cut)...)
			}
			fmt.Fprintf(&out, "%s:%d: %s\n", name, n, line)
			matches++
			if out.Len() > MaxOutput {
				return errFull
			}
			return nil
		})
	})
	if err != nil && !errors.Is(err, errFull) {
		return Result{}, err
	}
	if matches == 0 {
		return Result{Output: "no matches"}, nil
	}
	return Result{Output: output.Cap(out.String())}, nil
}

// grepFile calls match for each line of a text file that re matches,
// reading a buffer at a time: a binary file is skipped, and so is the rest of
// a file after a line longer than maxScanLine.
func (f files) grepFile(name string, re *regexp.Regexp, match func(n int, line []byte) error) error {
	file, info, err := f.open(filepath.FromSlash(name), os.O_RDONLY, 0)
	if err != nil {
		return nil // unreadable: not text to search
	}
	defer file.Close()
	if !info.Mode().IsRegular() {
		return nil // replaced by a directory since the walk saw it
	}
	rd := bufio.NewReaderSize(file, 64<<10)
	if head, _ := rd.Peek(binarySniff); bytes.IndexByte(head, 0) >= 0 {
		return nil
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), maxScanLine)
	for n := 1; sc.Scan(); n++ {
		if re.Match(sc.Bytes()) {
			if err := match(n, sc.Bytes()); err != nil {
				return err
			}
		}
	}
	return nil
}

// write replaces the file at a.Path whole: the content goes to a temporary
// file beside it, which is renamed over the target. A reader never sees half
// a file, the new file has mode 0644 whatever the old one had (an executable
// hook does not stay executable), and a hard link to the old file keeps the
// old content instead of taking the new.
func (f files) write(_ context.Context, a writeArgs) (Result, error) {
	p, err := f.path(a.Path)
	if err != nil {
		return Result{}, err
	}
	if p == "." {
		return Result{}, fmt.Errorf("%s is a directory", filepath.ToSlash(a.Path))
	}
	if dir := filepath.Dir(p); dir != "." {
		if err := f.root.MkdirAll(dir, 0o755); err != nil {
			return Result{}, err
		}
	}
	tmp, err := f.writeTemp(p, a.Content)
	if err != nil {
		return Result{}, err
	}
	// The target is checked only now, as late as can be, and a refusal
	// takes the temporary file away with it.
	err = f.replaceable(p)
	if err == nil {
		err = f.root.Rename(tmp, p)
	}
	if err != nil {
		_ = f.root.Remove(tmp)
		return Result{}, err
	}
	return Result{Output: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), filepath.ToSlash(p))}, nil
}

// writeTemp writes content to a new file with mode 0644 in the directory of
// p and returns its name; nothing is left behind when it fails.
func (f files) writeTemp(p, content string) (string, error) {
	dir, base := filepath.Dir(p), filepath.Base(p)
	// Hidden, and short enough for any name limit whatever base's length.
	prefix := "." + base[:output.CutAt(base, 64)] + ".tmp-"
	for try := 0; ; try++ {
		tmp := filepath.Join(dir, fmt.Sprintf("%s%016x", prefix, rand.Uint64()))
		file, err := f.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) && try < 10 {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = file.WriteString(content)
		if err == nil {
			// The umask may have taken bits away: the mode is 0644 always.
			err = file.Chmod(0o644)
		}
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = f.root.Remove(tmp)
			return "", err
		}
		return tmp, nil
	}
}

// replaceable refuses to replace what is not a regular file with one link,
// or a file the worker may not write: a rename needs only the directory's
// permission, but a file made read-only says it is not to be changed.
func (f files) replaceable(p string) error {
	info, err := f.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case info.IsDir():
		return fmt.Errorf("%s is a directory", filepath.ToSlash(p))
	case info.Mode()&fs.ModeSymlink != 0:
		// Resolved a moment ago: something is changing the tree.
		return fmt.Errorf("%s became a symbolic link while it was written; try again", filepath.ToSlash(p))
	case !info.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s)", filepath.ToSlash(p), info.Mode().Type())
	}
	if err := checkLinks(p, info); err != nil {
		return err
	}
	file, err := f.root.OpenFile(p, os.O_WRONLY|confined.Nonblock, 0)
	if err != nil {
		return err
	}
	return file.Close()
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

// shell runs commands with sh -c in dir. The command runs in a process
// group of its own, so a timeout or an abort kills it with every child it
// started; it sees only a scrubbed environment (no credentials or API keys of
// the worker), reads nothing from stdin, and its output is capped as it is
// read, however much it writes.
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
		cmd.Env = shellEnv(dir)
		out := &capped{limit: MaxOutput - noteRoom}
		cmd.Stdout, cmd.Stderr = out, out
		ownGroup(cmd)
		// A timeout or an abort kills the whole group, not only sh.
		cmd.Cancel = func() error {
			killGroup(cmd)
			return nil
		}
		// A child that left the group keeps the output pipe open: stop
		// waiting for it soon after the command itself has ended.
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		// Whatever the command left running in its group goes with it.
		killGroup(cmd)
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		text := out.String()
		var exit *exec.ExitError
		switch {
		case cctx.Err() != nil:
			return Result{Output: text + fmt.Sprintf("\n[killed after %s]", timeout), IsError: true}, nil
		case errors.As(err, &exit):
			return Result{Output: text + fmt.Sprintf("\n[exit status %d]", exit.ExitCode()), IsError: true}, nil
		case errors.Is(err, exec.ErrWaitDelay):
			// The command ended; a background child still held its output.
		case err != nil:
			return Result{}, err
		}
		return Result{Output: text}, nil
	}
}

// shellEnv is the whole environment of a shell command: enough to find
// programs and print text, nothing the worker was given to authenticate.
func shellEnv(root string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	env := []string{"PATH=" + path, "HOME=" + root, "PWD=" + root, "LANG=" + lang, "TERM=dumb"}
	if tz, ok := os.LookupEnv("TZ"); ok {
		env = append(env, "TZ="+tz)
	}
	return env
}

// capped keeps the first limit bytes written to it and counts the rest, so
// a command that prints gigabytes costs limit bytes of memory.
type capped struct {
	mu      sync.Mutex
	limit   int
	buf     bytes.Buffer
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := min(max(c.limit-c.buf.Len(), 0), len(p))
	c.buf.Write(p[:keep])
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

// String is the kept output, with the truncation note when bytes were
// dropped.
func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	if c.dropped == 0 {
		return s
	}
	// A character split by the cap is dropped whole.
	cut := len(s)
	if start := output.CutAt(s, len(s)-1); cut > 0 && !utf8.FullRuneInString(s[start:]) {
		cut = start
	}
	return s[:cut] + output.Note(c.dropped+int64(len(s)-cut))
}
