package testkit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// recorder is a test that CheckLogs reports to.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckLogsReadsEveryEvent stores events that fail their schemas, more
// than one read of the stream returns, and checks that CheckLogs reports
// each one.
func TestCheckLogsReadsEveryEvent(t *testing.T) {
	s := Start(t)
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events.StreamEvents, Subjects: []string{"jetloop.events.>"}}); err != nil {
		t.Fatal(err)
	}
	const n = 1500
	for i := range n {
		js.PublishAsync(fmt.Sprintf("jetloop.events.s.t%d", i), []byte(`{}`))
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	r := &recorder{TB: t}
	CheckLogs(r, js)
	failed := 0
	for _, e := range r.errs {
		if strings.Contains(e, "fails its schema") {
			failed++
		}
	}
	if failed != n {
		t.Fatalf("%d of %d invalid events reported; first report: %q", failed, n, r.errs[:min(len(r.errs), 1)])
	}
}
