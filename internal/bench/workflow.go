package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// WorkflowCost is what the outer loop adds to its tasks' turns:
// a workflow of one-step tasks (each turn one scripted answer, no tools),
// measured from the orchestrator's timestamps in the logs.
type WorkflowCost struct {
	Tasks int `json:"tasks"`
	// GapP50Ms and GapP99Ms are the time from a task's turn.finished to
	// the next task's turn.started: task.finished, the checkpoint (log and
	// KV), the gate, task.started and the next turn's submission and start.
	GapP50Ms float64 `json:"gap_p50_ms"`
	GapP99Ms float64 `json:"gap_p99_ms"`
	// FirstGapsP50Ms and LastGapsP50Ms are the p50 of the first and of the
	// last ten gaps: a later task's turn starts with a longer session.
	FirstGapsP50Ms float64 `json:"first_gaps_p50_ms"`
	LastGapsP50Ms  float64 `json:"last_gaps_p50_ms"`
	// A gap in three parts, p50 of each: EndP50Ms from a task's
	// turn.finished to its task.finished (the turn's last appends, the
	// task input's hop), GateP50Ms from there to the next task.started
	// (the checkpoint in the log and KV, the gate), StartP50Ms from there to
	// the next turn.started (the submission's hop and the turn's start).
	EndP50Ms   float64 `json:"end_p50_ms"`
	GateP50Ms  float64 `json:"gate_p50_ms"`
	StartP50Ms float64 `json:"start_p50_ms"`
	// OverheadMs is (workflow.started to workflow.finished − the sum of the
	// task turns' own durations) / tasks.
	OverheadMs float64 `json:"overhead_ms_per_task"`
	// TurnP50Ms is a task turn's own duration, turn.started to
	// turn.finished.
	TurnP50Ms float64 `json:"turn_p50_ms"`
	Seconds   float64 `json:"seconds"`
}

// workflowSubmission is a workflow of n tasks, each a turn whose scripted
// model answers at once without tools.
func workflowSubmission(id string, n int) ([]byte, error) {
	answer, err := json.Marshal(model.Script{Responses: []model.ScriptResponse{{Text: "done"}}})
	if err != nil {
		return nil, err
	}
	tasks := make([]events.Task, n)
	for i := range tasks {
		input, _ := json.Marshal(fmt.Sprintf("Task %d: answer at once.", i+1))
		tasks[i] = events.Task{Input: input, Model: "script", Script: answer}
	}
	return json.Marshal(events.WorkflowSubmit{WorkflowID: id, Agent: "Bench", Tasks: tasks,
		Limits: &events.WorkflowLimits{MaxTasks: n}})
}

// measureWorkflow submits a workflow of n one-step tasks through submitJS,
// waits for it to finish, and reads its log and its tasks' logs through
// readJS.
func measureWorkflow(ctx context.Context, submitJS, readJS jetstream.JetStream, w *watcher, id string, n int) (*WorkflowCost, error) {
	data, err := workflowSubmission(id, n)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if _, err := submitJS.Publish(ctx, events.SubjectWorkflow, data, jetstream.WithMsgID(id)); err != nil {
		return nil, fmt.Errorf("bench: submit workflow %s: %w", id, err)
	}
	if err := w.until(ctx, 5*time.Minute, "workflow "+id, func() bool {
		s := w.turns[id]
		return s != nil && s.finished
	}); err != nil {
		return nil, err
	}
	elapsed := time.Since(began)
	store, err := logstore.New(ctx, readJS)
	if err != nil {
		return nil, err
	}
	return workflowCost(ctx, store, id, n, elapsed)
}

// workflowCost reads the figures off the logs of workflow id and its n
// tasks' turns.
func workflowCost(ctx context.Context, store *logstore.Store, id string, n int, elapsed time.Duration) (*WorkflowCost, error) {
	wf, _, err := store.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(wf) < 2 || wf[0].Type != events.WorkflowStarted || wf[len(wf)-1].Type != events.WorkflowFinished {
		return nil, fmt.Errorf("bench: workflow %s: a log of %d events that does not start and finish", id, len(wf))
	}
	var fin events.WorkflowFinishedData
	if err := json.Unmarshal(wf[len(wf)-1].Data, &fin); err != nil {
		return nil, err
	}
	if fin.StopReason != events.StopCompleted || len(fin.Tasks) != n {
		return nil, fmt.Errorf("bench: workflow %s finished %s after %d tasks, want completed after %d (%s)",
			id, fin.StopReason, len(fin.Tasks), n, fin.Error)
	}
	// A task's turn: its turn.started and its turn.finished times.
	type span struct{ start, end time.Time }
	spans := make([]span, n)
	// Tasks' logs are read a few at a time: 100 sequential reads would take
	// longer than the workflow.
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			turn := fmt.Sprintf("%s-%d", id, i+1)
			log, _, err := store.Read(ctx, turn)
			if err != nil {
				return err
			}
			if err := checkLog(log); err != nil {
				return fmt.Errorf("bench: task turn %s: %w", turn, err)
			}
			spans[i] = span{log[0].Time, log[len(log)-1].Time}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// When each task finished and started in the workflow's log.
	taskFinished, taskStarted := map[int]time.Time{}, map[int]time.Time{}
	for _, e := range wf {
		var d struct{ Task int }
		switch e.Type {
		case events.TaskFinished, events.TaskStarted:
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return nil, err
			}
		}
		switch e.Type {
		case events.TaskFinished:
			taskFinished[d.Task] = e.Time
		case events.TaskStarted:
			taskStarted[d.Task] = e.Time
		}
	}
	var gaps, turns, ends, gates, starts []time.Duration
	var inTurns time.Duration
	for i, s := range spans {
		turns = append(turns, s.end.Sub(s.start))
		inTurns += s.end.Sub(s.start)
		if i > 0 {
			gaps = append(gaps, s.start.Sub(spans[i-1].end))
			fin, ok1 := taskFinished[i]
			next, ok2 := taskStarted[i+1]
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("bench: workflow %s: no task.finished of task %d or task.started of task %d", id, i, i+1)
			}
			ends = append(ends, fin.Sub(spans[i-1].end))
			gates = append(gates, next.Sub(fin))
			starts = append(starts, s.start.Sub(next))
		}
	}
	wall := wf[len(wf)-1].Time.Sub(wf[0].Time)
	c := &WorkflowCost{Tasks: n, GapP50Ms: ms(percentile(gaps, 0.5)), GapP99Ms: ms(percentile(gaps, 0.99)),
		FirstGapsP50Ms: ms(percentile(gaps[:min(10, len(gaps))], 0.5)),
		LastGapsP50Ms:  ms(percentile(gaps[max(0, len(gaps)-10):], 0.5)),
		EndP50Ms:       ms(percentile(ends, 0.5)), GateP50Ms: ms(percentile(gates, 0.5)), StartP50Ms: ms(percentile(starts, 0.5)),
		OverheadMs: ms(wall-inTurns) / float64(n), TurnP50Ms: ms(percentile(turns, 0.5)),
		Seconds: elapsed.Seconds()}
	return c, nil
}

// workflow measures the outer loop's cost per task in one process: an
// embedded server and an orchestrator in this process, as the step
// overhead is measured.
func (b *run) workflow(ctx context.Context, sz sizes) error {
	s, err := startServer(ctx, b.log)
	if err != nil {
		return err
	}
	defer s.stop()
	s.metrics = b.metrics()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	defer func() {
		cancel()
		_ = g.Wait()
	}()
	if err := s.startOrchestrator(gctx, g, b.log, newTimings()); err != nil {
		return err
	}
	w, err := watch(s.nc)
	if err != nil {
		return err
	}
	defer w.stop()
	c, err := measureWorkflow(ctx, s.js, s.js, w, "wf-bench", sz.workflowTasks)
	if err != nil {
		return err
	}
	b.res.Workflow = c
	return nil
}
