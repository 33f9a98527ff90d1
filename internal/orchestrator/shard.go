package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/lru"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// shard advances the turns that hash to it and owns their cached states.
// One turn's inputs are handled one at a time, in order, by a lane of its
// own; the shard handles one input at a time (slot), as a single loop
// would, until an input takes longer than parkAfter: then that input is
// parked — its lane goes on with it, and with the rest of its turn's inputs
// after it — and the shard takes the next turn's input. A turn whose I/O
// stalls (a stream failing over, a 5 s timeout) thus holds up its own
// inputs only, never a result of another turn of the shard.
type shard struct {
	// The parts it depends on (Orchestrator), never the Orchestrator.
	log     *slog.Logger
	store   *logstore.Store
	owner   *ownership
	admit   admitter
	starter *starter
	eff     *effects
	obs     *observer
	graves  *graves
	// crashAt, when set, is the crash hook (WithCrashHook).
	crashAt func(stage string) error

	in       *queue
	cache    *locked[*entry[*fsm.State]]
	flows    *locked[*entry[*workflow.State]] // workflows, uncapped: few and small
	stopping *atomic.Bool                     // the process is stopping: hand inputs back
	dead     atomic.Bool                      // a crash hook fired: behave like a dead process
	// preloaded are turns' logs read ahead of an input's decision (a
	// submission's, with what its start reads), used by the turn's first
	// load.
	preloaded *locked[*preloaded]
	// early are the calls whose results were applied as they were
	// published, until their stored copies come (applyEarly). Bounded: a
	// result the inbox refused has no stored copy.
	early *locked[struct{}]

	// slot is held by the input being handled, until it is parked; lanes
	// bounds the turns handled at once, parked ones included, so that a
	// server slow for everyone is not met with ever more requests.
	slot  chan struct{}
	lanes chan struct{}
	mu    sync.Mutex
	// waiting are the turns with a lane, each with the inputs that wait
	// behind the one its lane handles.
	waiting map[string][]input
	running sync.WaitGroup
}

// parkAfter is how long an input holds its shard before the shard goes on
// with other turns' inputs: well above a step's handling on a loaded
// machine (a few ms), well below the I/O timeouts of a server failing over.
const parkAfter = 100 * time.Millisecond

// maxLanes bounds the turns one shard handles at once, parked ones
// included.
const maxLanes = 64

// earlyResults bounds the results a shard remembers it applied before they
// were stored: far more than its turns' calls in flight.
const earlyResults = 4096

func newShard(o *Orchestrator, cacheSize int, stopping *atomic.Bool) *shard {
	return &shard{log: o.log, store: o.store, owner: o.owner, admit: o.admit, starter: o.starter, eff: o.eff, obs: o.obs,
		graves: o.graves, crashAt: o.cfg.beforeAck, in: newQueue(), cache: newLocked[*entry[*fsm.State]](cacheSize), flows: newLocked[*entry[*workflow.State]](0),
		preloaded: newLocked[*preloaded](0), early: newLocked[struct{}](earlyResults), stopping: stopping,
		slot: make(chan struct{}, 1), lanes: make(chan struct{}, maxLanes), waiting: map[string][]input{}}
}

// run hands each input to its turn's lane, starting one when the turn has
// none, until the queue is closed and every lane is done.
func (s *shard) run() {
	for {
		in, ok := s.in.pop()
		if !ok {
			s.running.Wait()
			return
		}
		turn := in.turn()
		s.mu.Lock()
		if q, busy := s.waiting[turn]; busy {
			s.waiting[turn] = append(q, in)
			s.mu.Unlock()
			continue
		}
		s.waiting[turn] = nil
		s.mu.Unlock()
		s.lanes <- struct{}{}
		s.running.Add(1)
		go s.lane(turn, in)
	}
}

// lane handles one turn's inputs in order until none waits.
func (s *shard) lane(turn string, in input) {
	defer s.running.Done()
	defer func() { <-s.lanes }()
	for {
		s.take(in)
		s.mu.Lock()
		q := s.waiting[turn]
		if len(q) == 0 {
			delete(s.waiting, turn)
			s.mu.Unlock()
			return
		}
		in, q[0] = q[0], input{}
		s.waiting[turn] = q[1:]
		s.mu.Unlock()
	}
}

// take handles one input in the shard's slot, which it gives up when the
// input is parked.
func (s *shard) take(in input) {
	s.slot <- struct{}{}
	var once sync.Once
	release := func() { once.Do(func() { <-s.slot }) }
	park := time.AfterFunc(parkAfter, release)
	defer release()
	defer park.Stop()
	switch {
	case in.answer != nil:
		in.answer.verdict <- s.answer(in.answer.res)
	case in.early != nil:
		s.admit.acquire() // a tenant's results take their turn too
		defer s.admit.release()
		err := s.applyEarly(*in.early)
		if in.direct != nil && !errors.Is(err, errCrashed) {
			answerDirect(in.direct, err)
		}
		if in.direct != nil && err == nil {
			// Counted here, as it has no stored copy to be counted with.
			s.obs.countInput(events.InputResult, nil, 1)
		}
	case s.dead.Load():
	case s.stopping.Load():
		_ = in.msg.Nak() // not started: another process takes it now
	default:
		s.admit.acquire()
		s.handle(in.msg)
		s.admit.release()
	}
}

// locked is a cache (or, of size 0, a map) that the lanes of a shard share.
// An entry is only ever used by its turn's lane.
type locked[V any] struct {
	mu sync.Mutex
	c  *lru.Cache[string, V]
	m  map[string]V
}

func newLocked[V any](size int) *locked[V] {
	if size == 0 {
		return &locked[V]{m: map[string]V{}}
	}
	return &locked[V]{c: lru.New[string, V](size)}
}

func (l *locked[V]) Get(key string) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		return l.c.Get(key)
	}
	v, ok := l.m[key]
	return v, ok
}

func (l *locked[V]) Contains(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		return l.c.Contains(key)
	}
	_, ok := l.m[key]
	return ok
}

func (l *locked[V]) Put(key string, v V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		l.c.Put(key, v)
		return
	}
	l.m[key] = v
}

func (l *locked[V]) Delete(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		l.c.Delete(key)
		return
	}
	delete(l.m, key)
}

// input is what a shard handles: an inbox message, or the answer of a model
// call this process made for one of the shard's turns.
type input struct {
	msg    jetstream.Msg
	answer *answer
	// early is a tool result seen as it was published, before the inbox
	// stored it, or handed to this process as a request (direct), whose
	// sender waits for the answer (Orchestrator.watchResults).
	early  *events.ToolResult
	direct *nats.Msg
}

// turn is the turn (or workflow) whose lane handles the input.
func (in input) turn() string {
	switch {
	case in.answer != nil:
		return in.answer.res.TurnID
	case in.early != nil:
		return in.early.TurnID
	}
	return inputTurn(in.msg)
}

// answer is a model call's answer handed to a shard, which says on verdict
// whether it applied it.
type answer struct {
	res     events.ModelResult
	verdict chan error
}

// queue holds a shard's inputs. It never blocks the dispatcher: one shard
// slowed by one turn's input must not hold up the inputs of every other
// shard. What it can hold is bounded by the inbox consumer's MaxAckPending
// and by the model calls made at once.
type queue struct {
	mu     sync.Mutex
	items  []input
	closed bool
	wake   chan struct{}
}

func newQueue() *queue { return &queue{wake: make(chan struct{}, 1)} }

// push queues an input; false when the queue is closed.
func (q *queue) push(in input) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, in)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// close lets pop return false once the queue is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) pop() (input, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			in := q.items[0]
			q.items[0] = input{}
			q.items = q.items[1:]
			if len(q.items) == 0 {
				q.items = nil // let the backing array go
			}
			q.mu.Unlock()
			return in, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return input{}, false
		}
		<-q.wake
	}
}

// errNotHere is a model answer no shard of this process can apply now:
// it goes through the inbox to whichever process owns its turn.
var errNotHere = errors.New("orchestrator: the turn is not served here now")

// deliver hands a model answer of a call made here to its turn's shard
// and waits for the shard's verdict: nil when applied, errCrashed when a
// crash hook said the process died.
func (o *Orchestrator) deliver(res events.ModelResult) error {
	shards := o.serving.Load()
	if shards == nil || !o.owner.owned(res.TurnID) {
		return errNotHere
	}
	a := &answer{res: res, verdict: make(chan error, 1)}
	if !(*shards)[shardIndex(res.TurnID, len(*shards))].in.push(input{answer: a}) {
		return errNotHere
	}
	return <-a.verdict
}

// answer applies a model answer handed over by this process's runner, as
// the inbox's model results are applied. Anything short of applied hands
// it back to the runner, which publishes it to the inbox.
func (s *shard) answer(res events.ModelResult) error {
	switch {
	case s.dead.Load():
		return errCrashed
	case s.stopping.Load():
		return errNotHere
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultIOTimeout)
	defer cancel()
	err := s.apply(ctx, s.log.With("input", "model", "turn", res.TurnID), res.TurnID, fsm.ModelAnswer(res), false)
	if errors.Is(err, errCrashed) {
		s.dead.Store(true)
	}
	if err == nil {
		s.obs.countInput("model", nil, 1)
	}
	return err
}

// applyEarly applies a tool result seen on its way to the inbox, or handed
// to this process directly by its worker, as a stored copy would be
// applied, and returns nil once the result's decision is in the log.
// Whatever keeps it from being applied here — a repeat, a forged or
// misrouted result, a crash, a turn this process no longer owns — is met
// again by a stored copy (a direct result's worker, told it was not
// applied or told nothing, publishes it to the inbox), which is retried or
// dead-lettered as any input is; and what only a read of the log could
// judge is left to it (errDoubt), so a flood of forged results costs no
// more reads than before. Once it is applied (its decision appended), a
// stored copy is acknowledged as a repeat without another decision
// (dispatch).
func (s *shard) applyEarly(r events.ToolResult) error {
	switch {
	case s.dead.Load():
		return errCrashed
	case s.stopping.Load():
		return errNotHere
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultIOTimeout)
	defer cancel()
	log := s.log.With("input", "result", "turn", r.TurnID, "early", true)
	err := advance[*fsm.State, fsm.Input](ctx, s, turns{s}, log, r.TurnID, fsm.ToolAnswer(r), false, true)
	switch {
	case err == nil:
		s.early.Put(earlyKey(r.TurnID, r.CallID), struct{}{})
	case errors.Is(err, errCrashed):
		s.dead.Store(true)
	default:
		log.Debug("a result not applied before it was stored: its stored copy will be", "err", err)
	}
	return err
}

// answerDirect answers a worker that handed a result directly: an empty
// reply once its decision is in the log, one with HeaderError otherwise,
// on which the worker publishes the result to the inbox. A reply goes
// only to a requester's inbox: a reply subject is whatever the sender
// wrote, and this process may publish where no worker may
// (docs/accounts.md).
func answerDirect(req *nats.Msg, err error) {
	if !replyable(req.Reply) {
		return
	}
	reply := &nats.Msg{Subject: req.Reply}
	if err != nil {
		reply.Header = nats.Header{events.HeaderError: []string{bus.Truncate(err.Error(), 256)}}
	}
	_ = req.RespondMsg(reply)
}

// replyable reports whether a reply subject is a requester's inbox: the
// client library's (_INBOX., or a custom _INBOX_<name>. prefix) or one a
// service import maps replies through (_R_.).
func replyable(subject string) bool {
	return strings.HasPrefix(subject, "_INBOX") || strings.HasPrefix(subject, "_R_.")
}

// earlyKey names a call whose result was applied before it was stored.
func earlyKey(turn, call string) string { return turn + "\x00" + call }

// retry is an input that could not be handled now and comes back later:
// after its redelivery delay, or, when it is held back for up to hold, a
// second after its first delivery, two after its second, and so on: soon
// at first, within the inbox's deliveries (five cover 15 s).
type retry struct {
	err  error
	hold time.Duration
}

func (r *retry) Error() string { return r.err.Error() }
func (r *retry) Unwrap() error { return r.err }

// dead is an input that can never be handled: it becomes a dead letter.
type deadLetter struct{ reason string }

func (d *deadLetter) Error() string { return d.reason }

// errCrashed stops an input where a crash hook said the process died.
var errCrashed = errors.New("orchestrator: crash hook")

func (s *shard) handle(msg jetstream.Msg) {
	// The input is finished even when the process is stopping: it was taken,
	// so it is completed or handed back, never half done.
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultIOTimeout)
	defer cancel()
	kind, turn := inputKind(msg.Subject())
	log := s.log.With("input", kind)
	if turn != "" {
		log = log.With("turn", turn)
	}
	delivered := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	var err error
	if copied := storedCopy(msg.Headers()); copied != "" {
		err = &deadLetter{fmt.Sprintf("a message copied out of a stream (header %s), not an input: a reply subject or a consumer's delivery subject pointed at the inbox", copied)}
	} else {
		err = s.dispatch(ctx, log, msg, kind, turn, delivered)
	}
	s.obs.countInput(kind, err, delivered)
	var r *retry
	var d *deadLetter
	switch {
	case err == nil:
		if err := msg.Ack(); err != nil {
			log.Warn("ack failed; the input will come again and change nothing", "err", err)
		}
	case errors.Is(err, errCrashed):
		s.dead.Store(true)
	case errors.As(err, &d):
		log.Warn("dead letter", "reason", d.reason)
		s.bury(log, msg, kind, d.reason)
	case delivered >= bus.InboxMaxDeliver:
		// Its last delivery: it becomes a dead letter with its last error
		// rather than hold its turn's inputs back for ever.
		reason := fmt.Sprintf("not handled after %d deliveries: %v", delivered, err)
		log.Error("dead letter", "reason", reason)
		s.bury(log, msg, kind, reason)
	case errors.As(err, &r):
		log.Warn("input deferred", "err", r.err)
		delay := redeliveryDelay(delivered)
		if r.hold > 0 {
			delay = max(delay, min(r.hold, time.Duration(delivered)*time.Second))
		}
		_ = msg.NakWithDelay(delay)
	default:
		log.Error("input failed", "err", err)
		_ = msg.NakWithDelay(redeliveryDelay(delivered))
	}
}

// storedCopy names the header that shows a message is a copy of one stored
// in a stream — a dead letter, an event, a direct get's answer — sent to
// the inbox as the reply to a read or by a consumer whose delivery subject
// a reader chose. Permissions cannot stop that route (the server checks
// neither reply nor delivery subjects), and a dead letter's payload is
// whatever its sender wrote: it must never count as an input.
func storedCopy(h nats.Header) string {
	for _, k := range []string{events.HeaderError, events.HeaderType, "Jetloop-Subject", "Nats-Stream", "Nats-Sequence", "Nats-Subject"} {
		if h.Get(k) != "" {
			return k
		}
	}
	return ""
}

// bury keeps an input that cannot be handled as a dead letter and removes
// it from the inbox. A dead letter that cannot be written (the dead-letter
// stream is unavailable or full) hands the input back for later instead: it
// is never lost, and the write has its own short deadline, so a shard is
// never held for long.
func (s *shard) bury(log *slog.Logger, msg jetstream.Msg, kind events.Input, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), deadLetterTimeout)
	defer cancel()
	if err := s.graves.deadLetter(ctx, msg, kind, reason); err != nil {
		log.Error("cannot write the dead letter; the input comes again", "err", err)
		if md, err := msg.Metadata(); err == nil {
			s.graves.stranded.failed(md.Sequence.Stream, reason)
		}
		_ = msg.NakWithDelay(redeliveryDelay(bus.InboxMaxDeliver))
		return
	}
	_ = msg.TermWithReason(bus.Truncate(reason, 256))
}

// deadLetterTimeout bounds a dead letter's write.
const deadLetterTimeout = 2 * time.Second

// inputKind names an inbox subject's kind of input and its turn.
func inputKind(subject string) (kind events.Input, turn string) {
	kind, turn, _ = events.ParseInbox(bus.Unpartitioned(subject))
	return kind, turn
}

// answerer is the tool or hook a result's or hook answer's subject is
// bound to (jetloop.inbox.result@<tool>.<turn_id>), "" on the unbound
// subjects only the orchestrators are granted.
func answerer(subject string) string {
	_, _, by := events.ParseInbox(bus.Unpartitioned(subject))
	return by
}

// misbound says why result r cannot be taken from subject, "" when it
// can. A deployment's account is granted the result subjects of the tools
// it serves only, so a result is taken for the tool its subject names; and
// a subagent's notice, which hands the turn its child's log, only from the
// orchestrators, on the unbound subject.
func misbound(subject string, r events.ToolResult) string {
	return misboundTo(answerer(subject), r)
}

// misboundTo is misbound of a result whose subject names tool by.
func misboundTo(by string, r events.ToolResult) string {
	switch {
	case by == "":
		return ""
	case r.Tool != by:
		return fmt.Sprintf("result for tool %s published on tool %s's subject: a deployment answers only the tools it serves", r.Tool, by)
	case fsm.FromSubagent(r.Worker):
		return fmt.Sprintf("a subagent's notice published on tool %s's subject: only an orchestrator sends one", by)
	}
	return ""
}

// redeliveryDelay delays a failed input more on each delivery, up to 10 s.
func redeliveryDelay(delivered uint64) time.Duration {
	return min(time.Duration(max(delivered, 1))*200*time.Millisecond, 10*time.Second)
}

func (s *shard) dispatch(ctx context.Context, log *slog.Logger, msg jetstream.Msg, kind events.Input, turn string, delivered uint64) error {
	redelivered := delivered > 1
	if kind == events.InputUnknown {
		return &deadLetter{fmt.Sprintf("no input of jetloop has the subject %q", bus.Unpartitioned(msg.Subject()))}
	}
	if !kind.Submission() && !events.ValidID(turn) {
		return &deadLetter{fmt.Sprintf("invalid turn id in subject %q", bus.Unpartitioned(msg.Subject()))}
	}
	var in fsm.Input
	switch kind {
	case events.InputSubmit:
		return s.submit(ctx, log, msg.Data(), redelivered)
	case events.InputWorkflow:
		return s.workflowSubmit(ctx, log, msg.Data())
	case events.InputTask:
		var t events.TaskDone
		if err := decode("task_done", msg.Data(), &t); err != nil {
			return err
		}
		if t.WorkflowID != turn {
			return &deadLetter{fmt.Sprintf("task of workflow %q sent to workflow %q", t.WorkflowID, turn)}
		}
		return s.applyWorkflow(ctx, log, turn, workflow.TaskDone(t))
	case events.InputHook:
		var a events.HookAnswer
		if err := decode("hook_answer", msg.Data(), &a); err != nil {
			return err
		}
		if a.WorkflowID != turn {
			return &deadLetter{fmt.Sprintf("answer of hook %s about workflow %q sent to workflow %q", a.Hook, a.WorkflowID, turn)}
		}
		if by := answerer(msg.Subject()); by != "" && a.Hook != by {
			return &deadLetter{fmt.Sprintf("answer of hook %s published on hook %s's subject: a deployment answers only the hooks it serves", a.Hook, by)}
		}
		return s.applyWorkflow(ctx, log.With("hook", a.Hook), turn, workflow.HookAnswer(a))
	}
	if kind == events.InputControl || kind == events.InputTimer {
		// Workflows and turns share ids, and these two subjects.
		wf, err := s.isWorkflow(ctx, turn)
		if err != nil {
			return err
		}
		if wf {
			return s.workflowInput(ctx, log, msg, kind, turn)
		}
	}
	switch kind {
	case events.InputControl:
		var c events.Control
		if err := decode("control", msg.Data(), &c); err != nil {
			return err
		}
		in = fsm.Command(c)
	case events.InputResult:
		r, err := decodeToolResult(msg.Data())
		if err != nil {
			return err
		}
		if r.TurnID != turn {
			return &deadLetter{fmt.Sprintf("result for turn %q sent to turn %q", r.TurnID, turn)}
		}
		if reason := misbound(msg.Subject(), r); reason != "" {
			return &deadLetter{reason}
		}
		if key := earlyKey(turn, r.CallID); s.early.Contains(key) {
			// Applied as it was published: this is its stored copy.
			// Its call's result is in the log whatever another process
			// did since (the append was fenced), so no read is needed.
			s.early.Delete(key)
			return nil
		}
		in = fsm.ToolAnswer(r)
		if fsm.FromSubagent(r.Worker) {
			// A subagent's notice: the result is the child's log's.
			if in, err = s.eff.childAnswer(ctx, turn, r.CallID); err != nil {
				return err
			}
		}
	case events.InputModel:
		r, err := decodeModelResult(msg.Data())
		if err != nil {
			return err
		}
		if r.TurnID != turn {
			return &deadLetter{fmt.Sprintf("model result for turn %q sent to turn %q", r.TurnID, turn)}
		}
		in = fsm.ModelAnswer(r)
	case events.InputTimer:
		var t events.Timer
		if err := decode("timer", msg.Data(), &t); err != nil {
			return err
		}
		in = fsm.Tick(t)
	default:
		return &deadLetter{fmt.Sprintf("no input kind %q", kind)}
	}
	return s.apply(ctx, log, turn, in, redelivered)
}

type preloaded struct {
	turn string
	e    *entry[*fsm.State]
	err  error
}

// append appends a decision's events. Under a crash hook, a decision of
// several events is appended in two parts with StagePartial between them.
func (s *shard) append(ctx context.Context, last uint64, evs []events.Envelope) (uint64, error) {
	if s.crashAt == nil || len(evs) < 2 {
		return s.store.Append(ctx, last, evs)
	}
	seq, err := s.store.Append(ctx, last, evs[:1])
	if err != nil {
		return seq, err
	}
	if err := s.crash(StagePartial); err != nil {
		return seq, err
	}
	return s.store.Append(ctx, seq, evs[1:])
}

// unstorableError is a decision that cannot be stored as it is: an event
// too big for the server, or a stream that is full.
type unstorableError struct{ err error }

func (u *unstorableError) Error() string { return u.err.Error() }
func (u *unstorableError) Unwrap() error { return u.err }

// unstorable reports whether a publish failed for a reason that waiting
// does not cure by itself: too big for the server, or a full stream.
func unstorable(err error) bool {
	var tb *bus.TooBigError
	if errors.As(err, &tb) || errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeInsufficientResources, codeStorageExceeded, codeMessageTooBig:
		return true
	case codeStoreFailed:
		// A stream with discard new at its bound says so in this one.
		return strings.Contains(apiErr.Description, "maximum bytes exceeded") ||
			strings.Contains(apiErr.Description, "maximum messages exceeded")
	}
	return false
}

// JetStream error codes of a store that cannot take a message.
const (
	codeInsufficientResources = 10023
	codeStorageExceeded       = 10047
	codeMessageTooBig         = 10054
	codeStoreFailed           = 10077
)

func (s *shard) crash(stage string) error {
	if s.crashAt == nil {
		return nil
	}
	if s.dead.Load() {
		// Another lane of the shard died already: so did this one.
		return errCrashed
	}
	if err := s.crashAt(stage); err != nil {
		return errCrashed
	}
	return nil
}
