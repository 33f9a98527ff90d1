// Command go-hook serves two workflow hooks, OpenBotStack's extension points
// of the outer loop: audit, a Checkpoint (it stores every task's checkpoint
// in a file, one JSON line each, and lets the workflow go on), and
// cost-guard, a PolicyCheckpoint (it stops a workflow whose tool calls
// reach a threshold). A workflow that names both in order,
//
//	policy: {hooks: [audit, cost-guard]}
//
// is the seed's CompositeCheckpoint followed by its policy: after each task
// (the last included) the audit stores, then the guard decides.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// audit appends each checkpoint to a file and answers continue.
type audit struct {
	mu   sync.Mutex
	path string
}

// Check implements worker.Hook. It stores the last checkpoint of a
// workflow that ended before this hook decided, with how it ended (cp.Ended).
// A failed write ends the workflow error, as the seed's Checkpoint.Save
// error ends its loop. A job asked again (a hook process died mid-job) may
// store a line twice: the line names the workflow and task, so a reader
// keeps the last.
func (a *audit) Check(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
	line, err := json.Marshal(map[string]any{"workflow_id": cp.WorkflowID, "task": cp.Task, "last": cp.Last,
		"stop_reason": cp.StopReason, "metrics": cp.Metrics, "task_metrics": cp.TaskMetrics, "ended": cp.Ended})
	if err != nil {
		return worker.Decision{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.OpenFile(a.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return worker.Decision{}, err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return worker.Decision{}, err
	}
	return worker.Continue("checkpoint stored in " + a.path), nil
}

// costGuard stops a workflow once its tool calls reach max.
func costGuard(max int) worker.HookFunc {
	return func(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
		if cp.Metrics.ToolCalls >= max {
			return worker.Stop(fmt.Sprintf("cost guard: %d tool calls reached the limit of %d", cp.Metrics.ToolCalls, max)), nil
		}
		return worker.Continue(fmt.Sprintf("%d tool calls of %d", cp.Metrics.ToolCalls, max)), nil
	}
}

// run serves both hooks until ctx ends.
func run(ctx context.Context, nc *nats.Conn, auditFile string, maxCalls int) error {
	w, err := worker.New(nc)
	if err == nil {
		err = w.HandleHook("audit", &audit{path: auditFile})
	}
	if err == nil {
		err = w.HandleHook("cost-guard", costGuard(maxCalls))
	}
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	file := os.Getenv("AUDIT_FILE")
	if file == "" {
		file = "checkpoints.jsonl"
	}
	maxCalls := 10
	if v := os.Getenv("MAX_TOOL_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			log.Fatalf("MAX_TOOL_CALLS=%q: want a number ≥ 1", v)
		}
		maxCalls = n
	}
	// As a deployment of its own (deploy/accounts.conf: the examples'
	// deployment serves these hooks), NATS_USER and NATS_PASSWORD name its
	// user, as they do for the jetloop CLI; the worker finds the API prefix.
	var opts []nats.Option
	if user := os.Getenv("NATS_USER"); user != "" {
		opts = append(opts, nats.UserInfo(user, os.Getenv("NATS_PASSWORD")))
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), opts...) // "" is nats://127.0.0.1:4222
	if err == nil {
		err = run(ctx, nc, file, maxCalls)
	}
	if err != nil {
		log.Fatal(err)
	}
}
