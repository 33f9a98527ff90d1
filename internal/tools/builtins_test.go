package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/schemas"
)

// builtins returns the built-in tools over a fresh root holding a few files,
// and a directory outside the root with a secret.
func builtins(t *testing.T, shell bool) (map[string]tools.Tool, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.MkdirAll(filepath.Join(root, "pkg", ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("one\ntwo\nthree\nfour\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "pkg", "b.go"), []byte("package pkg\n\nfunc Foo() {}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "pkg", ".git", "HEAD"), []byte("func Foo\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "bin.dat"), []byte("func Foo\x00\x01"), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "secret"), []byte("hunter2\n"), 0o644))
	must(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(root, "escape")))
	must(t, os.Symlink(filepath.Join(base), filepath.Join(root, "updir")))
	ts, err := tools.Builtins(root, shell)
	must(t, err)
	m := map[string]tools.Tool{}
	for _, tool := range ts {
		m[tool.Spec().Name] = tool
	}
	return m, root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func call(t *testing.T, tool tools.Tool, args string) (tools.Result, error) {
	t.Helper()
	if err := schemas.ValidateArgs(tool.Spec().Parameters, json.RawMessage(args)); err != nil {
		t.Fatalf("%s %s fails the tool's own schema: %v", tool.Spec().Name, args, err)
	}
	return tool.Call(context.Background(), json.RawMessage(args))
}

func TestBuiltinsServeTheDocumentedTools(t *testing.T) {
	ts, _ := builtins(t, false)
	for _, name := range []string{"read_file", "list_dir", "grep", "write_file", "echo", "sleep"} {
		tool, ok := ts[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		if err := schemas.CheckParameters(tool.Spec().Parameters); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, ok := ts["shell"]; ok {
		t.Error("shell served without allowShell")
	}
	if ts, _ := builtins(t, true); ts["shell"] == nil {
		t.Error("no shell with allowShell")
	}
}

func TestFileToolsStayInsideTheRoot(t *testing.T) {
	ts, root := builtins(t, false)
	for _, tc := range []struct{ tool, args string }{
		{"read_file", `{"path":"../secret"}`},
		{"read_file", `{"path":"pkg/../../secret"}`},
		{"read_file", `{"path":"` + filepath.Join(filepath.Dir(root), "secret") + `"}`},
		{"read_file", `{"path":"escape"}`},
		{"read_file", `{"path":"updir/secret"}`},
		{"list_dir", `{"path":".."}`},
		{"list_dir", `{"path":"updir"}`},
		{"grep", `{"pattern":"hunter","path":".."}`},
		{"write_file", `{"path":"../planted","content":"x"}`},
		{"write_file", `{"path":"updir/planted","content":"x"}`},
	} {
		res, err := call(t, ts[tc.tool], tc.args)
		if err == nil {
			t.Errorf("%s %s: no error, got %q", tc.tool, tc.args, res.Output)
		}
		if strings.Contains(res.Output, "hunter2") {
			t.Errorf("%s %s leaked the secret", tc.tool, tc.args)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "planted")); err == nil {
		t.Error("write_file wrote outside the root")
	}
	// grep over the root must not follow the symlinks out either.
	res, err := call(t, ts["grep"], `{"pattern":"hunter"}`)
	if err != nil || res.Output != "no matches" {
		t.Errorf("grep followed a symlink out: %q %v", res.Output, err)
	}
}

func TestReadFile(t *testing.T) {
	ts, _ := builtins(t, false)
	for _, tc := range []struct{ args, want string }{
		{`{"path":"a.txt"}`, "one\ntwo\nthree\nfour\n"},
		{`{"path":"a.txt","offset":1,"limit":2}`, "two\nthree\n… [more lines after line 3: read on with offset 3]\n"},
		{`{"path":"a.txt","offset":3}`, "four\n"},
		{`{"path":"./pkg/b.go","limit":1}`, "package pkg\n… [more lines after line 1: read on with offset 1]\n"},
	} {
		res, err := call(t, ts["read_file"], tc.args)
		if err != nil || res.Output != tc.want || res.IsError {
			t.Errorf("read_file %s = %q, %v; want %q", tc.args, res.Output, err, tc.want)
		}
	}
	if _, err := call(t, ts["read_file"], `{"path":"missing.txt"}`); err == nil {
		t.Error("reading a missing file is no error")
	}
}

func TestListGrepWrite(t *testing.T) {
	ts, root := builtins(t, false)
	res, err := call(t, ts["list_dir"], `{"path":"."}`)
	if err != nil || res.Output != "a.txt\nbin.dat\nescape\npkg/\nupdir" {
		t.Errorf("list_dir = %q, %v", res.Output, err)
	}
	res, err = call(t, ts["grep"], `{"pattern":"func \\w+","glob":"*.go"}`)
	if err != nil || res.Output != "pkg/b.go:3: func Foo() {}\n" {
		t.Errorf("grep = %q, %v (binary files and .git must be skipped)", res.Output, err)
	}
	if _, err := call(t, ts["grep"], `{"pattern":"("}`); err == nil {
		t.Error("a bad pattern is no error")
	}
	res, err = call(t, ts["write_file"], `{"path":"new/dir/c.txt","content":"hello"}`)
	if err != nil || res.Output != "wrote 5 bytes to new/dir/c.txt" {
		t.Errorf("write_file = %q, %v", res.Output, err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "new", "dir", "c.txt")); string(data) != "hello" {
		t.Errorf("file holds %q", data)
	}
}

func TestEchoSleepShell(t *testing.T) {
	ts, _ := builtins(t, true)
	if res, _ := call(t, ts["echo"], `{"text":"héllo"}`); res.Output != "héllo" {
		t.Errorf("echo = %q", res.Output)
	}
	if res, _ := call(t, ts["sleep"], `{"ms":1}`); res.Output != "slept" {
		t.Errorf("sleep = %q", res.Output)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ts["sleep"].Call(ctx, json.RawMessage(`{"ms":600000}`)); err == nil {
		t.Error("a cancelled sleep returned no error")
	}
	res, err := call(t, ts["shell"], `{"command":"cat a.txt | wc -l"}`)
	if err != nil || strings.TrimSpace(res.Output) != "4" || res.IsError {
		t.Errorf("shell = %q %v", res.Output, err)
	}
	res, err = call(t, ts["shell"], `{"command":"echo oops; exit 3"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Output, "oops") || !strings.Contains(res.Output, "exit status 3") {
		t.Errorf("failing shell = %+v %v", res, err)
	}
	res, err = call(t, ts["shell"], `{"command":"sleep 30","timeout_ms":50}`)
	if err != nil || !res.IsError || !strings.Contains(res.Output, "killed after") {
		t.Errorf("shell over its timeout = %+v %v", res, err)
	}
}

func TestLongFilesAreTruncatedOnACharacterBoundary(t *testing.T) {
	ts, root := builtins(t, false)
	big := strings.Repeat("é", tools.MaxOutput) // two bytes each, one line
	must(t, os.WriteFile(filepath.Join(root, "big.txt"), []byte(big), 0o644))
	res, err := call(t, ts["read_file"], `{"path":"big.txt"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) > tools.MaxOutput+100 || !strings.Contains(res.Output, "[output truncated:") {
		t.Errorf("output of %d bytes, ends %q", len(res.Output), res.Output[len(res.Output)-60:])
	}
	if !utf8.ValidString(res.Output) {
		t.Error("truncation split a character")
	}
}
