package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// provisioned starts a server with jetloop's streams and connects to it;
// the context ends with the test, within 30 s.
func provisioned(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	return ctx, js
}

// TestPartitionIsTheServers: the inbox stores an input under the partition
// bus.Partition computes, so an orchestrator knows where each turn's inputs
// go; Unpartitioned gives back the subject as published; a five-token
// subject is not stored at all.
func TestPartitionIsTheServers(t *testing.T) {
	ctx, js := provisioned(t)
	stream, err := js.Stream(ctx, events.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for i := range 200 {
		id := fmt.Sprintf("turn-%d", i)
		sent := events.ControlSubject(id)
		ack, err := js.Publish(ctx, sent, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		m, err := stream.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		p := bus.Partition(id)
		seen[p] = true
		if want := fmt.Sprintf("%s.%d", sent, p); m.Subject != want {
			t.Fatalf("stored as %s, want %s", m.Subject, want)
		}
		if got := bus.Stored(sent); got != m.Subject {
			t.Fatalf("Stored(%s) = %s, stored as %s", sent, got, m.Subject)
		}
		if got := bus.Unpartitioned(m.Subject); got != sent {
			t.Fatalf("Unpartitioned(%s) = %s", m.Subject, got)
		}
	}
	if len(seen) != bus.Partitions {
		t.Fatalf("200 ids fell in %d partitions of %d", len(seen), bus.Partitions)
	}
	// Submissions stay as they are; a subject that only looks partitioned
	// (its last token is not its id's partition) is left alone.
	for _, s := range []string{events.SubjectSubmit, "jetloop.inbox.result.x.y.z", "jetloop.inbox.result.turn-1.99"} {
		if got := bus.Unpartitioned(s); got != s {
			t.Errorf("Unpartitioned(%s) = %s", s, got)
		}
	}
	if _, err := js.Publish(ctx, "jetloop.inbox.result.turn-1."+fmt.Sprint(bus.Partition("turn-2")), []byte(`{}`)); err == nil {
		t.Fatal("the inbox stored a five-token subject: a publisher could aim a turn's input at another partition")
	}
}

// TestOwnersAgreeAndMoveLittle: every live set gives each partition one
// owner among it; a member leaving moves only its own partitions.
func TestOwnersAgreeAndMoveLittle(t *testing.T) {
	live := []string{"orchestrator-1", "orchestrator-2", "orchestrator-3"}
	owners := map[string][]int{}
	for p := range bus.Partitions {
		o := bus.Owner(p, live)
		if !slices.Contains(live, o) {
			t.Fatalf("partition %d owned by %q", p, o)
		}
		if reversed := bus.Owner(p, []string{live[2], live[0], live[1]}); reversed != o {
			t.Fatalf("partition %d: %s or %s by the order of the live set", p, o, reversed)
		}
		owners[o] = append(owners[o], p)
	}
	for _, n := range live {
		if len(owners[n]) == 0 {
			t.Errorf("%s owns nothing: %v", n, owners)
		}
	}
	for p := range bus.Partitions {
		if before, after := bus.Owner(p, live), bus.Owner(p, live[:2]); before != live[2] && after != before {
			t.Errorf("partition %d moved from %s to %s when %s left", p, before, after, live[2])
		}
	}
	if bus.Owner(0, nil) != "" || !strings.HasPrefix(bus.PartitionConsumer(3), bus.InboxConsumer+"_") {
		t.Fatal("no owner without members; partition consumers are named after the inbox consumer")
	}
}
