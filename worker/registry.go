package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/bus"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// registry keeps a worker's tools advertised in KV JETLOOP_TOOLS.
type registry struct {
	js      jetstream.JetStream
	tools   jetstream.KeyValue
	workers jetstream.KeyValue
	name    string
	specs   []events.ToolSpec
	// ttl is the tools bucket's: entries are refreshed three times per ttl,
	// so they outlive a missed refresh but not a dead worker.
	ttl time.Duration
}

func newRegistry(ctx context.Context, js jetstream.JetStream, name string, specs []events.ToolSpec) (*registry, error) {
	tools, err := js.KeyValue(ctx, events.BucketTools)
	if err != nil {
		return nil, fmt.Errorf("worker: bind %s: %w", events.BucketTools, err)
	}
	// Whoever created the bucket chose its TTL; a worker follows it rather
	// than assume the default.
	status, err := tools.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: status of %s: %w", events.BucketTools, err)
	}
	ttl := status.TTL()
	if ttl <= 0 {
		ttl = bus.ToolsTTL
	}
	// Bound first: where provisioning is admin's alone, a worker may not
	// even ask to create what exists.
	workers, err := js.KeyValue(ctx, bus.BucketWorkers)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		workers, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bus.BucketWorkers, Description: "jetloop: live workers of each tool",
			TTL: ttl, Storage: jetstream.FileStorage, MaxValueSize: bus.WorkerValueMax, MaxBytes: bus.WorkersMaxBytes,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			workers, err = js.KeyValue(ctx, bus.BucketWorkers)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker: bucket %s: %w", bus.BucketWorkers, err)
	}
	if status, err := workers.Status(ctx); err == nil && status.TTL() > 0 {
		ttl = min(ttl, status.TTL())
	}
	return &registry{js: js, tools: tools, workers: workers, name: name, specs: specs, ttl: ttl}, nil
}

// advertise refreshes this worker's presence, then each tool's entry with
// the number of workers now serving it.
func (r *registry) advertise(ctx context.Context) error {
	for _, s := range r.specs {
		if _, err := r.workers.Put(ctx, s.Name+"."+r.name, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
			return fmt.Errorf("worker: announce %s: %w", s.Name, err)
		}
		if err := r.put(ctx, s, true); err != nil {
			return err
		}
	}
	return nil
}

// put writes a tool's entry with the number of its live workers, or
// withdraws it when there are none. A worker that serves the tool counts
// itself whatever the read says: its presence, just written, may not be
// read back (a replica answers for a stream without a leader, or a direct
// get from a replica behind, without it), and it must not withdraw a tool
// it serves.
func (r *registry) put(ctx context.Context, s events.ToolSpec, serving bool) error {
	n, err := r.count(ctx, s.Name)
	if err != nil {
		return err
	}
	if serving {
		n = max(n, 1)
	}
	if n == 0 {
		if err := r.tools.Delete(ctx, s.Name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("worker: withdraw %s: %w", s.Name, err)
		}
		return nil
	}
	params := s.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object"}`)
	}
	// A hook's entry is under hook.<name> and names the hook.
	name, _ := strings.CutPrefix(s.Name, "hook.")
	info, err := json.Marshal(events.ToolInfo{Name: name, Description: s.Description, Parameters: params,
		TimeoutMs: s.TimeoutMs, Workers: n})
	if err != nil {
		return err
	}
	if _, err := r.tools.Put(ctx, s.Name, info); err != nil {
		return fmt.Errorf("worker: advertise %s: %w", s.Name, err)
	}
	return nil
}

// count reads the live workers of a tool from their presence keys. It lists
// the keys by the bucket's subjects (stream info with a subject filter)
// rather than with a watch: a watch is a push consumer, whose deliver
// subject a worker deployment's account may not name (see
// deploy/accounts.conf), and a key deleted or expired leaves a subject
// whose last message is no value, which the get below skips.
func (r *registry) count(ctx context.Context, tool string) (int, error) {
	stream, err := r.js.Stream(ctx, "KV_"+bus.BucketWorkers)
	if err != nil {
		return 0, fmt.Errorf("worker: count workers of %s: %w", tool, err)
	}
	prefix := "$KV." + bus.BucketWorkers + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+tool+".*"))
	if err != nil {
		return 0, fmt.Errorf("worker: count workers of %s: %w", tool, err)
	}
	n := 0
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, prefix)
		if !strings.HasPrefix(key, tool+".") {
			continue
		}
		if _, err := r.workers.Get(ctx, key); err == nil {
			n++
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
			return 0, fmt.Errorf("worker: count workers of %s: %w", tool, err)
		}
	}
	return n, nil
}

// keepAlive refreshes the entries three times per TTL until ctx ends.
func (r *registry) keepAlive(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			actx, cancel := context.WithTimeout(ctx, ioTimeout)
			if err := r.advertise(actx); err != nil && ctx.Err() == nil {
				log.Warn("cannot refresh tools in the registry", "err", err)
			}
			cancel()
		}
	}
}

// withdraw removes this worker, and each tool it was the last worker of.
func (r *registry) withdraw(ctx context.Context) error {
	var errs []error
	for _, s := range r.specs {
		if err := r.workers.Delete(ctx, s.Name+"."+r.name); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, r.put(ctx, s, false))
	}
	return errors.Join(errs...)
}

// maxDeliveriesSubject is the advisory JetStream sends when a tool job hit
// its consumer's MaxDeliver; the job itself stays in the stream.
func maxDeliveriesSubject(consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + events.StreamJobs + "." + consumer
}

// gaveUp answers a job that exhausted its deliveries with an error result,
// so the turn hears of it now rather than at its deadline, and deletes the
// job. Every worker of the tool sees the advisory: the result's id makes
// their answers one.
func (w *Worker) gaveUp(m *nats.Msg) {
	var adv struct {
		Consumer   string `json:"consumer"`
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries int    `json:"deliveries"`
	}
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		return
	}
	tool, ok := strings.CutPrefix(adv.Consumer, "tool_")
	if _, served := w.tools[tool]; !ok || !served {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	stream, err := w.js.Stream(ctx, events.StreamJobs)
	if err != nil {
		return
	}
	raw, err := stream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		return // another worker handled it
	}
	var job events.ToolJob
	if err := json.Unmarshal(raw.Data, &job); err != nil || !events.ValidID(job.TurnID) || !events.ValidID(job.CallID) {
		return
	}
	w.log.Warn("job delivered too often; answering with an error", "turn", job.TurnID, "call", job.CallID,
		"tool", tool, "deliveries", adv.Deliveries)
	res := events.ToolResult{TurnID: job.TurnID, CallID: job.CallID, Tool: tool, IsError: true, Worker: w.opts.name,
		Attempt: max(adv.Deliveries, 1),
		Output:  fmt.Sprintf("%s: no worker finished the call in %d attempts (a worker crashed or timed out each time)", tool, adv.Deliveries)}
	if err := w.publish(res); err != nil {
		w.log.Warn("cannot answer an exhausted job", "err", err)
		return
	}
	_ = stream.DeleteMsg(ctx, adv.StreamSeq)
}
