package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/turnlog"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTimeout bounds a call whose context has no deadline (every call but
// Watch, Wait and StreamDeltas, which follow a turn for as long as it runs).
const DefaultTimeout = 10 * time.Second

// Errors a call returns when a turn or a workflow cannot do what was asked;
// they are wrapped with its id and what it is doing instead, so test them
// with errors.Is.
var (
	// ErrTurnNotFound: no turn (or workflow) has this id (it has no log
	// yet).
	ErrTurnNotFound = errors.New("client: no such turn")
	// ErrTurnFinished: the turn (or workflow) has finished, so nothing can
	// steer it.
	ErrTurnFinished = errors.New("client: the turn has finished")
	// ErrNotWaiting: the turn is not paused on this call, or not on this kind
	// of answer (a reply to an approval, say); or the workflow waits for no
	// approval.
	ErrNotWaiting = errors.New("client: the turn does not wait for this")
)

// turnError says what is wrong with a turn in its own words, and is one of
// the sentinels for errors.Is.
type turnError struct {
	msg  string
	kind error
}

func (e *turnError) Error() string { return "client: " + e.msg }
func (e *turnError) Unwrap() error { return e.kind }

func notFound(turn string) error {
	return &turnError{fmt.Sprintf("no turn %q", turn), ErrTurnNotFound}
}

// RejectedError is a submission the orchestrator refused (its turn finished
// with StopRejected without running): an unknown agent or model, a script
// where scripts are not allowed. Reason is the
// orchestrator's.
type RejectedError struct {
	TurnID string
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("client: turn %s rejected: %s", e.TurnID, e.Reason)
}

// Client submits, follows and steers turns over one NATS connection. It is
// safe for concurrent use. The connection stays the caller's: closing it ends
// every call of the client.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	timeout time.Duration
	// apiPrefix is WithAPIPrefix's, "" to find it.
	apiPrefix string

	mu     sync.Mutex
	store  *logstore.Store // bound on first use: the stream may be created after New
	lister *turnlog.Lister // as store
}

// Option configures a Client.
type Option func(*Client) error

// WithTimeout sets the timeout of calls whose context has no deadline
// (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("client: timeout must be positive, got %s", d)
		}
		c.timeout = d
		return nil
	}
}

// WithAPIPrefix sets the JetStream API prefix of the connection's account:
// "JETLOOP.API" for the client and viewer accounts of the shipped
// nats.conf, which import the streams' API under it. Without it New asks
// the server once: the prefix when the account imports it, else $JS.API.
func WithAPIPrefix(prefix string) Option {
	return func(c *Client) error {
		c.apiPrefix = prefix
		return nil
	}
}

// New returns a client on nc. Connecting as the client role of the shipped
// nats.conf needs nats.CustomInboxPrefix("_INBOX_cli").
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: nil connection")
	}
	c := &Client{nc: nc, timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	js, err := bus.JetStreamFor(context.Background(), nc, c.apiPrefix)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.js = js
	return c, nil
}

// bounded gives ctx the client's timeout unless it has a deadline already.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

func (c *Client) events(ctx context.Context) (*logstore.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store != nil {
		return c.store, nil
	}
	s, err := logstore.New(ctx, c.js)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.store = s
	return s, nil
}

// summaries binds the lister of turns and workflows on first use.
func (c *Client) summaries(ctx context.Context) (*turnlog.Lister, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lister != nil {
		return c.lister, nil
	}
	l, err := turnlog.NewLister(ctx, c.js)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.lister = l
	return l, nil
}

// Text is the input of a turn that says one thing as the user.
func Text(s string) []Message { return []Message{{Role: RoleUser, Content: s}} }

// NewID returns a new turn or session id, a UUIDv7 (ordered by time), as
// Submit chooses when the submission has none. Choose one first to follow a
// turn's deltas from its first step (see StreamDeltas).
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// Submit publishes a turn request and returns its turn id once the inbox has
// it. A submission that fails the schema is refused here; one the
// orchestrator refuses (an unknown agent, say) ends its turn with
// StopRejected, and Wait returns a *RejectedError. Submitting the same
// request again within the inbox's duplicate window (10 min) is a no-op, so
// a Submit that failed may be retried as it is. The turn id is the
// message's id, so another request under a turn id already used is dropped
// as a duplicate within that window too, and Wait follows the first turn:
// choose fresh ids (NewID).
func (c *Client) Submit(ctx context.Context, r TurnRequest) (string, error) {
	rec, err := c.Send(ctx, r)
	return rec.ID, err
}

// Receipt is what the inbox said of a submission: the ID it was published
// under, and whether it was a Duplicate of an earlier message with that id
// (within the inbox's duplicate window), which the inbox dropped.
type Receipt struct {
	ID        string
	Duplicate bool
}

// Send is Submit, saying also whether the inbox dropped the request as a
// duplicate: a program that chose the turn id tells a re-send from a new
// turn by it.
func (c *Client) Send(ctx context.Context, r TurnRequest) (Receipt, error) {
	s := r.submit()
	if s.TurnID == "" {
		s.TurnID = NewID()
	}
	data, err := json.Marshal(s)
	if err != nil {
		return Receipt{}, fmt.Errorf("client: submit: %w", err)
	}
	if err := schemas.Validate("submit", data); err != nil {
		return Receipt{}, fmt.Errorf("client: submit: %w", err)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	ack, err := c.js.Publish(ctx, events.SubjectSubmit, data, jetstream.WithMsgID(s.TurnID))
	if err != nil {
		return Receipt{}, fmt.Errorf("client: submit %s: %w", s.TurnID, err)
	}
	return Receipt{ID: s.TurnID, Duplicate: ack.Duplicate}, nil
}

// Abort stops a turn that has not finished; its running tool calls are
// cancelled and it finishes with StopAborted.
func (c *Client) Abort(ctx context.Context, turnID, reason string) error {
	return c.control(ctx, turnID, events.Control{Action: events.ActionAbort, Reason: reason})
}

// Reply answers the ask_user question callID of a paused turn.
func (c *Client) Reply(ctx context.Context, turnID, callID, answer string) error {
	return c.control(ctx, turnID, events.Control{Action: events.ActionReply, CallID: callID, Answer: answer})
}

// Approve lets the call callID that waits for approval run; the model sees
// note with its result.
func (c *Client) Approve(ctx context.Context, turnID, callID, note string) error {
	yes := true
	return c.control(ctx, turnID, events.Control{Action: events.ActionApprove, CallID: callID, Approved: &yes, Note: note})
}

// Deny refuses the call callID that waits for approval; the model sees an
// error result with note.
func (c *Client) Deny(ctx context.Context, turnID, callID, note string) error {
	no := false
	return c.control(ctx, turnID, events.Control{Action: events.ActionApprove, CallID: callID, Approved: &no, Note: note})
}

// control checks that a control message can move the turn as it is now,
// then publishes it. The orchestrator still judges it against the log when
// it arrives: a turn may move on in between.
func (c *Client) control(ctx context.Context, turnID string, ctl events.Control) error {
	if !events.ValidID(turnID) {
		return fmt.Errorf("client: invalid turn id %q", turnID)
	}
	data, err := json.Marshal(ctl)
	if err != nil {
		return fmt.Errorf("client: %s: %w", ctl.Action, err)
	}
	if err := schemas.Validate("control", data); err != nil {
		return fmt.Errorf("client: %s: %w", ctl.Action, err)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	if err := c.applies(ctx, turnID, ctl); err != nil {
		return err
	}
	if _, err := c.js.Publish(ctx, events.ControlSubject(turnID), data, jetstream.WithMsgID(events.ControlID(turnID, NewID()))); err != nil {
		return fmt.Errorf("client: %s %s: %w", ctl.Action, turnID, err)
	}
	return nil
}

// applies says at once when a control message cannot move the turn (no such
// turn, finished, not waiting on that call), rather than let it become a
// dead letter or be ignored.
func (c *Client) applies(ctx context.Context, turn string, ctl events.Control) error {
	store, err := c.events(ctx)
	if err != nil {
		return err
	}
	st, _, err := store.Load(ctx, turn)
	switch {
	case err != nil:
		return fmt.Errorf("client: %w", err)
	case !st.Exists():
		return notFound(turn)
	case st.Done():
		return &turnError{fmt.Sprintf("turn %q has finished (%s): nothing to %s", turn, st.Finished.StopReason, ctl.Action), ErrTurnFinished}
	case ctl.Action == events.ActionAbort:
		return nil
	}
	p := st.Pending()
	want := map[events.Action]fsm.Gate{events.ActionReply: fsm.GateInput, events.ActionApprove: fsm.GateApproval}[ctl.Action]
	switch {
	case p == nil:
		return &turnError{fmt.Sprintf("turn %q is not paused: nothing to %s", turn, ctl.Action), ErrNotWaiting}
	case p.CallID != ctl.CallID || p.Gate != want:
		what := "a reply to"
		if p.Gate == fsm.GateApproval {
			what = "an approval of"
		}
		return &turnError{fmt.Sprintf("turn %q waits for %s call %s (%s), not for this", turn, what, p.CallID, p.Name), ErrNotWaiting}
	}
	return nil
}
