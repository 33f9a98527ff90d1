package client_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/nats-io/nats.go"
)

// Count what every turn does from now on, as a dashboard would.
func ExampleClient_OpenFeed() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	feed, err := c.OpenFeed(ctx, client.FeedFilter{Since: time.Now()})
	if err != nil {
		log.Fatal(err)
	}
	defer feed.Close()
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("Say hello")})
	if err != nil {
		log.Fatal(err)
	}
	steps := 0
	for {
		r, err := feed.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if r.TurnID != id {
			continue // another turn's
		}
		if r.Type == client.TypeStepStarted {
			steps++
		}
		if r.Type == client.TypeTurnFinished {
			break
		}
	}
	fmt.Println(steps, "step")
	// Output: 1 step
}

// A feed reads a turn's, a session's or every log, each event once and in
// order, and says when it has read all that is stored.
func TestFeed(t *testing.T) {
	c, ctx := newClient(t)
	session := client.NewID()
	var ids []string
	for range 2 {
		id, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", SessionID: session, Input: client.Text("hi")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	want, err := c.Log(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}

	read := func(f client.FeedFilter, n int) []client.Record {
		t.Helper()
		feed, err := c.OpenFeed(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		defer feed.Close()
		if feed.CaughtUp() {
			t.Fatalf("%+v: caught up before reading what is stored", f)
		}
		var got []client.Record
		for len(got) < n {
			r, err := feed.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if !feed.CaughtUp() {
			t.Errorf("%+v: not caught up after all %d events", f, n)
		}
		return got
	}
	same(t, "a turn's feed", read(client.FeedFilter{TurnID: ids[0]}, len(want)), want)
	for i, r := range read(client.FeedFilter{SessionID: session}, 2*len(want)) {
		if r.TurnID != ids[i/len(want)] || r.Seq != i%len(want)+1 {
			t.Errorf("a session's feed: record %d is %s seq %d", i, r.TurnID, r.Seq)
		}
	}

	// Chan delivers the same, each event saying whether the feed had
	// caught up: only the last of what is stored does.
	feed, err := c.OpenFeed(ctx, client.FeedFilter{SessionID: session})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	events, errs := feed.Chan(fctx)
	for i := range 2 * len(want) {
		select {
		case e := <-events:
			if e.TurnID != ids[i/len(want)] || e.Seq != i%len(want)+1 || e.CaughtUp != (i == 2*len(want)-1) {
				t.Errorf("Chan: event %d is %s seq %d, caught up %v", i, e.TurnID, e.Seq, e.CaughtUp)
			}
		case err := <-errs:
			t.Fatal(err)
		}
	}
	cancel()
	feed.Close()

	for _, f := range []client.FeedFilter{{TurnID: client.NewID()}, {Since: time.Now().Add(time.Hour)}} {
		feed, err := c.OpenFeed(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !feed.CaughtUp() {
			t.Errorf("%+v: nothing stored, yet not caught up", f)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if r, err := feed.Next(short); err == nil {
			t.Errorf("%+v: read %+v", f, r)
		}
		cancel()
		feed.Close()
	}
	if _, err := c.OpenFeed(ctx, client.FeedFilter{TurnID: ids[0], SessionID: session}); err == nil {
		t.Error("a feed of a turn and a session: no error")
	}
	if _, err := c.OpenFeed(ctx, client.FeedFilter{TurnID: "no spaces"}); err == nil {
		t.Error("a feed of an invalid id: no error")
	}
}
