package testkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/nats-io/nats.go/jetstream"
)

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

// EnsureStreams makes jetloop's streams, consumers and buckets on the
// server js is connected to (bus.EnsureStreams), failing the test if it
// cannot.
func EnsureStreams(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
}
