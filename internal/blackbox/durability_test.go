package blackbox

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/embedded"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// jsSync reads the JetStream sync setting a running server reports in its
// varz, as an operator's monitoring would see it.
func jsSync(t *testing.T, s *server.Server) (always bool, interval time.Duration) {
	t.Helper()
	v, err := s.Varz(&server.VarzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.JetStream.Config == nil {
		t.Fatal("varz has no JetStream configuration")
	}
	return v.JetStream.Config.SyncAlways, v.JetStream.Config.SyncInterval
}

// TestShippedServersSyncAlways starts every server jetloop ships — the
// development and production configs and the embedded server — and checks
// that each fsyncs before it acknowledges (docs/durability.md), and
// that the embedded server's opt-out does what it says.
func TestShippedServersSyncAlways(t *testing.T) {
	root := repoRoot(t)
	t.Run("nats.conf", func(t *testing.T) {
		srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
		if always, _ := jsSync(t, srv.Server); !always {
			t.Fatal("nats.conf does not set sync_interval: always")
		}
	})
	t.Run("deploy/production/nats.conf", func(t *testing.T) {
		dir := t.TempDir()
		for _, role := range []string{"admin", "orchestrator", "toolworker", "client", "viewer"} {
			kp, err := nkeys.CreateUser()
			if err != nil {
				t.Fatal(err)
			}
			pub, _ := kp.PublicKey()
			t.Setenv("JETLOOP_"+strings.ToUpper(role)+"_NKEY", pub)
		}
		_, cert, key := makeTLS(t, dir)
		t.Setenv("JETLOOP_TLS_CERT", cert)
		t.Setenv("JETLOOP_TLS_KEY", key)
		t.Setenv("JETLOOP_STORE_DIR", filepath.Join(dir, "store"))
		srv := testkit.StartConfig(t, filepath.Join(root, "deploy", "production", "nats.conf"))
		if always, _ := jsSync(t, srv.Server); !always {
			t.Fatal("deploy/production/nats.conf does not set sync_interval: always")
		}
	})
	embed := func(t *testing.T, opts ...embedded.Option) *server.Server {
		t.Helper()
		s, err := embedded.Start("", filepath.Join(t.TempDir(), "js"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		return s
	}
	t.Run("embedded", func(t *testing.T) {
		if always, _ := jsSync(t, embed(t)); !always {
			t.Fatal("the embedded server does not fsync before acknowledging")
		}
	})
	t.Run("embedded opt-out", func(t *testing.T) {
		always, interval := jsSync(t, embed(t, embedded.Sync("2m")))
		if always || interval != 2*time.Minute {
			t.Fatalf("--sync-interval 2m: sync always %v, interval %v", always, interval)
		}
		if _, err := embedded.Start("", t.TempDir(), embedded.Sync("sometimes")); err == nil {
			t.Fatal("a bad --sync-interval was accepted")
		}
	})
}

// TestDevSyncIntervalFlag: jetloop dev refuses a --sync-interval that is
// neither "always" nor a duration before it starts anything.
func TestDevSyncIntervalFlag(t *testing.T) {
	out, code := runEnv(t, repoRoot(t), nil, "dev", "--sync-interval", "soon")
	if code != 2 || !strings.Contains(out, "--sync-interval") {
		t.Fatalf("jetloop dev --sync-interval soon: exit %d\n%s", code, out)
	}
}
