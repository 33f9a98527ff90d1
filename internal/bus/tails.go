package bus

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Tails is a Tail of the same filter in several streams: the logs of a
// session, or every log, in a partitioned layout (events.Layout), where
// each stream holds some of them. Each stream's messages come in its
// order, each sequence once; the streams' are interleaved as they are
// read. A Tails of one stream is that stream's Tail.
type Tails struct {
	one *Tail

	items  chan tailItem
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// pending is what each stream's tail last said it knows of after the
	// message it gave: their sum is the Pending of a message given.
	pending []uint64
}

type tailItem struct {
	from int
	msg  TailMsg
	err  error
}

// NewTails subscribes to filter's messages and returns a tail of streams
// that reads each from start. Close it when done.
func NewTails(ctx context.Context, js jetstream.JetStream, streams []string, filter string, start Start) (*Tails, error) {
	if len(streams) == 1 {
		t, err := NewTail(ctx, js, streams[0], filter, start)
		if err != nil {
			return nil, err
		}
		return &Tails{one: t}, nil
	}
	tails := make([]*Tail, 0, len(streams))
	for _, name := range streams {
		t, err := NewTail(ctx, js, name, filter, start)
		if err != nil {
			for _, t := range tails {
				t.Close()
			}
			return nil, err
		}
		tails = append(tails, t)
	}
	rctx, cancel := context.WithCancel(context.Background())
	ts := &Tails{items: make(chan tailItem), cancel: cancel, pending: make([]uint64, len(tails))}
	for i, t := range tails {
		ts.wg.Go(func() {
			defer t.Close()
			for {
				m, err := t.Next(rctx)
				select {
				case ts.items <- tailItem{from: i, msg: m, err: err}:
				case <-rctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
	return ts, nil
}

// Next returns the next stored message of any of the streams, waiting for
// one until ctx ends. Its Pending counts what every stream's tail knows of.
func (t *Tails) Next(ctx context.Context) (TailMsg, error) {
	if t.one != nil {
		return t.one.Next(ctx)
	}
	select {
	case <-ctx.Done():
		return TailMsg{}, ctx.Err()
	case it := <-t.items:
		if it.err != nil {
			return TailMsg{}, it.err
		}
		t.pending[it.from] = it.msg.Pending
		it.msg.Pending = 0
		for _, n := range t.pending {
			it.msg.Pending += n
		}
		return it.msg, nil
	}
}

// Close unsubscribes from every stream.
func (t *Tails) Close() {
	if t.one != nil {
		t.one.Close()
		return
	}
	t.cancel()
	t.wg.Wait()
}
