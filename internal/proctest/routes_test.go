package proctest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
)

// TestTenantsPoolRefusesShell: a shared pool (toolworker --tenants) does not
// serve shell, which no tenant's root confines: it refuses to start, saying
// why, rather than let one tenant's command read another's files and keys.
func TestTenantsPoolRefusesShell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	path, config := natstest.CopyTenants(t, filepath.Join(root, "deploy"))
	srv := natstest.StartConfigAsWritten(t, config)
	t.Setenv("JETLOOP_TENANTS", path)
	for _, args := range [][]string{
		{"--tenants", path},
		{}, // the pool named by $JETLOOP_TENANTS
	} {
		p := start(t, root, "toolworker",
			append([]string{"--nats", srv.ClientURL(), "--root", t.TempDir(), "--allow-shell"}, args...)...)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-done
			t.Fatalf("toolworker %v --allow-shell served a shared pool:\n%s", args, p.out.String())
		}
		if code := p.cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(p.out.String(), "--allow-shell cannot serve a shared pool") {
			t.Errorf("toolworker %v --allow-shell: exit %d, want 2 saying why:\n%s", args, code, p.out.String())
		}
	}
}
