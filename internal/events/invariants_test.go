package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// ev makes an event of turn t1 with the given seq, step and data.
func ev(seq, step int, typ events.Type, data string) events.Envelope {
	return events.Envelope{ID: "e", Type: typ, TurnID: "t1", SessionID: "t1", Seq: seq, Step: step, Data: json.RawMessage(data)}
}

// good is a whole turn: one step with one tool call, then a final answer.
func good() []events.Envelope {
	return []events.Envelope{
		ev(1, 0, events.TurnStarted, `{}`),
		ev(2, 1, events.StepStarted, `{}`),
		ev(3, 1, events.ModelCompleted, `{}`),
		ev(4, 1, events.ToolRequested, `{"call_id":"a"}`),
		ev(5, 1, events.ToolCompleted, `{"call_id":"a"}`),
		ev(6, 1, events.StepChecked, `{"decision":"continue"}`),
		ev(7, 2, events.StepStarted, `{}`),
		ev(8, 2, events.ModelCompleted, `{}`),
		ev(9, 2, events.StepChecked, `{"decision":"stop","stop_reason":"completed"}`),
		ev(10, 2, events.TurnFinished, `{"stop_reason":"completed"}`),
	}
}

func TestCheckLogAcceptsWholeAndUnfinishedTurns(t *testing.T) {
	for n := 1; n <= len(good()); n++ {
		if err := events.CheckLog(good()[:n]); err != nil {
			t.Fatalf("first %d events: %v", n, err)
		}
	}
	rejected := []events.Envelope{ev(1, 0, events.TurnFinished, `{"stop_reason":"rejected","error":"x"}`)}
	if err := events.CheckLog(rejected); err != nil {
		t.Fatal(err)
	}
	aborted := append(good()[:8], ev(9, 2, events.TurnFinished, `{"stop_reason":"aborted"}`))
	if err := events.CheckLog(aborted); err != nil {
		t.Fatalf("an abort may leave its step unchecked: %v", err)
	}
}

func TestCheckLogCatchesEveryBrokenInvariant(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func([]events.Envelope) []events.Envelope
		want string
	}{
		{"a gap in seq", func(l []events.Envelope) []events.Envelope { return append(l[:3:3], l[4:]...) }, "seq"},
		{"a subagent's result from another child", func(l []events.Envelope) []events.Envelope {
			l[3].Data = json.RawMessage(`{"call_id":"a","child_turn_id":"sub-a"}`)
			l[4].Data = json.RawMessage(`{"call_id":"a","child_turn_id":"sub-b"}`)
			return l
		}, "child turn"},
		{"seq not from 1", func(l []events.Envelope) []events.Envelope {
			for i := range l {
				l[i].Seq++
			}
			return l
		}, "seq"},
		{"an event after turn.finished", func(l []events.Envelope) []events.Envelope {
			return append(l, ev(11, 2, events.StepStarted, `{}`))
		}, "not the last"},
		{"two turn.finished", func(l []events.Envelope) []events.Envelope {
			l[8] = ev(9, 2, events.TurnFinished, `{"stop_reason":"completed"}`)
			return l
		}, "not the last"},
		{"a step never checked", func(l []events.Envelope) []events.Envelope {
			l[5] = ev(6, 1, events.ModelCompleted, `{}`)
			return l
		}, "started before step"},
		{"a step checked twice", func(l []events.Envelope) []events.Envelope {
			l[7] = ev(8, 2, events.StepChecked, `{"decision":"continue"}`)
			return l
		}, "checked but not started"},
		{"a call completed twice", func(l []events.Envelope) []events.Envelope {
			l[5] = ev(6, 1, events.ToolCompleted, `{"call_id":"a"}`)
			return l
		}, "completed twice"},
		{"a call completed but never requested", func(l []events.Envelope) []events.Envelope {
			l[4] = ev(5, 1, events.ToolCompleted, `{"call_id":"b"}`)
			return l
		}, "never requested"},
		{"an event of another turn", func(l []events.Envelope) []events.Envelope {
			l[2].TurnID = "t2"
			return l
		}, "belongs to turn"},
		{"a cap stop with its step unchecked", func(l []events.Envelope) []events.Envelope {
			return append(l[:8], ev(9, 2, events.TurnFinished, `{"stop_reason":"step_cap"}`))
		}, "never checked"},
		{"an unknown event type", func(l []events.Envelope) []events.Envelope {
			l[2].Type = "model.exploded"
			return l
		}, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := events.CheckLog(tc.edit(good()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}
