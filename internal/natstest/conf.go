package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartConfig starts a server from a nats-server configuration file, as an
// operator would with nats-server -c, and stops it when the test ends.
// Everything is as the file says but where a test must differ: a free
// loopback port and a store of its own. Variables the file takes from the
// environment are read when it is parsed: set them first (t.Setenv).
func StartConfig(t testing.TB, path string) *Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("natstest: %s: %v", path, err)
	}
	dir := t.TempDir()
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", -1, dir
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server from %s: %v", path, err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server from %s not ready", path)
	}
	return &Server{Server: s, Dir: dir}
}

// StartConfigAsWritten starts a server from a configuration file with
// nothing overridden, so that a reload of the file (nats-server --signal
// reload, $SYS.REQ.SERVER.<id>.RELOAD) finds the options it started with:
// the file names its own free port and store (FreePort, t.TempDir()).
func StartConfigAsWritten(t testing.TB, path string) *Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("natstest: %s: %v", path, err)
	}
	opts.NoLog, opts.NoSigs = true, true // not compared by a reload
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server from %s: %v", path, err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server from %s not ready", path)
	}
	return &Server{Server: s, Dir: opts.StoreDir}
}

// FreePort is a free loopback port for a configuration file to name.
func FreePort(t testing.TB) int {
	t.Helper()
	return freePorts(t, 1)[0]
}
