package worker_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// natsURL is the server the examples talk to: an embedded one with an
// orchestrator whose Billing agent's scripted model calls invoice_total.
var natsURL string

func TestMain(m *testing.M) {
	stack, err := inproc.PublicKit(map[string]string{
		"AGENTS.md": "---\nname: Billing\nmodel: script:billing.yaml\n---\nAnswers billing questions.\n",
		"billing.yaml": `responses:
  - tool_calls: [{name: invoice_total, arguments: {customer: C-42}}]
  - {text: "C-42 owes 120.50 EUR."}
`,
	})
	if err == nil {
		err = stack.Orchestrate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	natsURL = stack.URL
	code := m.Run()
	stack.Close()
	os.Exit(code)
}

// invoiceQuery are the arguments of invoice_total; the model is told their
// schema.
type invoiceQuery struct {
	Customer string `json:"customer" description:"the customer id, e.g. C-42"`
}

// Serve a tool, and watch a turn call it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	w, err := worker.New(nc, worker.WithName("billing-1"), worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	err = worker.HandleFunc(w, "invoice_total", "Returns what a customer owes.",
		func(ctx context.Context, q invoiceQuery) (worker.Result, error) {
			return worker.Result{Output: q.Customer + " owes 120.50 EUR"}, nil
		})
	if err != nil {
		log.Fatal(err)
	}
	serving, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(serving) }()
	<-w.Ready()

	// A turn whose model calls the tool.
	c, _ := client.New(nc)
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Billing", Input: client.Text("What does C-42 owe?")})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Watch(ctx, id) {
		if err != nil {
			log.Fatal(err)
		}
		switch e := ev.(type) {
		case client.ToolCompleted:
			fmt.Printf("%s by %s: %s\n", e.Name, e.Worker, e.Output)
		case client.TurnFinished:
			fmt.Println(e.StopReason, e.Output)
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// invoice_total by billing-1: C-42 owes 120.50 EUR
	// completed C-42 owes 120.50 EUR.
}

// The schema HandleFunc derives from a struct.
func ExampleSchema() {
	type refund struct {
		Invoice string  `json:"invoice" description:"the invoice number"`
		Amount  float64 `json:"amount"`
		Reason  string  `json:"reason,omitempty"`
	}
	schema, err := worker.Schema(refund{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(schema))
	// Output: {"additionalProperties":false,"properties":{"amount":{"type":"number"},"invoice":{"description":"the invoice number","type":"string"},"reason":{"type":"string"}},"required":["invoice","amount"],"type":"object"}
}
