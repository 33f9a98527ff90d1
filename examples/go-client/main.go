// Command go-client asks a jetloop agent something, prints the answer as the
// model writes it, and answers the agent's questions from standard input:
//
//	NATS_URL=nats://127.0.0.1:4222 go run ./examples/go-client -agent General "What is in this directory?"
//
// With -script FILE the turn runs on the scripted model instead of the
// agent's (no API key needed; the orchestrator must allow scripts, as
// jetloop dev does):
//
//	go run ./examples/go-client -agent General -script examples/go-client/script.yaml "What is in this directory?"
package main

import (
	"bufio"
	"context"
	"encoding/json"
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
	"gopkg.in/yaml.v3"
)

// run submits text to agent ("" when only one is defined), on the scripted
// model when script is not nil, and follows the turn until it finishes. out
// takes writes from two goroutines, as os.Stdout does.
func run(ctx context.Context, nc *nats.Conn, agent string, script json.RawMessage, text string, in io.Reader, out io.Writer) error {
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
	sub := client.TurnRequest{TurnID: id, Agent: agent, Input: client.Text(text)}
	if script != nil {
		sub.Model, sub.Script = "script", script
	}
	if _, err := c.Submit(ctx, sub); err != nil {
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
	scriptFile := flag.String("script", "", "a scripted model (YAML or JSON) to answer instead of the agent's model")
	flag.Parse()
	script, err := readScript(*scriptFile)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// As a client (deploy/accounts.conf: the CLIENT account), NATS_USER and
	// NATS_PASSWORD name its user, as they do for the jetloop CLI; the
	// client role takes its replies under _INBOX_cli, and the SDK finds the
	// account's API prefix.
	var opts []nats.Option
	if user := os.Getenv("NATS_USER"); user != "" {
		opts = append(opts, nats.UserInfo(user, os.Getenv("NATS_PASSWORD")), nats.CustomInboxPrefix("_INBOX_cli"))
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), opts...) // "" is nats://127.0.0.1:4222
	if err == nil {
		err = run(ctx, nc, *agent, script, strings.Join(flag.Args(), " "), os.Stdin, os.Stdout)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// readScript reads a scripted model's file ("" is none) as the JSON a
// submission carries. YAML is a superset of JSON, so one decoder takes both;
// the orchestrator checks it against schemas/script.schema.json.
func readScript(path string) (json.RawMessage, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	return json.Marshal(v)
}
