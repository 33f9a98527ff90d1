package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
)

func TestRunWorkflow(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Greeter", Tasks: []client.Task{
		{Input: json.RawMessage(`"hello"`)}, {Input: json.RawMessage(`"again"`)}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.WaitWorkflow(ctx, id)
	if err != nil || r.StopReason != client.StopCompleted || r.Metrics.Tasks != 2 || r.Output != "Hello, world!" {
		t.Fatalf("result %+v, %v", r, err)
	}
	bad, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Nobody", Tasks: []client.Task{{Input: json.RawMessage(`"x"`)}}})
	if err != nil {
		t.Fatal(err)
	}
	var rej *client.RejectedError
	if _, err := c.WaitWorkflow(ctx, bad); !errors.As(err, &rej) {
		t.Fatalf("unknown agent: %v, want a *RejectedError", err)
	}
}
