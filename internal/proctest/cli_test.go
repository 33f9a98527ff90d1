package proctest

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
