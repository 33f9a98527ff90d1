package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/client/workflowfile"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// The hooks decide a real workflow, the one `jetloop workflow run
// workflow.yaml` submits: audit stores every task's checkpoint, the last
// included, and cost-guard stops the workflow at its second tool call.
func Example() {
	stack, err := inproc.PublicKit(map[string]string{"AGENTS.md": "---\nname: General\ntools: [echo]\n---\nDoes what it is asked.\n"})
	if err != nil {
		log.Fatal(err)
	}
	defer stack.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(stack.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// The tasks' tool, served elsewhere as any tool is.
	tools, err := worker.New(nc, worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err == nil {
		err = worker.HandleFunc(tools, "echo", "Echoes its text.", func(_ context.Context, a struct {
			Text string `json:"text"`
		}) (worker.Result, error) {
			return worker.Result{Output: a.Text}, nil
		})
	}
	if err != nil {
		log.Fatal(err)
	}
	serving, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = tools.Run(serving) }()
	dir, err := os.MkdirTemp("", "go-hook")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "checkpoints.jsonl")
	done := make(chan error, 1)
	go func() { done <- run(serving, nc, file, 2) }()
	if err := stack.WaitForTool(ctx, "echo"); err != nil {
		log.Fatal(err)
	}
	if err := stack.Orchestrate(); err != nil {
		log.Fatal(err)
	}

	sub, err := workflowfile.Read("workflow.yaml")
	if err != nil {
		log.Fatal(err)
	}
	c, _ := client.New(nc)
	id, err := c.RunWorkflow(ctx, sub)
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.WaitWorkflow(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range res.TaskResults {
		fmt.Printf("task %d: %s %q\n", t.Task, t.StopReason, t.Output)
	}
	fmt.Printf("workflow: %s: %s\n", res.StopReason, res.Error)

	f, err := os.Open(file)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		var cp struct {
			Task    int                    `json:"task"`
			Last    bool                   `json:"last"`
			Metrics worker.WorkflowMetrics `json:"metrics"`
		}
		if err := json.Unmarshal(lines.Bytes(), &cp); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("stored: task %d, %d tool calls\n", cp.Task, cp.Metrics.ToolCalls)
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// task 1: completed "Foo is used in a.go."
	// task 2: completed "Renamed Foo to Bar in a.go."
	// workflow: denied: cost guard: 2 tool calls reached the limit of 2
	// stored: task 1, 1 tool calls
	// stored: task 2, 2 tool calls
}
