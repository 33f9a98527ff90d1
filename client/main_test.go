package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// natsURL is the server the examples and tests talk to: an embedded one
// with an orchestrator of testAgents and a worker of echo.
var natsURL string

var testFiles = map[string]string{
	"AGENTS.md": `---
name: Greeter
model: script:hello.yaml
---
Greets.
---
name: Asker
model: script:ask.yaml
tools: [ask_user]
---
Asks first.
---
name: Gated
model: script:gate.yaml
approval: [echo]
---
Echoes once allowed.
---
name: Top
model: script:top.yaml
tools: [agent:Boss]
---
Hands the work to Boss.
---
name: Boss
description: Asks Greeter twice at once
model: script:boss.yaml
tools: [agent:Greeter]
---
Delegates to Greeter.
---
name: Careful
model: script:careful.yaml
tools: [agent:Greeter]
approval: [Greeter]
---
Delegates once allowed.
`,
	"top.yaml": `responses:
  - tool_calls: [{name: Boss, arguments: {task: "greet twice"}}]
  - {text: "Boss is done."}
`,
	"boss.yaml": `responses:
  - tool_calls: [{name: Greeter, arguments: {task: "one"}}, {name: Greeter, arguments: {task: "two"}}]
  - {text: "Greeted twice."}
`,
	"careful.yaml": `responses:
  - tool_calls: [{name: Greeter, arguments: {task: "once allowed"}}]
  - {text: "Not allowed, then."}
`,
	"hello.yaml": `responses:
  - {text: "Hello, world!", delay_ms: 30}
`,
	"ask.yaml": `responses:
  - text: "Let me ask."
    tool_calls: [{name: ask_user, arguments: {question: "Which colour?"}}]
  - {text: "Blue it is."}
`,
	"gate.yaml": `responses:
  - tool_calls: [{name: echo, arguments: {text: hi}}]
  - {text: "done"}
`,
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	stack, err := inproc.PublicKit(testFiles)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stack.Close()
	natsURL = stack.URL
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The worker first: the orchestrator then finds echo in the registry
	// when it starts.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	w, err := worker.New(nc, worker.WithName("echoer"), worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err == nil {
		err = w.Handle("echo", "Returns text.", `{"type":"object","properties":{"text":{"type":"string"}}}`,
			func(_ context.Context, c worker.Call) (worker.Result, error) {
				return worker.Result{Output: string(c.Arguments)}, nil
			})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if err := stack.WaitForTool(ctx, "echo"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := stack.Orchestrate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return code
}
