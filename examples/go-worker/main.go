// Command go-worker serves a custom tool, invoice_total, to jetloop turns.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

var owed = map[string]string{"C-42": "120.50 EUR", "C-7": "0.00 EUR"} // the billing system

type lookup struct { // the tool's arguments: models are told their JSON Schema
	Customer string `json:"customer" description:"the customer id, e.g. C-42"`
}

// run serves invoice_total until ctx ends, then lets running calls finish.
func run(ctx context.Context, nc *nats.Conn) error {
	w, err := worker.New(nc)
	if err == nil {
		err = worker.HandleFunc(w, "invoice_total", "Returns what a customer owes.", func(_ context.Context, a lookup) (worker.Result, error) {
			if total, ok := owed[a.Customer]; ok {
				return worker.Result{Output: a.Customer + " owes " + total}, nil
			}
			return worker.Result{}, fmt.Errorf("no customer %q", a.Customer) // the model reads it
		})
	}
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// As the examples' worker deployment (deploy/accounts.conf: exampleworker serves
	// invoice_total), NATS_USER and NATS_PASSWORD name its user, as
	// they do for the jetloop CLI; the SDK finds the account's API prefix.
	var opts []nats.Option
	if user := os.Getenv("NATS_USER"); user != "" {
		opts = append(opts, nats.UserInfo(user, os.Getenv("NATS_PASSWORD")))
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), opts...) // "" is nats://127.0.0.1:4222
	if err == nil {
		err = run(ctx, nc)
	}
	if err != nil {
		log.Fatal(err)
	}
}
