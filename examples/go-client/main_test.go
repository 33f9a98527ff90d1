package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/nats-io/nats.go"
)

// syncBuffer is a buffer two goroutines may write, as they write stdout.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The program runs a real turn: it prints the model's streamed text, asks
// the agent's question and sends the answer it reads.
func TestAskAndAnswer(t *testing.T) {
	stack, err := inproc.PublicKit(map[string]string{
		"AGENTS.md": "---\nname: Painter\nmodel: script:paint.yaml\ntools: [ask_user]\n---\nPaints.\n",
		"paint.yaml": `responses:
  - text: "Happy to paint it."
    delay_ms: 40
    tool_calls: [{name: ask_user, arguments: {question: "Which colour?"}}]
  - {text: "Painting it now.", delay_ms: 40}
`,
	})
	if err == nil {
		err = stack.Orchestrate()
	}
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

	var out syncBuffer
	if err := run(ctx, nc, "", nil, "Paint the fence", strings.NewReader("green\n"), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"Happy to paint it.", "[ask_user {\"question\":\"Which colour?\"}]", "\nWhich colour?\n> ", "Painting it now.\n[completed]\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}

	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	turns, err := c.Turns(ctx, client.TurnFilter{Agent: "Painter"})
	if err != nil || len(turns) != 1 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
	log, err := c.Events(ctx, turns[0].TurnID)
	if err != nil {
		t.Fatal(err)
	}
	answered := false
	for _, ev := range log {
		if e, ok := ev.(client.TurnResumed); ok {
			answered = e.Answer == "green"
		}
	}
	if !answered {
		t.Errorf("the answer is not in the log: %+v", log)
	}
}

// With -script the program runs without an API key: the shipped script
// answers instead of the agent's model (which has no key here), and the
// program's output is the script's, with the question answered.
func TestScriptFlag(t *testing.T) {
	stack, err := inproc.PublicKit(map[string]string{
		"AGENTS.md": "---\nname: General\nmodel: openai/gpt-4.1-mini\ntools: [ask_user]\n---\nHelps.\n",
	})
	if err == nil {
		err = stack.Orchestrate()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	script, err := readScript("script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(stack.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var out syncBuffer
	if err := run(ctx, nc, "General", script, "What is in this directory?", strings.NewReader("the README\n"), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"There are several entry points here.", "\nWhich should I read first?\n> ",
		"The README first, then", "[completed]"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if _, err := readScript("no-such.yaml"); err == nil {
		t.Error("a missing script file is no error")
	}
}
