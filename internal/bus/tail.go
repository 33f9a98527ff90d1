package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start says where a Tail begins. The zero Start is the first message.
type Start struct {
	// Time: the first message stored at or after it.
	Time time.Time
	// New: only messages stored after the tail subscribed.
	New bool
	// Last: the filter's last message, then every later one.
	Last bool
}

// TailMsg is one stored message a Tail read, with how many messages
// matching its filter the tail knows of after it (0: caught up).
type TailMsg struct {
	*jetstream.RawStreamMsg
	Pending uint64
}

// Tail follows the messages of a stream that match a filter without a
// consumer, which the roles that read (client, viewer) may not create
// (docs/accounts.md): it subscribes to the filter's core messages first,
// then reads what is stored by get, and reads again whenever a message is
// published on the filter. A published message only says "read again": it
// may not be stored yet, or ever (an append that lost its race), so what
// a tail yields is always what a get returned, in stream order, each
// sequence once.
//
// Reads are batched direct gets where the stream allows direct gets and
// has one replica; on a replicated stream a follower may answer a direct
// get before it has caught up, so reads go one message at a time to the
// leader (docs/protocol.md, "Reading a log"), as do reads of a stream
// without direct gets (JETLOOP_DEAD).
type Tail struct {
	nc     *nats.Conn
	api    string // the JetStream API prefix, with its trailing dot
	stream string
	filter string
	direct bool
	start  Start

	sub    *nats.Subscription
	wake   chan struct{}
	next   uint64 // the next sequence to read from
	buf    []TailMsg
	unread uint64 // known to be stored after buf
	// settle: until then an empty read is tried again after backoff, not
	// after tailPoll (see tailSettle).
	settle  time.Time
	backoff time.Duration
}

// tailBatch bounds one read.
const tailBatch = 256

// tailPoll is how often an idle tail reads again without being woken: a
// core message can be dropped (a slow subscriber), a stored one cannot.
const tailPoll = 5 * time.Second

// tailSettle is how long a tail keeps reading after a wake-up that found
// nothing new: the published message may still be on its way to the store.
const tailSettle = 2 * time.Second

// NewTail subscribes to filter's messages and returns a tail of stream
// that reads from start. Close it when done.
func NewTail(ctx context.Context, js jetstream.JetStream, stream, filter string, start Start) (*Tail, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("bus: bind %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	api := js.Options().APIPrefix
	if api == "" {
		api = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(api, ".") {
		api += "."
	}
	t := &Tail{nc: js.Conn(), api: api, stream: stream, filter: filter, start: start,
		direct: cfg.AllowDirect && cfg.Replicas <= 1, wake: make(chan struct{}, 1)}
	// Where it starts is only a sequence: whatever is stored after it is
	// read by the reads below, all made after subscribing, so nothing falls
	// between the two. Settled before subscribing, a tail that has
	// subscribed has begun.
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	// A burst of messages is one wake-up, and one read finds them all.
	t.sub, err = t.nc.Subscribe(filter, func(*nats.Msg) {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %s: %w", filter, err)
	}
	// A first message begin buffered is followed by a read, so that its
	// Pending says whether more follow.
	if len(t.buf) > 0 {
		if err := t.fill(ctx); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// Close unsubscribes.
func (t *Tail) Close() { _ = t.sub.Unsubscribe() }

// Next returns the next stored message, waiting for one until ctx ends.
func (t *Tail) Next(ctx context.Context) (TailMsg, error) {
	for len(t.buf) == 0 {
		n, err := t.read(ctx)
		if err != nil {
			return TailMsg{}, err
		}
		if n > 0 {
			break
		}
		wait := tailPoll
		if time.Now().Before(t.settle) {
			wait, t.backoff = t.backoff, min(2*t.backoff, 200*time.Millisecond)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return TailMsg{}, ctx.Err()
		case <-t.wake:
			timer.Stop()
			// Several messages may have made this one wake-up, and not
			// all be stored yet: read again shortly for a while.
			t.settle, t.backoff = time.Now().Add(tailSettle), time.Millisecond
		case <-timer.C:
		}
	}
	m := t.buf[0]
	t.buf = t.buf[1:]
	m.Pending = uint64(len(t.buf)) + t.unread
	return m, nil
}

// read fills the buffer with what is stored from t.next on; it returns how
// many messages are buffered.
func (t *Tail) read(ctx context.Context) (int, error) {
	err := t.fill(ctx)
	return len(t.buf), err
}

// fill appends to the buffer what is stored from t.next on.
func (t *Tail) fill(ctx context.Context) error {
	if t.direct {
		return t.readDirect(ctx)
	}
	return t.readLeader(ctx)
}

// begin finds where the tail starts: a sequence, or the filter's last
// message, which it buffers.
func (t *Tail) begin(ctx context.Context) error {
	switch {
	case t.start.New, t.start.Last:
		m, err := t.get(ctx, apiGetRequest{LastFor: t.filter})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			t.next = 1
			return nil
		}
		if err != nil {
			return err
		}
		t.next = m.Sequence + 1
		if t.start.Last {
			t.buf = append(t.buf, TailMsg{RawStreamMsg: m})
		}
		return nil
	case !t.start.Time.IsZero():
		start := t.start.Time
		m, err := t.get(ctx, apiGetRequest{StartTime: &start, NextFor: t.filter})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Nothing stored since: start after what is stored now.
			last, err := t.get(ctx, apiGetRequest{LastFor: t.filter})
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				t.next = 1
			case err != nil:
				return err
			default:
				t.next = last.Sequence + 1
			}
			return nil
		}
		if err != nil {
			return err
		}
		t.next = m.Sequence + 1
		t.buf = append(t.buf, TailMsg{RawStreamMsg: m})
		return nil
	}
	t.next = 1
	return nil
}

// apiGetRequest is a get's body (nats-server's JSApiMsgGetRequest).
type apiGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	LastFor   string     `json:"last_by_subj,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// readLeader reads up to tailBatch messages one get at a time.
func (t *Tail) readLeader(ctx context.Context) error {
	t.unread = 0
	for range tailBatch {
		m, err := t.get(ctx, apiGetRequest{Seq: t.next, NextFor: t.filter})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		t.buf = append(t.buf, TailMsg{RawStreamMsg: m})
		t.next = m.Sequence + 1
	}
	t.unread = 1 // at least: the batch was full
	return nil
}

// get makes one get: a direct get where the tail reads direct, else the
// stream's message get, which its leader answers.
func (t *Tail) get(ctx context.Context, req apiGetRequest) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if t.direct {
		resp, err := t.nc.RequestWithContext(ctx, t.api+"DIRECT.GET."+t.stream, body)
		if err != nil {
			return nil, fmt.Errorf("bus: read %s: %w", t.stream, err)
		}
		return directMsg(resp)
	}
	resp, err := t.nc.RequestWithContext(ctx, t.api+"STREAM.MSG.GET."+t.stream, body)
	if err != nil {
		return nil, fmt.Errorf("bus: read %s: %w", t.stream, err)
	}
	var r struct {
		Error *jetstream.APIError `json:"error"`
		Msg   *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("bus: read %s: %w", t.stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("bus: read %s: %w", t.stream, r.Error)
	}
	if r.Msg == nil {
		return nil, fmt.Errorf("bus: read %s: %w", t.stream, jetstream.ErrInvalidJetStreamResponse)
	}
	m := &jetstream.RawStreamMsg{Subject: r.Msg.Subject, Sequence: r.Msg.Sequence, Data: r.Msg.Data, Time: r.Msg.Time}
	if len(r.Msg.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(r.Msg.Header); err != nil {
			return nil, fmt.Errorf("bus: read %s: %w", t.stream, err)
		}
	}
	return m, nil
}

// readDirect reads up to tailBatch messages with one batched direct get,
// answered by a message each and an end-of-batch status (204) that says
// how many more match.
func (t *Tail) readDirect(ctx context.Context) error {
	body, err := json.Marshal(apiGetRequest{Seq: t.next, NextFor: t.filter, Batch: tailBatch})
	if err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	inbox := t.nc.NewInbox()
	sub, err := t.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("bus: read %s: %w", t.stream, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := t.nc.PublishRequest(t.api+"DIRECT.GET."+t.stream, inbox, body); err != nil {
		return fmt.Errorf("bus: read %s: %w", t.stream, err)
	}
	t.unread = 0
	for {
		resp, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("bus: read %s: %w", t.stream, err)
		}
		switch resp.Header.Get("Status") {
		case "404":
			return nil
		case "204":
			t.unread, _ = strconv.ParseUint(resp.Header.Get("Nats-Num-Pending"), 10, 64)
			return nil
		}
		m, err := directMsg(resp)
		if err != nil {
			return err
		}
		t.buf = append(t.buf, TailMsg{RawStreamMsg: m})
		t.next = m.Sequence + 1
	}
}

// directMsg reads a direct get's answer: the stored message, its subject,
// sequence and time in headers.
func directMsg(resp *nats.Msg) (*jetstream.RawStreamMsg, error) {
	switch st := resp.Header.Get("Status"); st {
	case "":
	case "404":
		return nil, jetstream.ErrMsgNotFound
	default:
		return nil, fmt.Errorf("bus: direct get: status %s %s", st, resp.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bus: direct get: sequence: %w", err)
	}
	ts, err := time.Parse(time.RFC3339Nano, resp.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("bus: direct get: time: %w", err)
	}
	hdr := nats.Header{}
	for k, v := range resp.Header {
		switch k {
		case jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, jetstream.SubjectHeader,
			"Nats-Num-Pending", "Nats-Last-Sequence":
			continue
		}
		hdr[k] = v
	}
	return &jetstream.RawStreamMsg{Subject: resp.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: hdr,
		Data: resp.Data, Time: ts}, nil
}

// tailTimeout bounds a read whose ctx has no deadline.
const tailTimeout = 10 * time.Second

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, tailTimeout)
}

// Follow delivers the stored messages of streams that match filter, from
// start, to a channel until ctx ends; its error channel says why it stopped
// otherwise. It reads by get (Tails): a reader creates no consumer.
func Follow(ctx context.Context, js jetstream.JetStream, streams []string, filter string, start Start) (<-chan TailMsg, <-chan error, func(), error) {
	tail, err := NewTails(ctx, js, streams, filter, start)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	msgs := make(chan TailMsg, 64)
	errs := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer tail.Close()
		for {
			m, err := tail.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return msgs, errs, func() { cancel(); <-done }, nil
}
