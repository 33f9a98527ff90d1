package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// TestStreamsMove moves the logs of a provisioned server from one stream to
// four and back with `streams move`, which check then reports; a second move
// to the same layout has nothing to do; a live orchestrator's key refuses a
// move (not one with nothing to do); an event-streams count that is no layout's is a usage error.
func TestStreamsMove(t *testing.T) {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	url := srv.ClientURL()
	jl := func(args ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code := Main(context.Background(), append([]string{"streams", "--nats", url}, args...), &out, &out)
		return out.String(), code
	}
	for _, args := range [][]string{{"move"}, {"move", "--event-streams", "3"}, {"check", "--event-streams", "3"}, {"apply", "--event-streams", "3"}} {
		if out, code := jl(args...); code != ExitUsage {
			t.Fatalf("streams %v: exit %d, want %d (usage):\n%s", args, code, ExitUsage, out)
		}
	}
	if out, code := jl("apply"); code != 0 {
		t.Fatalf("apply: exit %d:\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var turns []string
	for i := range 8 {
		turn := fmt.Sprintf("turn-%d", i)
		turns = append(turns, turn)
		var evs []events.Envelope
		for n := 1; n <= 3; n++ {
			evs = append(evs, events.Envelope{ID: fmt.Sprintf("%s-e%d", turn, n), Type: events.StepStarted, TurnID: turn,
				SessionID: fmt.Sprintf("session-%d", i%3), Seq: n, Step: 1, Time: time.Now().UTC(), Data: json.RawMessage(`{}`)})
		}
		if _, err := store.Append(ctx, 0, evs); err != nil {
			t.Fatal(err)
		}
	}
	read := func() map[string][]events.Envelope {
		t.Helper()
		s, err := bus.NewStore(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]events.Envelope{}
		for _, turn := range turns {
			if out[turn], _, err = s.Read(ctx, turn); err != nil || len(out[turn]) != 3 {
				t.Fatalf("read %s: %d events (%v)", turn, len(out[turn]), err)
			}
		}
		return out
	}
	before := read()

	out, code := jl("check")
	if code != 0 || !strings.Contains(out, "events: the logs are in 1 stream: JETLOOP_EVENTS\n") {
		t.Fatalf("check: exit %d, want the layout line:\n%s", code, out)
	}
	out, code = jl("move", "--event-streams", "4")
	if code != 0 || !strings.Contains(out, "verified 8 logs") || !strings.Contains(out, "deleted stream JETLOOP_EVENTS: the logs are in 4 streams") {
		t.Fatalf("move to 4: exit %d:\n%s", code, out)
	}
	out, code = jl("check")
	if code != 0 || !strings.Contains(out, "events: the logs are in 4 streams: JETLOOP_EVENTS_0, JETLOOP_EVENTS_1, JETLOOP_EVENTS_2, JETLOOP_EVENTS_3\n") {
		t.Fatalf("check after the move: exit %d:\n%s", code, out)
	}
	if !reflect.DeepEqual(read(), before) {
		t.Fatal("the logs read differently after the move")
	}
	if out, code := jl("move", "--event-streams", "4"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("a move to the layout there is: exit %d:\n%s", code, out)
	}

	kv, err := js.KeyValue(ctx, bus.BucketOrchestrators)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "orch-1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// Nothing to do needs no orchestrator stopped.
	if out, code := jl("move", "--event-streams", "4"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("a move to the layout there is, an orchestrator live: exit %d:\n%s", code, out)
	}
	if out, code := jl("move", "--event-streams", "1"); code == 0 || !strings.Contains(out, "orch-1") || !strings.Contains(out, "stop them") {
		t.Fatalf("move with an orchestrator live: exit %d:\n%s", code, out)
	}
	if err := kv.Delete(ctx, "orch-1"); err != nil {
		t.Fatal(err)
	}
	out, code = jl("move", "--event-streams", "1")
	if code != 0 || !strings.Contains(out, "JETLOOP_EVENTS takes jetloop.events.>: the logs are in 1 stream") {
		t.Fatalf("move to 1: exit %d:\n%s", code, out)
	}
	if out, code := jl("check"); code != 0 || !strings.Contains(out, "events: the logs are in 1 stream: JETLOOP_EVENTS\n") {
		t.Fatalf("check after the move back: exit %d:\n%s", code, out)
	}
	if !reflect.DeepEqual(read(), before) {
		t.Fatal("the logs read differently after the move back")
	}
}
