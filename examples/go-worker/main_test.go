package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/nats-io/nats.go"
)

// The worker serves a real turn: an orchestrator offers invoice_total to a
// (scripted) model, which calls it for a known and an unknown customer.
func TestInvoiceTotalInATurn(t *testing.T) {
	script, err := os.ReadFile("script.yaml") // the one docs/sdk.md runs
	if err != nil {
		t.Fatal(err)
	}
	stack, err := inproc.PublicKit(map[string]string{
		"AGENTS.md":    "---\nname: Billing\nmodel: script:billing.yaml\ntools: [invoice_total]\n---\nAnswers billing questions.\n",
		"billing.yaml": string(script),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(stack.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	serving, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(serving, nc) }()
	// The orchestrator starts once the tool is advertised, so the turn is
	// offered it.
	if err := stack.WaitForTool(ctx, "invoice_total"); err != nil {
		t.Fatal(err)
	}
	if err := stack.Orchestrate(); err != nil {
		t.Fatal(err)
	}

	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Submit(ctx, client.TurnRequest{Input: client.Text("What do C-42 and C-99 owe?")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, id)
	if err != nil || res.StopReason != client.StopCompleted || res.Metrics.ToolCalls != 2 {
		t.Fatalf("result %+v, %v", res, err)
	}
	log, err := c.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The two calls of the step run in parallel: they complete in any order.
	outputs := map[string]bool{} // output → is_error
	for _, ev := range log {
		switch e := ev.(type) {
		case client.TurnStarted:
			if len(e.Tools) != 1 || e.Tools[0] != "invoice_total" {
				t.Errorf("tools offered: %v", e.Tools)
			}
		case client.ToolCompleted:
			if e.Worker == "" {
				t.Errorf("tool.completed %+v", e)
			}
			outputs[e.Output] = e.IsError
		}
	}
	if isErr, ok := outputs["C-42 owes 120.50 EUR"]; len(outputs) != 2 || !ok || isErr || !outputs[`no customer "C-99"`] {
		t.Errorf("outputs %v", outputs)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
