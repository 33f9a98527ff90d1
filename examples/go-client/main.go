// Command go-client asks a jetloop agent something, prints the answer as the
// model writes it, and answers the agent's questions from standard input:
//
//	NATS_URL=nats://127.0.0.1:4222 go run ./examples/go-client -agent General "What is in this directory?"
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jetloop/jetloop/client"
	"github.com/nats-io/nats.go"
)

// run submits text to agent ("" when only one is defined) and follows the
// turn until it finishes. out takes writes from two goroutines, as
// os.Stdout does.
func run(ctx context.Context, nc *nats.Conn, agent, text string, in io.Reader, out io.Writer) error {
	c, err := client.New(nc)
	if err != nil {
		return err
	}
	// The id first: the deltas are followed from before the turn starts.
	id := client.NewID()
	deltas, err := c.StreamDeltas(ctx, id)
	if err != nil {
		return err
	}
	if _, err := c.Submit(ctx, client.Submit{TurnID: id, Agent: agent, Input: client.Text(text)}); err != nil {
		return err
	}
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		for d := range deltas {
			fmt.Fprint(out, d.Delta)
		}
	}()
	answers := bufio.NewScanner(in)
	for ev, err := range c.Watch(ctx, id) {
		if err != nil {
			return err
		}
		switch e := ev.(type) {
		case client.ToolRequested:
			fmt.Fprintf(out, "\n[%s %s]\n", e.Name, e.Arguments)
		case client.TurnPaused:
			if e.Kind != client.PauseInput {
				fmt.Fprintf(out, "\n[waits for approval of %s: jetloop approve %s %s]\n", e.Tool, id, e.CallID)
				continue
			}
			fmt.Fprintf(out, "\n%s\n> ", e.Question)
			answers.Scan()
			if err := c.Reply(ctx, id, e.CallID, strings.TrimSpace(answers.Text())); err != nil {
				return err
			}
		case client.TurnFinished:
			<-printed // the deltas end with the turn
			fmt.Fprintf(out, "\n[%s]\n", e.StopReason)
			if e.Error != "" {
				return fmt.Errorf("turn %s: %s", id, e.Error)
			}
		}
	}
	return nil
}

func main() {
	agent := flag.String("agent", "", "the agent (default: the only one defined)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(os.Getenv("NATS_URL")) // "" is nats://127.0.0.1:4222
	if err == nil {
		err = run(ctx, nc, *agent, strings.Join(flag.Args(), " "), os.Stdin, os.Stdout)
	}
	if err != nil {
		log.Fatal(err)
	}
}
