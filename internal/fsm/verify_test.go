package fsm

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// capped is a turn that hits its step cap: every kind of decision the
// machine makes on its own is in it (start, checks, sentinel, finish).
func capped(t *testing.T) []events.Envelope {
	t.Helper()
	_, log := feed(t, &clock{now: t0}, start(func(s *Start) { s.Limits.Steps = 2; s.Digest = "d" }),
		answer(1, "", echo("a", "1")), result("a", "1"),
		answer(2, "", echo("b", "2")), result("b", "2"),
		summary("so far"))
	return log
}

func TestVerifyRederivesEveryDecision(t *testing.T) {
	log := capped(t)
	n, err := Verify(log)
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Errorf("%d decisions re-derived, want 6 (one per input)", n)
	}
}

func TestVerifyReportsAnEditedDecision(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(e *events.Envelope) bool
	}{
		{"a step check that continued past the cap", func(e *events.Envelope) bool {
			if e.Type != events.StepChecked || e.Step != 2 {
				return false
			}
			e.Data = json.RawMessage(`{"decision":"continue"}`)
			return true
		}},
		{"a sentinel with another cause", func(e *events.Envelope) bool {
			if e.Type != events.TurnSentinel {
				return false
			}
			e.Data = json.RawMessage(`{"kind":"cap_hit","reason":"budget","text":"Tool budget exhausted (50 calls)\n\nso far"}`)
			return true
		}},
		{"a different stop reason", func(e *events.Envelope) bool {
			if e.Type != events.TurnFinished {
				return false
			}
			var d events.TurnFinishedData
			_ = json.Unmarshal(e.Data, &d)
			d.StopReason = events.StopBudget
			e.Data, _ = json.Marshal(d)
			return true
		}},
		{"other tools offered", func(e *events.Envelope) bool {
			if e.Type != events.TurnStarted {
				return false
			}
			var d events.TurnStartedData
			_ = json.Unmarshal(e.Data, &d)
			d.Tools = append(d.Tools, "shell")
			e.Data, _ = json.Marshal(d)
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := capped(t)
			seq := 0
			for i := range log {
				if tc.edit(&log[i]) {
					seq = log[i].Seq
					break
				}
			}
			if seq == 0 {
				t.Fatal("nothing edited")
			}
			_, err := Verify(log)
			var d *Divergence
			if !errors.As(err, &d) || d.Seq != seq || d.Derived == nil {
				t.Fatalf("err = %v, want a divergence at seq %d", err, seq)
			}
		})
	}
}

func TestVerifyReportsAnEventNoInputExplains(t *testing.T) {
	log := capped(t)
	last := log[len(log)-1]
	extra := log[1] // a step.started after the turn.finished
	extra.Seq, extra.Time = last.Seq+1, last.Time
	_, err := Verify(append(log, extra))
	var d *Divergence
	if !errors.As(err, &d) || d.Seq != extra.Seq {
		t.Fatalf("err = %v, want a divergence at the stray event", err)
	}
}

// A decision appended in two goes (a crash in between, the input decided
// again later) verifies: the second go's events come at a later time.
func TestVerifyAcceptsADecisionRepairedLater(t *testing.T) {
	c := &clock{now: t0}
	s, log := feed(t, c, start(func(s *Start) { s.Digest = "d" }), answer(1, "", echo("a", "1")))
	d, err := Decide(s, result("a", "1"), c.env()) // tool.completed, step.checked, step.started
	if err != nil || len(d.Events) != 3 {
		t.Fatalf("%v %d", err, len(d.Events))
	}
	partial, err := Fold(append(log, d.Events[0]))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Decide(partial, result("a", "1"), c.env())
	if err != nil || len(again.Events) != 2 {
		t.Fatalf("repair: %v %d", err, len(again.Events))
	}
	repaired := append(append(log, d.Events[0]), again.Events...)
	if _, err := Verify(repaired); err != nil {
		t.Fatal(err)
	}
}
