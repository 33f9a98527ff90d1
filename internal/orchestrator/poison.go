package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inboxMaxDeliveries is the advisory JetStream sends when an input hit an
// inbox consumer's MaxDeliver (the last token names the consumer): the
// input stays in the stream, delivered to no one, unless something keeps it
// elsewhere.
const inboxMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + events.StreamInbox + ".*"

// watchExhausted turns every input that exhausted its deliveries into a dead
// letter. A handler dead-letters an input itself on its last delivery; this
// catches the inputs whose every delivery ended with the process that took
// it (a crash, a kill, an input that crashes the process). Every
// orchestrator sees the advisory: the dead letter's id makes their copies
// one, and a partition's are handled by its owner only.
func (o *Orchestrator) watchExhausted() (*nats.Subscription, error) {
	sub, err := o.nc.Subscribe(inboxMaxDeliveries, func(m *nats.Msg) {
		var adv struct {
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries int    `json:"deliveries"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			return
		}
		consumer := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		if consumer != bus.InboxConsumer && !o.owner.pulls(consumer) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		defer cancel()
		if err := o.graves.buryExhausted(ctx, adv.StreamSeq, adv.Deliveries); err != nil {
			o.log.Error("cannot dead-letter an input that exhausted its deliveries; trying again until it can be", "seq", adv.StreamSeq, "err", err)
			o.graves.stranded.add(adv.StreamSeq, adv.Deliveries)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: subscribe %s: %w", inboxMaxDeliveries, err)
	}
	return sub, nil
}

func (g *graves) buryExhausted(ctx context.Context, seq uint64, deliveries int) error {
	stream, err := g.js.Stream(ctx, events.StreamInbox)
	if err != nil {
		return err
	}
	raw, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		g.stranded.done(seq)
		return nil // another orchestrator handled it
	}
	if err != nil {
		return err
	}
	kind, _ := inputKind(raw.Subject)
	reason := fmt.Sprintf("delivered %d times, and the process handling it stopped each time", deliveries)
	if last := g.stranded.lastError(seq); last != "" {
		reason = last
	}
	g.log.Error("dead letter", "input", kind, "seq", seq, "reason", reason)
	if err := bus.DeadLetter(ctx, g.js, storedMsg{raw}, string(kind), reason); err != nil {
		return err
	}
	g.obs.countDeadLetter(kind)
	if err := stream.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("orchestrator: delete input %d: %w", seq, err)
	}
	g.stranded.done(seq)
	return nil
}

// graves keep the inputs that can never be handled as dead letters, with
// their reasons, and try again those whose dead letter could not be written.
type graves struct {
	js       jetstream.JetStream
	log      *slog.Logger
	obs      *observer
	stranded *stranded
}

// deadLetter keeps an input that cannot be handled, with the reason.
func (g *graves) deadLetter(ctx context.Context, msg jetstream.Msg, kind events.Input, reason string) error {
	err := bus.DeadLetter(ctx, g.js, msg, string(kind), reason)
	if err == nil {
		g.obs.countDeadLetter(kind)
	}
	return err
}

// storedMsg is a message read from a stream, as DeadLetter takes it.
type storedMsg struct{ raw *jetstream.RawStreamMsg }

func (m storedMsg) Subject() string { return m.raw.Subject }
func (m storedMsg) Data() []byte    { return m.raw.Data }
func (m storedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: events.StreamInbox, Sequence: jetstream.SequencePair{Stream: m.raw.Sequence}}, nil
}

// stranded holds the inputs that exhausted their deliveries while no dead
// letter could be written — the server's store was full, say. No consumer
// delivers them again, so they are retried here until their dead letter is
// written: once an operator makes room, they appear in JETLOOP_DEAD, from
// where `jetloop dead retry` puts them back in their turn.
// It also keeps the reason a handler gave on an input's last delivery when
// that dead letter could not be written, so the later one says it.
type stranded struct {
	mu      sync.Mutex
	seqs    map[uint64]int    // stream sequence → deliveries
	reasons map[uint64]string // stream sequence → the last error
}

func newStranded() *stranded {
	return &stranded{seqs: map[uint64]int{}, reasons: map[uint64]string{}}
}

func (s *stranded) add(seq uint64, deliveries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seqs[seq] = deliveries
}

// failed notes why an input's last delivery could not be dead-lettered.
// The notes are bounded: they only help a dead letter read better.
func (s *stranded) failed(seq uint64, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reasons) < 1024 {
		s.reasons[seq] = reason
	}
}

func (s *stranded) lastError(seq uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reasons[seq]
}

func (s *stranded) done(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seqs, seq)
	delete(s.reasons, seq)
}

// retry tries to bury every stranded input every interval until ctx ends.
func (g *graves) retryStranded(ctx context.Context, interval time.Duration) error {
	s := g.stranded
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.mu.Lock()
		pending := maps.Clone(s.seqs)
		s.mu.Unlock()
		for seq, deliveries := range pending {
			ictx, cancel := context.WithTimeout(ctx, defaultIOTimeout)
			err := g.buryExhausted(ictx, seq, deliveries)
			cancel()
			if err != nil {
				g.log.Debug("stranded input still cannot be dead-lettered", "seq", seq, "err", err)
			}
		}
	}
}

// strandedInterval is how often stranded inputs are tried again.
const strandedInterval = 5 * time.Second
