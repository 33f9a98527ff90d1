package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// modelRunners make model calls: those of the turns this process owns as
// their shards decide them (local), and model jobs, pulled one at a time
// per runner, so no job waits in a buffer while its ack timer runs. A
// provider's rate limit becomes a delayed job instead of a sleeping
// goroutine.
type modelRunners struct {
	modelDeps
	ran *bus.Ran[[]byte] // the encoded answers of the calls made here
	// slots bound the calls made at once, pulled or local.
	slots chan struct{}
	// inProcess bounds the calls made in-process that are not over: made,
	// or answered and waiting for their turn's shard (maxLocalCalls).
	inProcess chan struct{}
	begun     begun
	// spawned are the calls running here without a job: the process
	// waits for them to end before it stops.
	spawned sync.WaitGroup
	// next holds, by call id, the next attempt of a call this process
	// made and scheduled as a job, until the call is answered.
	nextMu sync.Mutex
	next   map[string]events.ModelJobRef
	// stop is the process's serving context: calls made here get its
	// drain grace when it ends.
	stop context.Context
	// A turn's calls carry its whole script; decoding it for each call cost
	// more than a scripted call. Scripts are kept decoded by their bytes,
	// so a kept one is the one the call carries.
	scripts byBytes[*model.Script]
}

// modelDeps is what the model runners use of the process they run in: its
// connection, the calls its shards hold, the turns' logs, and a way to
// hand an answer to the shard of its turn.
type modelDeps struct {
	js  jetstream.JetStream
	nc  *nats.Conn // deltas, and the server's max payload
	log *slog.Logger
	// cons is the model jobs' consumer; repair makes it, and the jobs
	// stream, again when the server lost them.
	cons   jetstream.Consumer
	repair func(context.Context) (jetstream.Consumer, error)
	// runners is how many calls run at once.
	runners   int
	providers map[string]model.Provider
	// calls are the calls this process's shards published; the others
	// are derived from their turns' logs, through store and history.
	calls   *calls
	store   *logstore.Store
	history *historyCache
	cancels *bus.Cancels // an abort of a turn cancels its calls
	ackWait time.Duration
	// drainGrace is what a call gets to finish once the process stops.
	drainGrace time.Duration
	// deliver hands an answer to its turn's shard: errNotHere when no
	// shard here serves the turn, errCrashed when a crash hook fired.
	deliver func(events.ModelResult) error
	// bury keeps a job that cannot be read as a dead letter.
	bury func(ctx context.Context, msg jetstream.Msg, kind events.Input, reason string) error
	// observe records an attempt's metrics and span.
	observe func(ctx, stop context.Context, job *events.ModelJob, attempt int, began time.Time, resp model.Response, err error)
}

// byBytes keeps values decoded from JSON, looked up by that JSON. Callers
// only read the values.
type byBytes[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

// maxKept bounds the values a byBytes keeps: past it, it starts over.
const maxKept = 1024

// get returns the value decoded from raw.
func (c *byBytes[T]) get(raw []byte, decode func([]byte) (T, error)) (T, error) {
	c.mu.Lock()
	v, ok := c.m[string(raw)]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := decode(raw)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxKept {
		c.m = make(map[string]T)
	}
	c.m[string(raw)] = v
	c.mu.Unlock()
	return v, nil
}

func decodeScript(raw []byte) (*model.Script, error) {
	s := new(model.Script)
	return s, json.Unmarshal(raw, s)
}

func newModelRunners(d modelDeps) *modelRunners {
	return &modelRunners{modelDeps: d, ran: bus.NewRan[[]byte](), slots: make(chan struct{}, d.runners),
		inProcess: make(chan struct{}, maxLocalCalls)}
}

func (r *modelRunners) run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx)
		}()
	}
	wg.Wait()
	return nil
}

func (r *modelRunners) loop(ctx context.Context) {
	bus.PullRepairing(ctx, r.cons, r.log.With("consumer", bus.ModelConsumer), r.repair,
		func(msg jetstream.Msg) { r.handle(ctx, msg) })
}

// handle runs one model job. A stop of the process gives the call drainGrace
// to finish; a call cut short is handed back, never answered half-done.
func (r *modelRunners) handle(stop context.Context, msg jetstream.Msg) {
	ref, err := decodeModelJobRef(msg.Data())
	if err != nil {
		reason := err.Error()
		r.log.Warn("dead letter", "input", "model_job", "reason", reason)
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		defer cancel()
		if err := r.bury(ctx, msg, "model", reason); err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.TermWithReason(reason)
		return
	}
	attempt := max(ref.Attempt, 1)
	id := modelJobID(ref)
	if next, ok := r.nextAttempt(id); ok && next.Attempt > attempt {
		// An attempt this process made already, whose next one it
		// scheduled: the jobs were derived again from the log after a
		// server restart lost them (jobs in memory). The next attempt's job
		// goes again; this attempt is not made twice.
		if err := r.publishAttempt(next, next.Attempt, time.Until(next.NotBefore)); err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.Ack()
		return
	}
	if wait := time.Until(ref.NotBefore); wait > 0 {
		_ = msg.NakWithDelay(wait)
		return
	}
	// The job is heartbeated from here until its answer is stored, waiting
	// for its turn's log or a free runner included: a job left past its ack
	// wait is delivered to another runner, and both would make the call.
	// (Reads wait out a cluster's election of a leader.)
	hb, hbStop := context.WithCancel(context.Background())
	defer hbStop()
	defer bus.Heartbeat(hb, msg, r.ackWait/3)()
	// A job for a call this process made (or makes): its acknowledgement
	// was lost, the jobs were derived again after a server restart, or the
	// call runs here without a job. The answer it got is sent again; the
	// model is not called twice.
	if data, ok := r.ran.Result(stop, id); ok {
		pctx, pcancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		_, err := r.js.Publish(pctx, events.ModelResultSubject(ref.TurnID), data, jetstream.WithMsgID(id))
		pcancel()
		if err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
		actx, acancel := context.WithTimeout(context.Background(), r.ackWait)
		defer acancel()
		_ = bus.AckSure(actx, msg)
		return
	}
	done := r.ran.Begin(id)
	var kept *[]byte
	defer func() { done(kept) }()
	job, err := r.resolve(ref, id)
	switch {
	case errors.Is(err, errStaleCall):
		// The turn has moved past this call (aborted, timed out, or
		// answered by another runner): nobody waits for its answer.
		r.letGo(id)
		_ = msg.Ack()
		return
	case err != nil:
		r.log.Warn("cannot read the turn of a model call; it comes again", "turn", ref.TurnID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	select {
	case r.slots <- struct{}{}:
	case <-stop.Done():
		_ = msg.Nak()
		return
	}
	began := time.Now()
	v, res, data, delay := r.attempt(stop, job, attempt)
	<-r.slots
	switch v {
	case handedBack:
		_ = msg.Nak()
		return
	case aborted:
		r.letGo(id)
		_ = msg.Ack()
		return
	case retryLater:
		r.retry(msg, ref, attempt+1, delay)
		return
	case unencodable:
		_ = msg.NakWithDelay(time.Second)
		return
	}
	kept = &data
	if !r.publishAnswer(stop, res, id, data, began) {
		_ = msg.Nak()
		return
	}
	r.letGo(id)
	actx, acancel := context.WithTimeout(context.Background(), r.ackWait)
	defer acancel()
	if err := bus.AckSure(actx, msg); err != nil {
		r.log.Warn("ack of a model job not confirmed; the call may run again (its answer is deduplicated)", "turn", ref.TurnID, "err", err)
	}
}

// local runs a model call of a turn whose partition this process owns
// right here, without a job: the job's publish, its delivery, the
// answer's publish and its delivery were four of a step's hops. The
// answer goes straight to the turn's shard, or through the inbox when the
// shard cannot take it. It reports false when the call is to go as a job.
//
// Only a fresh decision, one that appended the events asking for the call,
// begins it here, and only when a runner is free. A decision taken again
// that appends nothing may follow one that published the call's job (a
// submission decided first by an orchestrator that does not own its turn;
// a dead owner's partition comes to a new owner, which publishes the jobs
// its turns wait on): it publishes the job again, which its id makes
// nothing. A call is recorded as begun here or gone as a job, and stays
// so: each way a call begun here ends leads on durably (its answer applied
// or published, a job for its next attempt), or ends with the process, and
// then the next owner of the turn's partition publishes its job (rearm).
func (r *modelRunners) local(job *events.ModelJob, id string, fresh bool) bool {
	return r.begun.mark(id, func() bool { return fresh && r.spawn(job, id) })
}

// maxLocalCalls bounds the calls made in-process at once, from their
// start to their answer applied or stored. An answer waits for its turn's
// shard, which may be slower than the model: without a bound, a burst of
// turns held a goroutine and an answer in memory for each (10,000
// submitted at once: 16 KB per turn instead of 7). Past it, calls go as
// jobs, and their answers wait in the inbox.
const maxLocalCalls = 256

// spawn makes a call here if a runner is free. A call already running or
// answered here (a job of it was pulled) is not made again.
func (r *modelRunners) spawn(job *events.ModelJob, id string) bool {
	select {
	case r.inProcess <- struct{}{}:
	default:
		return false
	}
	select {
	case r.slots <- struct{}{}:
	default:
		<-r.inProcess
		return false
	}
	done, ok := r.ran.TryBegin(id)
	if !ok {
		<-r.slots
		<-r.inProcess
		return true
	}
	r.calls.put(id, job)
	r.spawned.Add(1)
	go func() {
		defer r.spawned.Done()
		r.runLocal(job, id, done)
	}()
	return true
}

// begun records, by call id, the calls this process began making itself
// (true) or gave to the runners as jobs (false), the last maxBegun of them.
type begun struct {
	mu    sync.Mutex
	m     map[string]bool
	order []string
}

const maxBegun = 1 << 16

// mark records how a call goes, here (how returns true) or as a job, unless
// it is recorded already, and returns how it goes. how runs under the lock,
// so a shard deciding the call and a re-arming publishing its job agree.
func (b *begun) mark(id string, how func() bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if here, seen := b.m[id]; seen {
		return here
	}
	if b.m == nil {
		b.m = make(map[string]bool)
	}
	here := how()
	b.m[id] = here
	b.order = append(b.order, id)
	for len(b.order) > maxBegun {
		delete(b.m, b.order[0])
		b.order = b.order[1:]
	}
	return here
}

func (r *modelRunners) runLocal(job *events.ModelJob, id string, done func(*[]byte)) {
	defer func() { <-r.inProcess }() // maxLocalCalls
	ref := refOf(job)
	attempt := max(ref.Attempt, 1)
	began := time.Now()
	v, res, data, delay := r.attempt(r.stop, job, attempt)
	<-r.slots
	var kept *[]byte
	defer func() { done(kept) }()
	switch v {
	case aborted:
		r.letGo(id)
		return
	case retryLater:
		r.schedule(ref, attempt+1, delay)
		return
	case handedBack, unencodable:
		// Another runner makes this attempt.
		r.schedule(ref, attempt, 0)
		return
	}
	kept = &data
	switch err := r.deliver(res); {
	case err == nil:
		r.letGo(id)
		return
	case errors.Is(err, errCrashed):
		return
	case !errors.Is(err, errNotHere):
		r.log.Debug("a model answer goes through the inbox", "turn", res.TurnID, "err", err)
	}
	if !r.publishAnswer(r.stop, res, id, data, began) {
		r.log.Warn("a model answer was not stored before stopping; the next owner of the turn calls the model again", "turn", res.TurnID)
		return
	}
	r.letGo(id)
}

// verdict is what became of one attempt of a model call.
type verdict int

const (
	answered    verdict = iota // the answer is to be delivered
	handedBack                 // cut short by the process stopping
	aborted                    // the turn was aborted: nobody waits for an answer
	retryLater                 // failed, to be tried again after a delay
	unencodable                // the answer could not be encoded
)

// attempt makes one attempt of a call, streaming its deltas, and returns
// its answer (a failure for good is an answer too), encoded.
func (r *modelRunners) attempt(stop context.Context, job *events.ModelJob, attempt int) (verdict, events.ModelResult, []byte, time.Duration) {
	// Built only when something is logged: a logger With attributes is a
	// copy of the handler, and most calls log nothing.
	log := func() *slog.Logger {
		return r.log.With("turn", job.TurnID, "step", job.Step, "kind", job.Kind, "attempt", attempt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forget := r.cancels.Add(job.TurnID, cancel)
	defer forget()
	grace := context.AfterFunc(stop, func() {
		t := time.AfterFunc(r.drainGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer grace()

	began := time.Now()
	resp, err := r.call(ctx, job, attempt)
	r.observe(ctx, stop, job, attempt, began, resp, err)
	res := events.ModelResult{TurnID: job.TurnID, Step: job.Step, Kind: job.Kind, Text: resp.Text,
		ToolCalls: resp.ToolCalls, FinishReason: resp.FinishReason, Usage: resp.Usage,
		DurationMs: time.Since(began).Milliseconds(), Attempts: attempt}
	if err != nil {
		if ctx.Err() != nil && stop.Err() != nil {
			return handedBack, res, nil, 0 // another process answers
		}
		if ctx.Err() != nil {
			return aborted, res, nil, 0 // the turn has finished and ignores any answer
		}
		var me *model.Error
		if errors.As(err, &me) && me.Retryable() && attempt < model.MaxAttempts {
			delay := retryDelay(attempt, me.RetryAfter)
			log().Warn("model call failed; retrying", "err", err, "in", delay)
			return retryLater, res, nil, delay
		}
		log().Warn("model call failed for good", "err", err)
		res = failedCall(res, err.Error())
	}
	data, err := events.Marshal(res)
	if err == nil && len(data) > r.maxResult() {
		// An answer that cannot be stored ends its step with an error
		// that says so, instead of a publish that fails for ever.
		log().Warn("model answer too big to store", "bytes", len(data))
		res = failedCall(res, fmt.Sprintf("the model's answer (%d bytes encoded) exceeds the server's max payload (%d bytes)",
			len(data), r.nc.MaxPayload()))
		data, err = events.Marshal(res)
	}
	if err != nil {
		log().Error("cannot encode a model result", "err", err)
		return unencodable, res, nil, 0
	}
	return answered, res, data, 0
}

// publishAnswer publishes a model answer to the inbox until it is stored
// (its id makes a copy nothing): giving up would call the model again for
// an answer this process holds. Only a stop of the process bounds the
// tries, by its drain grace; it reports false when that cut them short.
func (r *modelRunners) publishAnswer(stop context.Context, res events.ModelResult, id string, data []byte, began time.Time) bool {
	// The tries outlive stop by the drain grace, counted from the call's
	// start: an answer this process holds is worth waiting for.
	ctx, cancel := context.WithCancel(context.WithoutCancel(stop))
	defer cancel()
	defer context.AfterFunc(stop, func() { time.AfterFunc(time.Until(began.Add(r.drainGrace)), cancel) })()
	err := backoff.Policy{First: 250 * time.Millisecond, Max: 2 * time.Second}.Do(ctx, func(try int) error {
		pctx, pcancel := context.WithTimeout(ctx, defaultIOTimeout)
		_, err := r.js.Publish(pctx, events.ModelResultSubject(res.TurnID), data, jetstream.WithMsgID(id))
		pcancel()
		switch {
		case err == nil:
			return nil
		case r.nc.IsClosed() || ctx.Err() != nil:
			return backoff.Permanent(err)
		}
		r.log.Warn("cannot publish a model result; trying again", "turn", res.TurnID, "err", err, "try", try)
		return err
	})
	if err != nil {
		r.log.Warn("cannot publish a model result before stopping; the call runs again elsewhere", "turn", res.TurnID, "err", err)
		return false
	}
	return true
}

// failedCall is the answer of a call that failed for good.
func failedCall(res events.ModelResult, reason string) events.ModelResult {
	return events.ModelResult{TurnID: res.TurnID, Step: res.Step, Kind: res.Kind, Usage: events.Usage{},
		DurationMs: res.DurationMs, Attempts: res.Attempts, Error: reason}
}

// maxResult is the largest model result that leaves room, within the
// server's max payload, for the event that records it.
func (r *modelRunners) maxResult() int {
	return int(r.nc.MaxPayload()) - eventRoom
}

// eventRoom is what an event adds to the data it records: the envelope,
// its headers, and the fields the machine adds.
const eventRoom = 4 << 10

// errStaleCall is a model job whose turn no longer waits for it.
var errStaleCall = errors.New("orchestrator: the turn no longer waits for this model call")

// resolve returns the call a job names: held by this process when one of
// its shards published it, else derived from the turn's log, as the shard
// did. A turn that no longer waits for the call makes it stale.
func (r *modelRunners) resolve(ref events.ModelJobRef, id string) (*events.ModelJob, error) {
	if job, ok := r.calls.get(id); ok {
		return job, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultIOTimeout)
	defer cancel()
	st, _, err := r.store.Load(ctx, ref.TurnID)
	if err != nil {
		return nil, err
	}
	if !st.Exists() || st.Done() {
		return nil, errStaleCall
	}
	if err := r.history.fill(ctx, st); err != nil {
		return nil, err
	}
	for _, j := range fsm.Jobs(st) {
		if j.ID == id && j.Model != nil {
			return j.Model, nil
		}
	}
	if before(st, ref) {
		// Every job is published after the events that ask for it: a log
		// that has not come as far is a read behind the appends, and the
		// job comes again rather than be dropped.
		return nil, fmt.Errorf("orchestrator: the log of %s read ends before step %d asked for the call", ref.TurnID, ref.Step)
	}
	return nil, errStaleCall
}

// before reports whether a turn's state has not yet come to the model call
// a job names: a step call of a later step, or of its step not started yet;
// a summary the turn has not begun (a turn that has moved past its summary
// is finished).
func before(st *fsm.State, ref events.ModelJobRef) bool {
	if ref.Kind == events.ModelSummary {
		return !st.Done() && st.Phase != fsm.PhaseSummarizing
	}
	return st.Step < ref.Step || st.Step == ref.Step && (st.Phase == fsm.PhaseNew || st.Phase == fsm.PhaseStepStart)
}

// decodeModelJobRef reads a model job: a reference to a call, checked as
// strictly as its schema (only orchestrators publish it).
func decodeModelJobRef(data []byte) (events.ModelJobRef, error) {
	var ref events.ModelJobRef
	if err := schemas.Validate("model_job", data); err != nil {
		return ref, &deadLetter{err.Error()}
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		return ref, &deadLetter{"model_job: " + err.Error()}
	}
	return ref, nil
}

// retry replaces a job with its next attempt, due after delay. The
// replacement is published before the job is acknowledged, and its id names
// the attempt, so a crash between the two loses nothing and runs the attempt
// once.
func (r *modelRunners) retry(msg jetstream.Msg, ref events.ModelJobRef, attempt int, delay time.Duration) {
	if err := r.publishAttempt(ref, attempt, delay); err != nil {
		// This attempt is made again instead: the count stays honest.
		r.log.Warn("cannot schedule a model retry", "turn", ref.TurnID, "err", err)
		_ = msg.NakWithDelay(delay)
		return
	}
	_ = msg.Ack()
}

// schedule hands an attempt of a call made here to the runners as a job,
// due after delay. Should the job not be stored, the attempt is made here
// again after the delay, or when a runner is free.
func (r *modelRunners) schedule(ref events.ModelJobRef, attempt int, delay time.Duration) {
	err := r.publishAttempt(ref, attempt, delay)
	if err == nil || r.stop.Err() != nil {
		return
	}
	r.log.Warn("cannot schedule a model call; trying again", "turn", ref.TurnID, "err", err)
	time.AfterFunc(max(delay, time.Second), func() {
		if r.stop.Err() != nil {
			return // the next owner of the turn's partition makes the call
		}
		job, ok := r.calls.get(modelJobID(ref))
		if !ok {
			return // answered, or let go: derived again from the log when needed
		}
		job = new(*job)
		job.Attempt = attempt
		if !r.spawn(job, modelJobID(ref)) {
			r.schedule(ref, attempt, 0)
		}
	})
}

// publishAttempt publishes the job of one attempt of a call. The first
// attempt's id is the call's, so the job of a call handed back and the one
// a new owner derives from the log are one.
func (r *modelRunners) publishAttempt(ref events.ModelJobRef, attempt int, delay time.Duration) error {
	ref.Attempt = attempt
	ref.NotBefore = time.Time{}
	if delay > 0 {
		ref.NotBefore = time.Now().Add(delay).UTC()
	}
	data, err := events.Marshal(ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
	defer cancel()
	_, err = r.js.Publish(ctx, events.SubjectModel, data, jetstream.WithMsgID(attemptID(ref, attempt)))
	if err == nil && attempt > 1 {
		r.nextMu.Lock()
		if r.next == nil || len(r.next) >= maxBegun {
			// A call whose retry another process's runner answered is
			// never let go here: the record is dropped whole rather than
			// grow. What it loses is only that a retry's job derived again
			// after a server restart makes its attempt once more.
			r.next = make(map[string]events.ModelJobRef)
		}
		r.next[modelJobID(ref)] = ref
		r.nextMu.Unlock()
	}
	return err
}

// nextAttempt returns the next attempt scheduled of a call made here.
func (r *modelRunners) nextAttempt(id string) (events.ModelJobRef, bool) {
	r.nextMu.Lock()
	defer r.nextMu.Unlock()
	ref, ok := r.next[id]
	return ref, ok
}

// letGo forgets a call once answered (its answer stored or applied), stale
// or aborted.
func (r *modelRunners) letGo(id string) {
	r.calls.drop(id)
	r.nextMu.Lock()
	delete(r.next, id)
	r.nextMu.Unlock()
}

// attemptID is the message id of the job of a call's attempt.
func attemptID(ref events.ModelJobRef, attempt int) string {
	if attempt <= 1 {
		return modelJobID(ref)
	}
	return fmt.Sprintf("%s:attempt-%d", modelJobID(ref), attempt)
}

func modelJobID(ref events.ModelJobRef) string {
	if ref.Kind == events.ModelSummary {
		return fmt.Sprintf("model:%s:summary", ref.TurnID)
	}
	return fmt.Sprintf("model:%s:%d", ref.TurnID, ref.Step)
}

// call makes one attempt of a model job with the provider its model names,
// streaming text deltas to live viewers.
func (r *modelRunners) call(ctx context.Context, job *events.ModelJob, attempt int) (model.Response, error) {
	provider, name, err := model.Spec(job.Model)
	if err != nil {
		return model.Response{}, &model.Error{Kind: model.BadRequest, Message: err.Error()}
	}
	p, ok := r.providers[provider]
	if !ok {
		return model.Response{}, &model.Error{Kind: model.BadRequest, Message: fmt.Sprintf("provider %q is not configured", provider)}
	}
	req := model.Request{TurnID: job.TurnID, Step: job.Step, Kind: job.Kind, Model: name, System: job.System,
		Messages: job.Messages, Tools: job.Tools, Instruction: job.Instruction, ScriptIndex: job.ScriptIndex,
		Attempt: attempt}
	if provider == "script" {
		req.Model = ""
		// The script passed its schema when the turn started: decode only.
		if req.Script, err = r.scripts.get(job.Script, decodeScript); err != nil {
			return model.Response{}, &model.Error{Kind: model.BadRequest, Message: "script: " + err.Error()}
		}
	}
	subject := events.DeltaSubject(job.TurnID)
	emit := func(delta string) {
		data, _ := json.Marshal(events.Delta{TurnID: job.TurnID, Step: job.Step, Delta: delta})
		_ = r.nc.Publish(subject, data) // live view only: a lost delta loses nothing
	}
	return p.Call(ctx, req, emit)
}

// retryDelay is exponential with jitter, and never shorter than what the
// provider asked for.
func retryDelay(attempt int, retryAfter time.Duration) time.Duration {
	d := time.Duration(250*(1<<(attempt-1))) * time.Millisecond
	d += time.Duration(rand.Int64N(int64(d/2) + 1))
	return max(d, retryAfter)
}
