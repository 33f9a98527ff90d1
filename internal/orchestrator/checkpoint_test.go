package orchestrator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/workflow"
)

// TestPutCheckpoint: a workflow's checkpoint in KV only ever moves forward,
// whoever else writes the key meanwhile; when the shard knows the revision
// it wrote last, the write is one round trip, with no read before it.
func TestPutCheckpoint(t *testing.T) {
	srv := testkit.Start(t)
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	o := &effects{checkpoints: kv}
	gets, err := nc.SubscribeSync("$JS.API.DIRECT.GET.KV_" + bus.BucketCheckpoints + ".>")
	if err != nil {
		t.Fatal(err)
	}
	read := func() int {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := gets.Pending()
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := gets.NextMsg(time.Second); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	state := func(task int) *workflow.State {
		m := events.WorkflowMetrics{Tasks: task}
		return &workflow.State{ID: "wf", Checkpointed: task, Metrics: m,
			Checkpoint: events.WorkflowCheckpointedData{Task: task, Metrics: m}}
	}
	holds := func(task int) {
		t.Helper()
		e, err := kv.Get(ctx, "wf")
		if err != nil {
			t.Fatal(err)
		}
		var cp events.WorkflowCheckpointedData
		if err := json.Unmarshal(e.Value(), &cp); err != nil || cp.Task != task {
			t.Fatalf("KV holds %s (%v), want the checkpoint of task %d", e.Value(), err, task)
		}
		read()
	}

	rev, err := o.putCheckpoint(ctx, state(1), 0)
	if err != nil || rev == 0 {
		t.Fatalf("first checkpoint: revision %d, %v", rev, err)
	}
	holds(1)

	// The revision it wrote: one write, nothing read.
	if rev, err = o.putCheckpoint(ctx, state(2), rev); err != nil {
		t.Fatal(err)
	}
	if n := read(); n != 0 {
		t.Fatalf("a checkpoint on the revision it wrote read the key %d times", n)
	}
	holds(2)

	// Someone wrote a later one since: it stays.
	later, err := o.putCheckpoint(ctx, state(4), rev)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := o.putCheckpoint(ctx, state(3), rev); err != nil || got != later {
		t.Fatalf("a stale checkpoint: revision %d (%v), want the later one's %d", got, err, later)
	}
	holds(4)

	// Someone wrote an earlier one since (or the key was deleted): this
	// one goes over it.
	if _, err := kv.Put(ctx, "wf", []byte(`{"task":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := o.putCheckpoint(ctx, state(5), later); err != nil {
		t.Fatal(err)
	}
	holds(5)
	if err := kv.Delete(ctx, "wf"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.putCheckpoint(ctx, state(6), 0); err != nil {
		t.Fatal(err)
	}
	holds(6)
}
