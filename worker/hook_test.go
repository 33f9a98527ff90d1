package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// hookJob publishes a job asking hook about task 1 of workflow.
func (e *env) hookJob(hook, workflow string, ended *events.HookEnded) {
	e.t.Helper()
	j := events.HookJob{WorkflowID: workflow, SessionID: workflow, Task: 1, TurnID: workflow + "-1", Last: true,
		Checkpoint: events.WorkflowCheckpointedData{Task: 1, Metrics: events.WorkflowMetrics{Tasks: 1, Steps: 2, ToolCalls: 3}},
		TaskResult: events.HookTaskResult{StopReason: events.StopCompleted, Output: "done",
			Metrics: events.Metrics{Steps: 2, ToolCalls: 3, ModelCalls: 2, InputTokens: 40, OutputTokens: 7, DurationMs: 12}},
		Deadline: time.Now().Add(time.Minute).UTC(), Ended: ended}
	data, err := events.Marshal(j)
	must(e.t, err)
	e.publish(events.HookSubject(hook), data)
}

// hookAnswer waits for hook's answer about workflow in the inbox.
func (e *env) hookAnswer(hook, workflow string) events.HookAnswer {
	e.t.Helper()
	var a events.HookAnswer
	e.waitFor("the answer about "+workflow, func() bool {
		s, err := e.js.Stream(context.Background(), events.StreamInbox)
		if err != nil {
			return false
		}
		m, err := s.GetLastMsgForSubject(context.Background(), bus.Stored(events.HookAnswerSubjectOf(hook, workflow)))
		if errors.Is(err, jetstream.ErrMsgNotFound) || err != nil {
			return false
		}
		must(e.t, json.Unmarshal(m.Data, &a))
		return true
	})
	return a
}

// TestHookFailuresAreAnsweredAsErrors: a hook's error, panic or unknown
// decision is answered as error, the hook's message the reason, not as a
// stop; a hook is handed the task's own metrics and, on a final job, how
// the workflow ended.
func TestHookFailuresAreAnsweredAsErrors(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	seen := map[string]worker.Checkpoint{}
	hooks := map[string]worker.HookFunc{
		"fails": func(context.Context, worker.Checkpoint) (worker.Decision, error) {
			return worker.Decision{}, errors.New("disk full")
		},
		"panics": func(context.Context, worker.Checkpoint) (worker.Decision, error) { panic("nil map") },
		"odd": func(context.Context, worker.Checkpoint) (worker.Decision, error) {
			return worker.Decision{Decision: "maybe"}, nil
		},
		"keeps": func(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
			mu.Lock()
			defer mu.Unlock()
			seen[cp.WorkflowID] = cp
			return worker.Continue("kept"), nil
		},
	}
	e.serve(nil, func(w *worker.Worker) error {
		for name, h := range hooks {
			if err := w.HandleHook(name, h); err != nil {
				return err
			}
		}
		return nil
	})
	for hook, reason := range map[string]string{"fails": "disk full", "panics": "internal error: nil map",
		"odd": `answered "maybe": a hook answers continue, stop or wait`} {
		e.hookJob(hook, "wf-"+hook, nil)
		if a := e.hookAnswer(hook, "wf-"+hook); a.Decision != events.GateError || a.Reason != reason || a.Hook != hook {
			t.Errorf("hook %s answered %+v", hook, a)
		}
	}
	e.hookJob("keeps", "wf-asked", nil)
	e.hookJob("keeps", "wf-ended", &events.HookEnded{StopReason: events.StopTimeout, Error: "timeout"})
	e.hookAnswer("keeps", "wf-asked")
	e.hookAnswer("keeps", "wf-ended")
	mu.Lock()
	defer mu.Unlock()
	asked, ended := seen["wf-asked"], seen["wf-ended"]
	if asked.TaskMetrics.ToolCalls != 3 || asked.TaskMetrics.InputTokens != 40 || asked.Metrics.ToolCalls != 3 || asked.Ended != nil {
		t.Errorf("asked: %+v", asked)
	}
	if ended.Ended == nil || ended.Ended.StopReason != events.StopTimeout || ended.Ended.Error != "timeout" {
		t.Errorf("a final job: %+v", ended)
	}
}
