package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/turnlog"
)

// seedTurns stores n copies of the recorded logs under new turn ids: most
// finished, every tenth paused (the recorded paused turn).
func seedTurns(tb testing.TB, n int) *testkit.Server {
	tb.Helper()
	srv := testkit.Start(tb)
	_, js := srv.Connect(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js); err != nil {
		tb.Fatal(err)
	}
	store, err := logstore.New(ctx, js)
	if err != nil {
		tb.Fatal(err)
	}
	finished, err := readLogFile("testdata/completed.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	paused, err := readLogFile("testdata/paused.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	// The recorded turn went on after its pause: keep it paused.
	for i, e := range paused {
		if e.Type == events.TurnPaused {
			paused = paused[:i+1]
			break
		}
	}
	for i := range n {
		src := finished
		if i%10 == 0 {
			src = paused
		}
		turn := fmt.Sprintf("t%04d", i)
		log := make([]events.Envelope, len(src))
		for j, e := range src {
			e.TurnID, e.SessionID, e.ID = turn, turn, fmt.Sprintf("%s-%d", turn, j)
			log[j] = e
		}
		if _, err := store.Append(ctx, 0, log); err != nil {
			tb.Fatal(err)
		}
	}
	return srv
}

// The lister reads a finished turn with two direct gets and folds only the
// turns under way.
func TestListerFoldsOnlyUnfinishedTurns(t *testing.T) {
	srv := seedTurns(t, 30)
	_, js := srv.Connect(t)
	l, err := turnlog.NewLister(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	list, err := l.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 30 || l.Folded() != 3 {
		t.Fatalf("%d turns, %d folded", len(list), l.Folded())
	}
	paused := 0
	for _, s := range list {
		switch s.Status {
		case StatusPaused:
			paused++
			if s.Waiting == nil || s.Agent == "" {
				t.Errorf("%+v", s)
			}
		case StatusFinished:
			if s.StopReason != events.StopCompleted || s.Agent != "General" || s.Steps != 4 || s.ToolCalls == 0 {
				t.Errorf("%+v", s)
			}
		}
	}
	if paused != 3 {
		t.Fatalf("%d paused", paused)
	}
}

// BenchmarkTurns1000 lists 1,000 turns (100 of them paused and folded), as
// jetloop turns does.
func BenchmarkTurns1000(b *testing.B) {
	srv := seedTurns(b, 1000)
	_, js := srv.Connect(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		l, err := turnlog.NewLister(ctx, js)
		if err != nil {
			b.Fatal(err)
		}
		list, err := l.List(ctx, "")
		if err != nil || len(list) != 1000 {
			b.Fatalf("%d %v", len(list), err)
		}
	}
}

// BenchmarkTurns1000FoldAll is what the listing would cost reading and
// folding every log, for comparison.
func BenchmarkTurns1000FoldAll(b *testing.B) {
	srv := seedTurns(b, 1000)
	_, js := srv.Connect(b)
	ctx := context.Background()
	l, err := turnlog.NewLister(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		for i := range 1000 {
			if _, err := l.Fold(ctx, fmt.Sprintf("t%04d", i)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestTurnsSinceAndLimit: --since keeps the turns started since a time or
// a duration ago, --limit the newest few.
func TestTurnsSinceAndLimit(t *testing.T) {
	e := newEnv(t)
	hi := e.script("hi.yaml", "responses: [{text: hello}]\n")
	for _, turn := range []string{"t1", "t2", "t3"} {
		e.mustRun(ExitOK, "submit", "--watch", "--agent", "Wide", "--script", hi, "--turn", turn, "hi")
	}
	ids := func(out string) string {
		var got []string
		for id := range rows(t, out) {
			got = append(got, id)
		}
		slices.Sort(got)
		return strings.Join(got, " ")
	}
	if got := ids(e.mustRun(ExitOK, "turns", "--json", "--limit", "2")); got != "t2 t3" {
		t.Errorf("--limit 2: %s", got)
	}
	if got := ids(e.mustRun(ExitOK, "turns", "--json", "--since", "1h")); got != "t1 t2 t3" {
		t.Errorf("--since 1h: %s", got)
	}
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if out := e.mustRun(ExitOK, "turns", "--since", later); out != "no turns\n" {
		t.Errorf("--since %s:\n%s", later, out)
	}
	e.mustRun(ExitUsage, "turns", "--since", "soon")
}
