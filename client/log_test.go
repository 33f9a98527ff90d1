package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Read a turn's log as it is stored, to export it.
func ExampleClient_Log() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("Say hello")})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Wait(ctx, id); err != nil {
		log.Fatal(err)
	}
	records, err := c.Log(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range records {
		line, _ := json.Marshal(r) // one line of `jetloop export`
		fmt.Println(r.Seq, r.Type, json.Valid(line))
	}
	// Output:
	// 1 turn.started true
	// 2 step.started true
	// 3 model.completed true
	// 4 step.checked true
	// 5 turn.finished true
}

// Follow a turn's log as it is written, record by record.
func ExampleClient_FollowLog() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc)
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("Say hello")})
	if err != nil {
		log.Fatal(err)
	}
	for r, err := range c.FollowLog(ctx, id) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Seq, r.Type)
		if r.Type == client.TypeTurnFinished {
			break // a log does not end on its own
		}
	}
	// Output:
	// 1 turn.started
	// 2 step.started
	// 3 model.completed
	// 4 step.checked
	// 5 turn.finished
}

// A log reads the same whichever way it is stored: one event per message,
// or a decision's events in one message (docs/protocol.md, "Reading a
// log"); Last, Log and FollowLog read it by direct gets, as the client and
// viewer roles may.
func TestLogReadsBothLayouts(t *testing.T) {
	c, ctx := newClient(t)
	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	orig, err := c.Log(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%v", grouped), func(t *testing.T) {
			// The same events under a new turn id, stored in one layout.
			copyID := client.NewID()
			want := make([]client.Record, len(orig))
			for i, r := range orig {
				r.ID, r.TurnID, r.SessionID = client.NewID(), copyID, copyID
				want[i] = r
			}
			store.Grouped = grouped
			if _, err := store.Append(ctx, 0, want); err != nil {
				t.Fatal(err)
			}
			got, err := c.Log(ctx, copyID)
			if err != nil {
				t.Fatal(err)
			}
			same(t, "Log", got, want)
			last, err := c.Last(ctx, copyID)
			if err != nil {
				t.Fatal(err)
			}
			same(t, "Last", []client.Record{last}, want[len(want)-1:])
			got = got[:0]
			for r, err := range c.FollowLog(ctx, copyID) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, r)
				if r.Type == client.TypeTurnFinished {
					break
				}
			}
			same(t, "FollowLog", got, want)
		})
	}

	none := client.NewID()
	if _, err := c.Log(ctx, none); !errors.Is(err, client.ErrTurnNotFound) {
		t.Errorf("Log of no turn: %v", err)
	}
	if _, err := c.Last(ctx, none); !errors.Is(err, client.ErrTurnNotFound) {
		t.Errorf("Last of no turn: %v", err)
	}
	if _, err := c.Log(ctx, "no spaces"); err == nil {
		t.Error("Log of an invalid id: no error")
	}
}

// FollowLog waits for a log not written yet, starts FromNow after what is
// stored, and ends with ctx.
func TestFollowLogFromNowAndCancel(t *testing.T) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancelAll := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancelAll)
	id, wait := paused(t, c, ctx, "Asker")
	subs := nc.NumSubscriptions()
	before, err := c.Last(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	records := make(chan client.Record, 16)
	errs := make(chan error, 1)
	go func() {
		for r, err := range c.FollowLog(fctx, id, client.FromNow()) {
			if err != nil {
				errs <- err
				return
			}
			records <- r
		}
	}()
	// FromNow starts after the last event stored when the follow began
	// (it subscribes once it knows where): the reply's events are all
	// after it.
	testkit.WaitFor(t, "the follow to begin", func() bool { return nc.NumSubscriptions() > subs })
	if err := c.Reply(ctx, id, wait.CallID, "green"); err != nil {
		t.Fatal(err)
	}
	for {
		r := <-records
		if r.Seq <= before.Seq {
			t.Fatalf("FromNow yielded seq %d, stored before it began (last %d)", r.Seq, before.Seq)
		}
		if r.Type == client.TypeTurnFinished {
			break
		}
	}
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("FollowLog after cancel: %v", err)
	}

	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	for r, err := range c.FollowLog(short, "never-submitted") {
		if r.Type != "" || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("FollowLog of no turn: %+v, %v", r, err)
		}
	}
}

func same(t *testing.T, what string, got, want []client.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, _ := json.Marshal(got[i])
		w, _ := json.Marshal(want[i])
		if string(g) != string(w) {
			t.Errorf("%s: record %d\n got %s\nwant %s", what, i, g, w)
		}
	}
}
