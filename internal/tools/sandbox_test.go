package tools_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/tools"
)

// sandbox is a root inside base, and beside it, outside the root, a secret
// file and a directory holding another; the root has a symlink to the secret
// and one to base.
type sandbox struct {
	base, root string
	tools      map[string]tools.Tool
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(t, os.MkdirAll(filepath.Join(base, "outside"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub", "in.txt"), []byte("inside\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "secret"), []byte("hunter2\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "outside", "secret"), []byte("hunter2\n"), 0o644))
	must(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(root, "escape")))
	must(t, os.Symlink(filepath.Join(base, "outside"), filepath.Join(root, "outdir")))
	must(t, os.Symlink(base, filepath.Join(root, "updir")))
	ts, err := tools.Builtins(root, false)
	must(t, err)
	m := map[string]tools.Tool{}
	for _, tool := range ts {
		m[tool.Spec().Name] = tool
	}
	return &sandbox{base: base, root: root, tools: m}
}

// TestFileToolsRefuseEveryEscape tries each way out of the root with each
// file tool: "..", an absolute path (outside and even inside the root), a
// symlink that points out, and a path through a symlinked parent. Every one
// is an error, no output shows the secret, and nothing is written or
// overwritten outside the root.
func TestFileToolsRefuseEveryEscape(t *testing.T) {
	s := newSandbox(t)
	abs := func(p string) string { return strconv.Quote(filepath.Join(s.base, p)) }
	absIn := strconv.Quote(filepath.Join(s.root, "sub", "in.txt"))
	cases := map[string][]string{
		"read_file": {
			`{"path":"../secret"}`, `{"path":"sub/../../secret"}`,
			`{"path":` + abs("secret") + `}`, `{"path":` + absIn + `}`,
			`{"path":"escape"}`,
			`{"path":"updir/secret"}`, `{"path":"outdir/secret"}`,
		},
		"list_dir": {
			`{"path":".."}`, `{"path":"sub/../.."}`,
			`{"path":` + abs("outside") + `}`, `{"path":` + strconv.Quote(s.root) + `}`,
			`{"path":"outdir"}`, `{"path":"updir"}`,
			`{"path":"updir/outside"}`,
		},
		"grep": {
			`{"pattern":"hunter","path":".."}`, `{"pattern":"hunter","path":"../outside"}`,
			`{"pattern":"hunter","path":` + abs("outside") + `}`, `{"pattern":"inside","path":` + absIn + `}`,
			`{"pattern":"hunter","path":"escape"}`, `{"pattern":"hunter","path":"outdir"}`,
			`{"pattern":"hunter","path":"updir/outside"}`, `{"pattern":"hunter","path":"outdir/secret"}`,
		},
		"write_file": {
			`{"path":"../planted","content":"x"}`, `{"path":"sub/../../planted","content":"x"}`,
			`{"path":` + abs("planted") + `,"content":"x"}`, `{"path":` + absIn + `,"content":"x"}`,
			`{"path":"escape","content":"overwritten"}`,
			`{"path":"updir/planted","content":"x"}`, `{"path":"outdir/planted","content":"x"}`,
			`{"path":"outdir/new/planted","content":"x"}`,
		},
	}
	for tool, list := range cases {
		for _, args := range list {
			t.Run(tool+" "+args, func(t *testing.T) {
				res, err := call(t, s.tools[tool], args)
				if err == nil {
					t.Errorf("no error; output %q", res.Output)
				}
				if strings.Contains(res.Output, "hunter2") {
					t.Errorf("the secret leaked: %q", res.Output)
				}
			})
		}
	}
	for _, p := range []string{"secret", "outside/secret"} {
		if data, err := os.ReadFile(filepath.Join(s.base, p)); err != nil || string(data) != "hunter2\n" {
			t.Errorf("%s outside the root now holds %q (%v)", p, data, err)
		}
	}
	for _, p := range []string{"planted", "outside/planted", "outside/new"} {
		if _, err := os.Lstat(filepath.Join(s.base, p)); err == nil {
			t.Errorf("%s was written outside the root", p)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(s.root, "sub", "in.txt")); string(data) != "inside\n" {
		t.Errorf("an absolute path inside the root was written: %q", data)
	}
	// A search of the whole root does not follow the symlinks out.
	res, err := call(t, s.tools["grep"], `{"pattern":"hunter"}`)
	if err != nil || res.Output != "no matches" {
		t.Errorf("grep of the root = %q, %v", res.Output, err)
	}
	// The same tools work inside the root: the refusals are not blanket.
	if res, err := call(t, s.tools["read_file"], `{"path":"sub/./in.txt"}`); err != nil || res.Output != "inside\n" {
		t.Errorf("read_file inside = %q, %v", res.Output, err)
	}
	if _, err := call(t, s.tools["write_file"], `{"path":"sub/new.txt","content":"ok"}`); err != nil {
		t.Errorf("write_file inside: %v", err)
	}
}

var truncation = regexp.MustCompile(`\n… \[output truncated: (\d+) more bytes\]`)

// cutOff checks an output is within the cap and ends its kept part with the
// truncation marker, and returns the kept part and the bytes it says it cut.
func cutOff(t *testing.T, out string) (kept string, dropped int) {
	t.Helper()
	if len(out) > tools.MaxOutput {
		t.Fatalf("output of %d bytes, over the cap of %d", len(out), tools.MaxOutput)
	}
	loc := truncation.FindStringSubmatchIndex(out)
	if loc == nil {
		t.Fatalf("no truncation marker in %d bytes ending %q", len(out), out[max(len(out)-80, 0):])
	}
	n, _ := strconv.Atoi(out[loc[2]:loc[3]])
	return out[:loc[0]], n
}

func TestReadsAreCappedWithAnExplicitMarker(t *testing.T) {
	s := newSandbox(t)
	// One line of 1 MiB: neither kept in memory nor returned whole.
	size := 1 << 20
	must(t, os.WriteFile(filepath.Join(s.root, "huge.txt"), []byte(strings.Repeat("x", size)), 0o644))
	res, err := call(t, s.tools["read_file"], `{"path":"huge.txt"}`)
	must(t, err)
	kept, dropped := cutOff(t, res.Output)
	if len(kept)+dropped != size || strings.Trim(kept, "x") != "" {
		t.Errorf("kept %d bytes and says %d more, of a file of %d", len(kept), dropped, size)
	}
	// Many short lines past the cap: the same marker, and where to read on.
	lines := strings.Repeat(strings.Repeat("y", 99)+"\n", 4000) // 400 000 bytes
	must(t, os.WriteFile(filepath.Join(s.root, "long.txt"), []byte(lines), 0o644))
	res, err = call(t, s.tools["read_file"], `{"path":"long.txt","limit":5000}`)
	must(t, err)
	kept, dropped = cutOff(t, res.Output)
	if len(kept)+dropped != len(lines) || !strings.HasPrefix(lines, kept) || !strings.Contains(res.Output, "read on with offset") {
		t.Errorf("kept %d bytes and says %d more, of %d: %q", len(kept), dropped, len(lines), res.Output[len(kept):])
	}
	// A binary file is refused, not dumped.
	must(t, os.WriteFile(filepath.Join(s.root, "blob.bin"), []byte("ELF\x00\x01\x02"), 0o644))
	if res, err := call(t, s.tools["read_file"], `{"path":"blob.bin"}`); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Errorf("read_file of a binary file = %q, %v", res.Output, err)
	}
	if _, err := call(t, s.tools["read_file"], `{"path":"sub"}`); err == nil || !strings.Contains(err.Error(), "list_dir") {
		t.Errorf("read_file of a directory: %v", err)
	}
}

func TestGrepOutputIsCapped(t *testing.T) {
	s := newSandbox(t)
	// A match on a 100 KB line shows the start of the line and says so.
	must(t, os.WriteFile(filepath.Join(s.root, "min.js"), []byte("needle"+strings.Repeat("z", 100_000)+"\n"), 0o644))
	res, err := call(t, s.tools["grep"], `{"pattern":"needle","glob":"*.js"}`)
	must(t, err)
	if len(res.Output) > 1000 || !strings.Contains(res.Output, "[line cut: ") {
		t.Errorf("a long matching line came back as %d bytes: %.200q", len(res.Output), res.Output)
	}
	// More matches than the limit: the search stops and says so.
	var many strings.Builder
	for i := range 300 {
		fmt.Fprintf(&many, "match %d\n", i)
	}
	must(t, os.WriteFile(filepath.Join(s.root, "many.txt"), []byte(many.String()), 0o644))
	res, err = call(t, s.tools["grep"], `{"pattern":"^match","path":"many.txt"}`)
	must(t, err)
	if n := strings.Count(res.Output, "\n"); n != 201 || !strings.Contains(res.Output, "[stopped at 200 matches") {
		t.Errorf("grep gave %d lines, ending %q", n, res.Output[max(len(res.Output)-80, 0):])
	}
}
