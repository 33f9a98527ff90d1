package blackbox

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"
)

// deadURL is a server URL where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "nats://" + addr
}

// TestFailFast: every process given a URL where no server answers exits 1
// at once with an error that names the URL, instead of waiting in silence.
func TestFailFast(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	url := deadURL(t)
	root := repoRoot(t)
	for _, args := range [][]string{
		{"jetloop", "turns", "--nats", url},
		{"jetloop", "submit", "--nats", url, "hi"},
		{"jetloop", "--nats", url, "turns"}, // before the command, as nats --server takes it
		{"orchestrator", "--nats", url, "--agents", "data/AGENTS.md"},
		{"toolworker", "--nats", url, "--root", t.TempDir()},
	} {
		cmd := exec.Command(filepath.Join(binaries(t), args[0]), args[1:]...)
		cmd.Dir = root
		cmd.Env = append(cmd.Environ(), "NO_COLOR=1")
		start := time.Now()
		out, _ := cmd.CombinedOutput()
		took := time.Since(start)
		code := cmd.ProcessState.ExitCode()
		if code == 0 || !strings.Contains(string(out), strings.TrimPrefix(url, "nats://")) {
			t.Errorf("%v: exit %d, want non-zero and the URL named:\n%s", args, code, out)
		}
		if took > 10*time.Second {
			t.Errorf("%v took %s to fail", args, took)
		}
	}
}

// TestServiceHelp: the orchestrator and the tool worker write their flags
// --name, as jetloop and the docs do.
func TestServiceHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	for name, flag := range map[string]string{"orchestrator": "agents", "toolworker": "root"} {
		out, _ := exec.Command(filepath.Join(binaries(t), name), "--help").CombinedOutput()
		if !strings.Contains(string(out), "usage: "+name) || !strings.Contains(string(out), "\n  --"+flag+" ") || strings.Contains(string(out), "\n  -"+flag+" ") {
			t.Errorf("%s --help:\n%s", name, out)
		}
	}
}

// TestVersionFlags: every binary says which build it is.
func TestVersionFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	for _, args := range [][]string{{"jetloop", "version"}, {"jetloop", "--version"}, {"orchestrator", "--version"}, {"toolworker", "--version"}} {
		out, err := exec.Command(filepath.Join(binaries(t), args[0]), args[1:]...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), args[0]+" ") || !strings.Contains(string(out), "go1.") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}

// TestDevAnywhere: jetloop dev in an empty directory (go install, then run
// anywhere) serves the built-in General agent, and the command its try:
// line prints runs a turn to completion; demo works there too.
func TestDevAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	empty := t.TempDir()
	url := deadURL(t) // a free address for dev's server
	dev := start(t, empty, "jetloop", "dev", "--nats", url, "--no-color")
	var try string
	testkit.WaitFor(t, "dev's try: line", func() bool {
		for line := range strings.Lines(dev.out.String()) {
			if rest, ok := strings.CutPrefix(line, "try: "); ok {
				try = strings.TrimSpace(rest)
				return true
			}
		}
		return false
	})
	if !strings.Contains(dev.out.String(), "built-in General agent") {
		t.Fatalf("dev did not say it serves the built-in agents:\n%s", dev.out.String())
	}
	// try: NATS_URL=… jetloop submit … 'hello': run it as a shell would.
	fields := strings.Fields(try)
	env, ok := strings.CutPrefix(fields[0], "NATS_URL=")
	if !ok || fields[1] != "jetloop" {
		t.Fatalf("try: %s", try)
	}
	var args []string
	for _, f := range fields[2:] {
		args = append(args, strings.Trim(f, "'"))
	}
	cmd := exec.Command(filepath.Join(binaries(t), "jetloop"), args...)
	cmd.Dir = empty
	cmd.Env = append(cmd.Environ(), "NO_COLOR=1", "NATS_URL="+env)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "finished: completed") {
		t.Fatalf("%s: %v\n%s", try, err, out)
	}
	if code := dev.stop(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM:\n%s", code, dev.out.String())
	}

	out2, code := run(t, t.TempDir(), "demo", "--no-color")
	if code != 0 || !strings.Contains(out2, "finished: completed") {
		t.Fatalf("demo in an empty directory exited %d:\n%s", code, out2)
	}
}
