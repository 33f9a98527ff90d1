package events_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// TestLayoutsPlaceEachLogOnce: in every layout, a turn's subject is taken
// by exactly one stream's subjects, the one Stream names, and its turn and
// session filters match it; a reader learns the layout back from any of its
// streams' subjects.
func TestLayoutsPlaceEachLogOnce(t *testing.T) {
	for _, l := range []events.Layout{events.OneStream, {Streams: 2}, {Streams: 4}, {Streams: 8}, {Streams: 16}} {
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
		names := l.Names()
		if len(names) != max(l.Streams, 1) {
			t.Fatalf("%d streams: names %v", l.Streams, names)
		}
		for k := range names {
			got, ok := events.LayoutOf(k, l.StreamSubjects(k))
			if !ok || got != l {
				t.Errorf("%d streams: stream %d's subjects give layout %v, %v", l.Streams, k, got, ok)
			}
		}
		seen := map[string]bool{}
		for i := range 200 {
			turn := "turn-" + strconv.Itoa(i)
			subject := l.Subject("sess", turn)
			var takers []string
			for k, name := range names {
				if slices.ContainsFunc(l.StreamSubjects(k), func(f string) bool { return matches(f, subject) }) {
					takers = append(takers, name)
				}
			}
			if len(takers) != 1 || takers[0] != l.Stream(turn) {
				t.Fatalf("%d streams: %s is taken by %v, Stream says %s", l.Streams, subject, takers, l.Stream(turn))
			}
			seen[takers[0]] = true
			for _, f := range []string{l.TurnFilter(turn), l.SessionFilter("sess"), l.AllFilter()} {
				if !matches(f, subject) {
					t.Errorf("%d streams: filter %s misses %s", l.Streams, f, subject)
				}
			}
			if matches(l.TurnFilter(turn), l.Subject("sess", turn+"x")) || matches(l.SessionFilter("other"), subject) {
				t.Errorf("%d streams: a filter matches another's log", l.Streams)
			}
			if got := subject[strings.LastIndexByte(subject, '.')+1:]; got != turn {
				t.Errorf("%d streams: the last token of %s is not the turn", l.Streams, subject)
			}
		}
		if len(seen) != len(names) {
			t.Errorf("%d streams: 200 turns fell in %d of them", l.Streams, len(seen))
		}
	}
	for _, n := range []int{-1, 3, 5, 32} {
		if (events.Layout{Streams: n}).Check() == nil {
			t.Errorf("%d streams accepted", n)
		}
	}
	if _, ok := events.LayoutOf(0, []string{"jetloop.events.0.*.*", "jetloop.events.3.*.*"}); ok {
		t.Error("partitions 0 and 3 in one stream taken for a layout")
	}
}

// matches is NATS subject matching of a filter with * and >.
func matches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}
