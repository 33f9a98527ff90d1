package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestServerKeepsMessagesAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s := StartIn(t, dir, -1)
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()

	s2 := StartIn(t, dir, -1)
	_, js2 := s2.Connect(t)
	st, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, "t.a")
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != "hello" {
		t.Fatalf("got %q after restart, want hello", msg.Data)
	}
}

// TestRestartKeepsPortAndStore: a server restarted in place listens where
// it did, and a client of the first reconnects and reads what it stored.
func TestRestartKeepsPortAndStore(t *testing.T) {
	s := Start(t)
	url := s.ClientURL()
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	s.Restart(t)
	if got := s.ClientURL(); got != url {
		t.Fatalf("restarted at %s, want %s", got, url)
	}
	var msg *jetstream.RawStreamMsg
	WaitFor(t, "the first client to read through the restarted server", func() bool {
		st, err := js.Stream(ctx, "T")
		if err != nil {
			return false
		}
		msg, err = st.GetLastMsgForSubject(ctx, "t.a")
		return err == nil
	})
	if string(msg.Data) != "hello" {
		t.Fatalf("got %q after restart, want hello", msg.Data)
	}
}
