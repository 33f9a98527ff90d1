package orchestrator_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/events"
)

// threeSteps is a turn of eight inputs: the submit, then a model answer and
// a tool result per step, then the final answer.
const threeSteps = `{"responses": [
	{"tool_calls": [{"name": "count", "arguments": {"n": 1}}]},
	{"tool_calls": [{"name": "count", "arguments": {"n": 2}}]},
	{"tool_calls": [{"name": "count", "arguments": {"n": 3}}]},
	{"text": "counted to three"}]}`

// TestCrashAtEveryStage stops an orchestrator abruptly after it appended the
// first event of its nth input's decision, after it appended them all, and
// after it published that input's jobs, each time before acknowledging the
// input; a fresh orchestrator finishes the turn with a valid log and no tool
// call run twice. (Half the inputs are model answers the orchestrator's own
// runner hands its shard: nothing brings those again but the fresh
// orchestrator's look at the turns it found orphaned.) Every other input
// crashes with the logs in four streams (events.Layout), so that each stage
// is crashed in both layouts.
func TestCrashAtEveryStage(t *testing.T) {
	for _, stage := range []string{orchestrator.StagePartial, orchestrator.StageAppended, orchestrator.StagePublished} {
		for n := 1; n <= 8; n++ {
			streams := 1 + 3*(n%2)
			t.Run(fmt.Sprintf("%s/input-%d/streams-%d", stage, n, streams), func(t *testing.T) {
				h := newHarnessOn(t, testkit.Start(t), eventStreams(streams))
				h.worker()
				crashed, kill := h.orchestratorCrashing(stage, n)
				turn := fmt.Sprintf("t-crash-%s-%d", stage, n)
				h.submit(script(turn, "General", threeSteps))
				<-crashed
				kill()
				h.orchestrator()
				_, fin := h.finished(turn)
				if fin.StopReason != events.StopCompleted || fin.Metrics.ToolCalls != 3 {
					t.Fatalf("finished %+v", fin)
				}
				if got := h.calls.max(); got != 1 {
					t.Fatalf("a tool call ran %d times", got)
				}
			})
		}
	}
}

// TestTwoOrchestratorsNeverCorruptATurn runs two orchestrators on one inbox:
// the inputs of one turn land on both, and optimistic concurrency keeps each
// log whole, in either layout of the logs.
func TestTwoOrchestratorsNeverCorruptATurn(t *testing.T) {
	for _, streams := range []int{1, 4} {
		t.Run(fmt.Sprintf("streams-%d", streams), func(t *testing.T) { twoOrchestrators(t, streams) })
	}
}

// eventStreams provisions the logs in n streams, the rest as by default.
func eventStreams(n int) *bus.Provision {
	p := bus.DefaultProvision(1 << 20)
	p.EventStreams = n
	return &p
}

func twoOrchestrators(t *testing.T, streams int) {
	h := newHarnessOn(t, testkit.Start(t), eventStreams(streams))
	h.worker()
	h.orchestrator()
	h.orchestrator()
	const turns = 20
	for i := range turns {
		h.submit(script(fmt.Sprintf("t-two-%d", i), "General", threeSteps))
	}
	for i := range turns {
		_, fin := h.finished(fmt.Sprintf("t-two-%d", i))
		if fin.StopReason != events.StopCompleted {
			t.Fatalf("turn %d: %+v", i, fin)
		}
	}
}

// TestRestartTakesBackAtOnce kills an orchestrator whose inputs wait ten
// minutes before JetStream hands them to anyone else; the one started next
// takes them back at once and finishes the turn.
func TestRestartTakesBackAtOnce(t *testing.T) {
	for _, stage := range []string{orchestrator.StageAppended, orchestrator.StagePublished} {
		t.Run(stage, func(t *testing.T) {
			h := newHarness(t)
			h.worker()
			var seen atomic.Int32
			crashed := make(chan struct{})
			_, _, kill := h.running(orchestrator.WithAckWait(10*time.Minute), orchestrator.WithCrashHook(func(s string) error {
				if s != stage || seen.Add(1) != 3 {
					return nil
				}
				close(crashed)
				return errors.New("crash")
			}))
			turn := "t-restart-" + stage
			h.submit(script(turn, "General", threeSteps))
			<-crashed
			kill()
			h.orchestrator(orchestrator.WithAckWait(10 * time.Minute))
			if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted {
				t.Fatalf("finished %+v", fin)
			}
			if got := h.calls.max(); got != 1 {
				t.Fatalf("a tool call ran %d times", got)
			}
		})
	}
}
