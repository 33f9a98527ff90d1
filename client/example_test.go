package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/nats-io/nats.go"
)

// Submit a turn and wait for its answer.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("Say hello")})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.StopReason, res.Output)
	// Output: completed Hello, world!
}

// Follow a turn's events and answer its question.
func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Asker", Input: client.Text("Paint the fence")})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Watch(ctx, id) {
		if err != nil {
			log.Fatal(err)
		}
		switch e := ev.(type) {
		case client.TurnPaused:
			fmt.Println("asked:", e.Question)
			if err := c.Reply(ctx, id, e.CallID, "blue"); err != nil {
				log.Fatal(err)
			}
		case client.TurnResumed:
			fmt.Println("answered:", e.Answer)
		case client.TurnFinished:
			fmt.Println(e.StopReason, e.Output)
		}
	}
	// Output:
	// asked: Which colour?
	// answered: blue
	// completed Blue it is.
}

// Print a model's text as it is written.
func ExampleClient_StreamDeltas() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	// The turn's id first, so that no delta comes before the subscription.
	id := client.NewID()
	deltas, err := c.StreamDeltas(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.TurnRequest{TurnID: id, Agent: "Greeter", Input: client.Text("Say hello")}); err != nil {
		log.Fatal(err)
	}
	var text strings.Builder
	for d := range deltas {
		text.WriteString(d.Delta)
	}
	fmt.Println(text.String())
	// Output: Hello, world!
}

// Read a finished turn's log.
func ExampleClient_Events() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	id, _ := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("Say hello")})
	if _, err := c.Wait(ctx, id); err != nil {
		log.Fatal(err)
	}
	evs, err := c.Events(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs {
		fmt.Println(ev.Info().Seq, ev.Info().Type)
	}
	// Output:
	// 1 turn.started
	// 2 step.started
	// 3 model.completed
	// 4 step.checked
	// 5 turn.finished
}

// A submission the orchestrator refuses finishes its turn at once.
func ExampleRejectedError() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	id, _ := c.Submit(ctx, client.TurnRequest{Agent: "Nobody", Input: client.Text("Hello?")})
	_, err = c.Wait(ctx, id)
	var rejected *client.RejectedError
	if errors.As(err, &rejected) {
		fmt.Println("rejected:", strings.Contains(rejected.Reason, "Nobody"))
	}
	// Output: rejected: true
}

// Run a workflow of two tasks and follow it: its own events, and the end of
// each task's turn.
func ExampleClient_WatchWorkflow() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	id, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Greeter", Tasks: []client.Task{
		{Input: []byte(`"Greet Ada"`)}, {Input: []byte(`"Greet Bob"`)}}})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.WatchWorkflow(ctx, id) {
		if err != nil {
			log.Fatal(err)
		}
		switch e := ev.(type) {
		case client.TaskStarted:
			// The task's own steps are its turn's: follow it to its end.
			res, err := c.Wait(ctx, e.TurnID)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("task %d: %s\n", e.Task, res.Output)
		case client.WorkflowCheckpointed:
			fmt.Printf("checkpoint after task %d: %d steps so far\n", e.Task, e.Metrics.Steps)
		case client.WorkflowFinished:
			fmt.Println(e.StopReason, e.Metrics.Tasks, "tasks")
		}
	}
	// Output:
	// task 1: Hello, world!
	// checkpoint after task 1: 1 steps so far
	// task 2: Hello, world!
	// checkpoint after task 2: 2 steps so far
	// completed 2 tasks
}

// Connect as a tenant's client: in a multi-tenant deployment
// (deploy/tenants, docs/tenants.md) the tenant is the connection's
// credentials, the nkey seed that jetloop tenants add wrote for the
// tenant's client. Everything else is as with one tenant: New finds the
// API prefix, and the submissions, ids and events are the tenant's own.
func ExampleNew_tenant() {
	opt, err := nats.NkeyOptionFromSeed("deploy/tenants/a/client.nk")
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect("nats://127.0.0.1:4322", opt, nats.CustomInboxPrefix("_INBOX_cli"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Submit(context.Background(), client.TurnRequest{Agent: "Greeter", Input: client.Text("Say hello")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("submitted", id, "in tenant a")
}
