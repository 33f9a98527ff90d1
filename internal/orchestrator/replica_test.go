package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
)

// gated is the scripted model whose first call waits until release is
// closed; it counts the calls of each turn's steps.
type gated struct {
	model.Scripted
	entered, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	calls            map[string]int
}

func (g *gated) Call(ctx context.Context, req model.Request, emit func(string)) (model.Response, error) {
	g.mu.Lock()
	g.calls[fmt.Sprintf("%s/%d", req.TurnID, req.Step)]++
	g.mu.Unlock()
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			return model.Response{}, ctx.Err()
		}
	}
	return g.Scripted.Call(ctx, req, emit)
}

func (g *gated) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[key]
}

// TestStartingReplicaLeavesRunningCallsAlone starts a second orchestrator
// while the first is in a model call with no runner free: the newcomer must
// not take the call back (it would run twice), because the first
// orchestrator is alive.
func TestStartingReplicaLeavesRunningCallsAlone(t *testing.T) {
	h := newHarness(t)
	h.worker()
	g := &gated{entered: make(chan struct{}), release: make(chan struct{}), calls: map[string]int{}}
	h.orchestrator(orchestrator.WithModelRunners(1), orchestrator.WithProvider("script", g))
	h.submit(script("t-replica", "General", `{"responses": [{"text": "one answer"}]}`))
	<-g.entered

	h.orchestrator(orchestrator.WithModelRunners(1), orchestrator.WithProvider("script", g))
	// The newcomer's runner waits for a job; had the newcomer handed the
	// running call back, that runner would have taken it at once.
	h.waitFor("the second orchestrator's model runner to pull", func() bool {
		cons, err := h.js.Consumer(context.Background(), events.StreamJobs, bus.ModelConsumer)
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumWaiting > 0 && info.NumAckPending == 1
	})
	close(g.release)
	if _, fin := h.finished("t-replica"); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if n := g.count("t-replica/1"); n != 1 {
		t.Fatalf("the model call ran %d times", n)
	}
}
