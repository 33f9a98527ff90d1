package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Result waits for the result of a turn's tool call in the inbox and
// returns it with the headers it was published with.
func Result(t testing.TB, js jetstream.JetStream, turn string) (events.ToolResult, nats.Header) {
	t.Helper()
	var msg *jetstream.RawStreamMsg
	WaitFor(t, "a result of "+turn, func() bool {
		s, err := js.Stream(context.Background(), events.StreamInbox)
		if err != nil {
			return false
		}
		// Whichever tool's subject it came on (events.ToolResultSubject).
		msg, err = s.GetLastMsgForSubject(context.Background(), bus.Stored("jetloop.inbox.*."+turn))
		return err == nil
	})
	var r events.ToolResult
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r, msg.Header
}

// ToolInfo is what the registry says of a tool, nil while it has no entry.
func ToolInfo(t testing.TB, js jetstream.JetStream, tool string) *events.ToolInfo {
	t.Helper()
	info, err := toolInfo(context.Background(), js, tool)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// WaitTool waits until a worker advertises tool (or a hook, as
// events.HookKey), so a turn started next is offered it.
func WaitTool(t testing.TB, js jetstream.JetStream, tool string) {
	t.Helper()
	WaitFor(t, "a tool worker to advertise "+tool, func() bool {
		// Each ask has a second: a request to a server that just went
		// away is asked again, not waited on.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		info, err := toolInfo(ctx, js, tool)
		// The orchestrator offers a tool with a worker (its catalog).
		return err == nil && info != nil && info.Workers > 0
	})
}

// toolInfo reads a tool's registry entry: nil without one, an error only
// when the entry does not decode.
func toolInfo(ctx context.Context, js jetstream.JetStream, tool string) (*events.ToolInfo, error) {
	kv, err := js.KeyValue(ctx, events.BucketTools)
	if err != nil {
		return nil, nil
	}
	entry, err := kv.Get(ctx, tool)
	if err != nil {
		return nil, nil
	}
	var info events.ToolInfo
	if err := json.Unmarshal(entry.Value(), &info); err != nil {
		return nil, fmt.Errorf("testkit: registry entry of %s: %w", tool, err)
	}
	return &info, nil
}

// Job publishes a tool job, as an orchestrator does.
func Job(t testing.TB, js jetstream.JetStream, j events.ToolJob) {
	t.Helper()
	Publish(t, js, events.ToolSubject(j.Tool), mustJSON(t, j), "")
}
