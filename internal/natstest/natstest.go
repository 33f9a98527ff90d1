// Package natstest starts real embedded JetStream servers for tests: jetloop's
// JetStream code is never tested against a mock of the jetstream interfaces.
package natstest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded JetStream server listening on a random loopback port,
// with file storage in a temporary directory owned by the test.
type Server struct {
	*server.Server
	Dir string
}

// Start starts a server and stops it when the test ends.
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
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		// The streams reserve their max_bytes (1 GiB each) against this,
		// which otherwise follows the disk's free space.
		JetStreamMaxStore: maxStore,
		NoLog:             true,
		NoSigs:            true,
	})
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Server{Server: s, Dir: dir}
}

// Connect opens a client connection closed when the test ends. Errors that
// nats.go reports asynchronously (a denied publish looks like a timeout
// otherwise) fail the test's log.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return s.ConnectAs(t)
}

// ConnectAs is Connect with more options: a user of a server started from
// a configuration (StartConfig).
func (s *Server) ConnectAs(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		t.Logf("natstest: async error on %v: %v", subject(sub), err)
	})}, opts...)...)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

func subject(sub *nats.Subscription) string {
	if sub == nil {
		return "connection"
	}
	return sub.Subject
}

// WaitFor polls cond until it holds, failing the test after a minute: tests
// wait on a condition with a deadline, never for a fixed time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForOr(t, what, cond, nil)
}

// WaitForOr is WaitFor that calls explain, when set, before it fails: to
// log what the failure of a long run needs to be understood.
func WaitForOr(t testing.TB, what string, cond func() bool, explain func()) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				explain()
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Fill publishes to subject, in smaller and smaller messages, until the
// stream storing it refuses even a small one: past its MaxBytes (which the
// test sets), as a full store would.
func Fill(t testing.TB, js jetstream.JetStream, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for size := 32 << 10; size > 0; size /= 4 {
		for i := 0; ; i++ {
			_, err := js.Publish(ctx, subject, make([]byte, size))
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "maximum bytes exceeded") {
				break
			}
			if err != nil {
				t.Fatalf("filling the stream of %s: %v", subject, err)
			}
			if i > 1000 {
				t.Fatalf("the stream of %s never filled", subject)
			}
		}
	}
}
