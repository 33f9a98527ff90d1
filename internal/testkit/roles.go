package testkit

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/nats-io/nats.go"
)

// Root is the repository's root directory, wherever the test runs.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// StartRoles starts a server from the repository's nats.conf, whose users
// are the roles Role connects as.
func StartRoles(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, filepath.Join(Root(), "nats.conf"))
}

// Role is what a connection needs to be one of nats.conf's roles: its user
// and development password (deploy/dev), and the CLI's inbox prefix, the
// one its permissions allow.
func Role(t testing.TB, role string) []nats.Option {
	t.Helper()
	secret, err := os.ReadFile(filepath.Join(Root(), "deploy", "dev", role+".password"))
	if err != nil {
		t.Fatalf("testkit: role %s: %v", role, err)
	}
	return []nats.Option{nats.UserInfo(role, strings.TrimSpace(string(secret))), nats.CustomInboxPrefix(bus.InboxCLI)}
}
