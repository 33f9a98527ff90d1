package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestClusterKeepsAnR3StreamAcrossANodeLoss writes to an R3 stream, kills
// the stream's leader, writes more through the nodes left, and restarts the
// node on its ports and store: it catches up, and a client of that node
// alone reads every message.
func TestClusterKeepsAnR3StreamAcrossANodeLoss(t *testing.T) {
	c := StartCluster(t, 3)
	_, js := c.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 3 {
		t.Fatalf("stream created with %d replicas", got)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			// A publish may meet the loss of the node it went through:
			// retried, it is deduplicated by its id.
			WaitFor(t, fmt.Sprintf("message %d stored", i), func() bool {
				// Each try has its own deadline: one that waits on a lost
				// node must not use up the next tries' time.
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				defer pcancel()
				_, err := js.Publish(pctx, "t.a", fmt.Appendf(nil, "%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
				return err == nil
			})
		}
	}
	publish(0, 10)

	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim *Node
	for _, n := range c.Nodes {
		if n.Name == info.Cluster.Leader {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("no node is the stream's leader %q", info.Cluster.Leader)
	}
	victim.Kill()
	if victim.Server() != nil {
		t.Fatal("a killed node still has a server")
	}
	publish(10, 20)

	victim.Restart(t)
	WaitFor(t, "the restarted node to catch up", func() bool {
		s := victim.Server()
		return s != nil && s.JetStreamIsStreamCurrent("$G", "T")
	})
	nc, err := nats.Connect(victim.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js2, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	WaitFor(t, "20 messages through the restarted node", func() bool {
		s, err := js2.Stream(ctx, "T")
		return err == nil && s.CachedInfo().State.Msgs == 20
	})
	if c.Leader() == nil {
		t.Error("no meta leader after the restart")
	}
}
