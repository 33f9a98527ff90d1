package testkit

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// StartConfig starts a server from a nats-server configuration file, as an
// operator would with nats-server -c, and stops it when the test ends.
// Everything is as the file says but where a test must differ: a free
// loopback port and a store of its own. Variables the file takes from the
// environment are read when it is parsed: set them first (t.Setenv).
func StartConfig(t testing.TB, path string) *Server {
	t.Helper()
	dir := t.TempDir()
	return startConfig(t, path, func(opts *server.Options) {
		opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", -1, dir
	})
}

// StartConfigAsWritten starts a server from a configuration file with
// nothing overridden, so that a reload of the file (nats-server --signal
// reload, $SYS.REQ.SERVER.<id>.RELOAD) finds the options it started with:
// the file names its own free port and store (FreePort, t.TempDir()).
func StartConfigAsWritten(t testing.TB, path string) *Server {
	t.Helper()
	return startConfig(t, path, func(*server.Options) {})
}

// startConfig starts a server from the file at path with the options edit
// changes, quiet and without signal handlers (which a reload does not
// compare), and stops it when the test ends.
func startConfig(t testing.TB, path string, edit func(*server.Options)) *Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("testkit: %s: %v", path, err)
	}
	edit(opts)
	return start(t, opts)
}

// FreePort is a free loopback port for a configuration file to name.
func FreePort(t testing.TB) int {
	t.Helper()
	return freePorts(t, 1)[0]
}
