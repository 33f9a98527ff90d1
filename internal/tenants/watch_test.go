package tenants

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"
)

// errorsSeen is a log handler that counts the errors logged.
type errorsSeen struct {
	mu sync.Mutex
	n  int
}

func (e *errorsSeen) Enabled(context.Context, slog.Level) bool { return true }
func (e *errorsSeen) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		e.mu.Lock()
		e.n++
		e.mu.Unlock()
	}
	return nil
}
func (e *errorsSeen) WithAttrs([]slog.Attr) slog.Handler { return e }
func (e *errorsSeen) WithGroup(string) slog.Handler      { return e }
func (e *errorsSeen) count() int                         { e.mu.Lock(); defer e.mu.Unlock(); return e.n }

// TestWatch: a tenant listed is served, one added later is started, one
// whose entry changes is restarted, one removed is stopped, a bad file
// keeps what was served (reported once), and the end of the context stops
// every tenant before Watch returns.
func TestWatch(t *testing.T) {
	tenant := func(name string, inFlight int) string {
		return fmt.Sprintf("  - name: %s\n    in_flight: %d\n", name, inFlight) + users()
	}
	p := write(t, "tenants:\n"+tenant("a", 1))
	var mu sync.Mutex
	var events []string
	running := map[string]int{} // a tenant served: the in_flight it was started with
	serve := func(ctx context.Context, tn *Tenant) {
		mu.Lock()
		running[tn.Name] = tn.InFlight
		events = append(events, "start "+tn.Name)
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		delete(running, tn.Name)
		events = append(events, "stop "+tn.Name)
		mu.Unlock()
	}
	same := func(a, b *Tenant) bool { return a.InFlight == b.InFlight }
	seen := &errorsSeen{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Watch(ctx, p, 5*time.Millisecond, slog.New(seen), same, serve)
		close(done)
	}()
	serving := func(want string) {
		t.Helper()
		testkit.WaitFor(t, "serving "+want, func() bool {
			mu.Lock()
			defer mu.Unlock()
			var got []string
			for name, n := range running {
				got = append(got, fmt.Sprintf("%s=%d", name, n))
			}
			slices.Sort(got)
			return strings.Join(got, " ") == want
		})
	}
	rewrite := func(body string) {
		t.Helper()
		// As `jetloop tenants` writes it: a reader never sees half a file.
		if err := WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	serving("a=1")
	rewrite("tenants:\n" + tenant("a", 1) + tenant("b", 2))
	serving("a=1 b=2")
	rewrite("tenants:\n" + tenant("a", 3) + tenant("b", 2))
	serving("a=3 b=2")
	rewrite("tenants:\n" + tenant("b", 2))
	serving("b=2")
	rewrite("tenants: [oops")
	testkit.WaitFor(t, "the bad file to be reported", func() bool { return seen.count() == 1 })
	rewrite("tenants:\n  - name: Bad!\n" + users())
	testkit.WaitFor(t, "the invalid tenant to be reported", func() bool { return seen.count() == 2 })
	rewrite("tenants:\n" + tenant("b", 2) + tenant("c", 4))
	serving("b=2 c=4")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(running) != 0 {
		t.Fatalf("still served after Watch returned: %v", running)
	}
	// b served throughout, through both bad files; c and b stop at the end,
	// in either order.
	want := []string{"start a", "start b", "stop a", "start a", "stop a", "start c"}
	if !slices.Equal(events[:len(want)], want) || len(events) != len(want)+2 {
		t.Fatalf("events %v, want %v then the stops of b and c", events, want)
	}
	if seen.count() != 2 {
		t.Errorf("%d errors logged, want each bad file reported once (2)", seen.count())
	}
}
