package jetlooptest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/jetlooptest"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// Test your own tool worker, in a turn and in a workflow of two tasks, with
// the Billing agent's model scripted to call it. In a test, Start does what
// New and Close do here, and fails the test instead.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := jetlooptest.New(
		jetlooptest.WithAgents("---\nname: Billing\nmodel: script:billing.yaml\ntools: [invoice_total]\n---\nAnswers billing questions.\n"),
		jetlooptest.WithFile("billing.yaml", `responses:
  - tool_calls: [{name: invoice_total, arguments: {customer: C-42}}]
  - {text: "C-42 owes 120.50 EUR."}
`))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// The worker under test.
	type query struct {
		Customer string `json:"customer"`
	}
	w, err := worker.New(nc, worker.WithName("billing-1"), worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	err = worker.HandleFunc(w, "invoice_total", "Returns what a customer owes.",
		func(ctx context.Context, q query) (worker.Result, error) {
			return worker.Result{Output: q.Customer + " owes 120.50 EUR"}, nil
		})
	if err != nil {
		log.Fatal(err)
	}
	serving, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(serving) }()
	if err := srv.WaitForTool(ctx, "invoice_total"); err != nil {
		log.Fatal(err)
	}
	if err := srv.Orchestrate(); err != nil {
		log.Fatal(err)
	}

	// A turn.
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Billing", Input: client.Text("What does C-42 owe?")})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	evs, err := c.Events(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs {
		if tc, ok := ev.(client.ToolCompleted); ok {
			fmt.Printf("%s by %s: %s\n", tc.Name, tc.Worker, tc.Output)
		}
	}
	fmt.Println("turn:", res.StopReason, res.Output)

	// A workflow: each task is a turn of the agent.
	task := func(text string) client.Task {
		input, _ := json.Marshal(text)
		return client.Task{Input: input}
	}
	wf, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Billing", Tasks: []client.Task{task("What does C-42 owe?"), task("And now?")}})
	if err != nil {
		log.Fatal(err)
	}
	r, err := c.WaitWorkflow(ctx, wf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("workflow:", r.StopReason)
	for _, t := range r.TaskResults {
		fmt.Printf("task %d: %s\n", t.Task, t.Output)
	}

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// invoice_total by billing-1: C-42 owes 120.50 EUR
	// turn: completed C-42 owes 120.50 EUR.
	// workflow: completed
	// task 1: C-42 owes 120.50 EUR.
	// task 2: C-42 owes 120.50 EUR.
}
