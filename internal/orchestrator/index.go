package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// liveIndex is KV JETLOOP_LIVE, the index of unfinished turns and
// workflows by partition: what a new owner of a partition re-arms, and
// what a tenant's quota of turns in flight counts.
type liveIndex struct {
	kv  jetstream.KeyValue
	log *slog.Logger
}

// liveKey is the key of a turn or workflow in KV JETLOOP_LIVE.
func liveKey(id string) string { return strconv.Itoa(bus.Partition(id)) + "." + id }

// started records a turn that started in the index of unfinished
// ones. It is written after the turn's start is appended (a start's
// latency does not wait for it) and before its submission is acknowledged:
// a crash between the two delivers the submission again, whose handling
// writes it. It is only ever created, never written over: a turn that
// finished meanwhile (its entry deleted) is not put back, and a rejected
// submission writes none.
func (x *liveIndex) started(ctx context.Context, turn string) error {
	_, err := x.kv.Update(ctx, liveKey(turn), nil, 0)
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("orchestrator: index %s as unfinished: %w", turn, err)
	}
	return nil
}

// put records an unfinished workflow in the index before its first
// event is appended: a crash between the two leaves an entry for a log
// that does not exist, which the next re-arm drops.
func (x *liveIndex) put(ctx context.Context, id string) error {
	if _, err := x.kv.Put(ctx, liveKey(id), nil); err != nil {
		return fmt.Errorf("orchestrator: index %s as unfinished: %w", id, err)
	}
	return nil
}

// done drops a finished turn or workflow from the index. It is not
// retried: an entry left behind is dropped by the next re-arm.
func (x *liveIndex) done(ctx context.Context, id string) {
	if err := x.kv.Delete(ctx, liveKey(id)); err != nil {
		x.log.Debug("cannot drop a finished turn from the index", "turn", id, "err", err)
	}
}

// ids are the unfinished turns and workflows of partition p, from the
// index.
func (x *liveIndex) ids(ctx context.Context, p int) ([]string, error) {
	keys, err := x.kv.ListKeysFiltered(ctx, strconv.Itoa(p)+".>")
	if err != nil {
		return nil, fmt.Errorf("orchestrator: the unfinished turns of partition %d: %w", p, err)
	}
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, k[strings.IndexByte(k, '.')+1:])
	}
	_ = keys.Stop() // stopped already when its channel closed
	// The lister ends its keys quietly when ctx does: a list cut short
	// would leave turns unarmed.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("orchestrator: the unfinished turns of partition %d: %w", p, err)
	}
	return ids, nil
}

// count counts the unfinished turns and workflows in the index.
func (x *liveIndex) count(ctx context.Context) (int64, error) {
	keys, err := x.kv.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for range keys.Keys() {
		n++
	}
	_ = keys.Stop() // stopped already when its channel closed
	// The lister ends its keys quietly when ctx does: a count cut short
	// would let a tenant past its quota.
	return n, ctx.Err()
}
