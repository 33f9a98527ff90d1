package testkit

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded JetStream server listening on a loopback port, with
// file storage in a directory owned by the test.
type Server struct {
	*server.Server
	Dir string

	opts *server.Options // as it started, for Restart
}

// Start starts a server on a free port and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartIn(t, t.TempDir(), -1)
}

// StartIn starts a server with its store in dir on port (-1 picks one), so a
// test can stop a server and start another on the same data and address.
func StartIn(t testing.TB, dir string, port int) *Server {
	t.Helper()
	return StartWith(t, dir, port, 1<<40)
}

// StartWith is StartIn with a bound on the server's file store, for tests
// of a full server.
func StartWith(t testing.TB, dir string, port int, maxStore int64) *Server {
	t.Helper()
	return start(t, &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		// The streams reserve their max_bytes (1 GiB each) against this,
		// which otherwise follows the disk's free space.
		JetStreamMaxStore: maxStore,
	})
}

// StartSynced is Start with the shipped durability: every stored message
// fsynced before it is acknowledged (sync_interval: always), for
// benchmarks of what that costs.
func StartSynced(t testing.TB) *Server {
	t.Helper()
	return start(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxStore: 1 << 40, SyncAlways: true})
}

// start starts a server with opts and stops the one running when the test
// ends: the first, or the one Restart started.
func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	started := opts.Clone()
	s, err := serve(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Restarted, it listens where it listened.
	started.Port = s.Addr().(*net.TCPAddr).Port
	srv := &Server{Server: s, Dir: opts.StoreDir, opts: started}
	t.Cleanup(func() { stop(srv.Server) })
	return srv
}

// Restart starts a server that was shut down again, on its port and its
// store, in place: its clients reconnect to it, and the test's end stops it
// when it would have stopped the first. Nothing else may use s meanwhile.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	n, err := serve(s.opts.Clone())
	if err != nil {
		t.Fatal(err)
	}
	s.Server = n
}

// serve starts a server with opts, quiet and without signal handlers, and
// returns once it takes connections. Every server of the kit starts here.
func serve(opts *server.Options) (*server.Server, error) {
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("testkit: new server %s: %w", opts.ServerName, err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		stop(s)
		return nil, fmt.Errorf("testkit: server %s not ready", opts.ServerName)
	}
	return s, nil
}

func stop(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// Connect opens a client connection closed when the test ends. Errors that
// nats.go reports asynchronously (a denied publish looks like a timeout
// otherwise) go to the test's log.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return s.ConnectAs(t)
}

// ConnectAs is Connect with more options: a user of a server started from
// a configuration (StartConfig).
func (s *Server) ConnectAs(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, s.ClientURL(), opts...)
}

// connect connects to url, logging asynchronous errors to the test, and
// closes the connection when the test ends.
func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		t.Logf("testkit: async error on %v: %v", subject(sub), err)
	})}, opts...)...)
	if err != nil {
		t.Fatalf("testkit: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testkit: jetstream: %v", err)
	}
	return nc, js
}

func subject(sub *nats.Subscription) string {
	if sub == nil {
		return "connection"
	}
	return sub.Subject
}
