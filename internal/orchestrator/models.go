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

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// modelRunners run model jobs: each runner pulls one job only when it is free,
// so no job waits in a buffer while its ack timer runs, and a provider's
// rate limit becomes a delayed redelivery instead of a sleeping goroutine.
type modelRunners struct {
	o    *Orchestrator
	cons jetstream.Consumer
	ran  *bus.Ran[[]byte] // the encoded answers of the calls made here
	// A turn's calls carry its whole script; decoding it for each call cost
	// more than a scripted call. Scripts are kept decoded by their bytes,
	// so a kept one is the one the call carries.
	scripts byBytes[*model.Script]
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

func newModelRunners(ctx context.Context, o *Orchestrator, alone bool) (*modelRunners, error) {
	cons, err := o.js.CreateOrUpdateConsumer(ctx, events.StreamJobs, bus.ModelConsumerConfig(o.ackWait))
	if err != nil {
		return nil, fmt.Errorf("orchestrator: model consumer: %w", err)
	}
	if alone {
		if err := o.reclaim(ctx, events.StreamJobs, cons); err != nil {
			return nil, err
		}
	}
	return &modelRunners{o: o, cons: cons, ran: bus.NewRan[[]byte]()}, nil
}

func (r *modelRunners) run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.o.runners {
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
	bus.PullRepairing(ctx, r.cons, r.o.log.With("consumer", bus.ModelConsumer), r.o.repairJobs,
		func(msg jetstream.Msg) { r.handle(ctx, msg) })
}

// handle runs one model job. A stop of the process gives the call drainGrace
// to finish; a call cut short is handed back, never answered half-done.
func (r *modelRunners) handle(stop context.Context, msg jetstream.Msg) {
	o := r.o
	ref, err := decodeModelJobRef(msg.Data())
	if err != nil {
		reason := err.Error()
		o.log.Warn("dead letter", "input", "model_job", "reason", reason)
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		defer cancel()
		if err := o.deadLetter(ctx, msg, "model", reason); err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.TermWithReason(reason)
		return
	}
	attempt := max(ref.Attempt, 1)
	if wait := time.Until(ref.NotBefore); wait > 0 {
		_ = msg.NakWithDelay(wait)
		return
	}
	// Built only when something is logged: a logger With attributes is a
	// copy of the handler, and most calls log nothing.
	log := func() *slog.Logger {
		return o.log.With("turn", ref.TurnID, "step", ref.Step, "kind", ref.Kind, "attempt", attempt)
	}
	id := modelJobID(ref)
	// A job for a call this process made (or makes): its acknowledgement
	// was lost, or the jobs were derived again after a server restart.
	// The answer it got is sent again; the model is not called twice.
	if data, ok := r.ran.Result(stop, id); ok {
		pctx, pcancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		_, err := o.js.Publish(pctx, events.ModelResultSubject(ref.TurnID), data, jetstream.WithMsgID(id))
		pcancel()
		if err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
		actx, acancel := context.WithTimeout(context.Background(), o.ackWait)
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
		o.calls.drop(id)
		_ = msg.Ack()
		return
	case err != nil:
		log().Warn("cannot read the turn of a model call; it comes again", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forget := o.cancels.Add(ref.TurnID, cancel)
	defer forget()
	grace := context.AfterFunc(stop, func() {
		t := time.AfterFunc(o.drainGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer grace()
	beat := bus.Heartbeat(ctx, msg, o.ackWait/3)
	defer beat()

	began := time.Now()
	resp, err := r.call(ctx, job, attempt)
	o.observeModelCall(ctx, stop, job, attempt, began, resp, err)
	res := events.ModelResult{TurnID: ref.TurnID, Step: ref.Step, Kind: ref.Kind, Text: resp.Text,
		ToolCalls: resp.ToolCalls, FinishReason: resp.FinishReason, Usage: resp.Usage,
		DurationMs: time.Since(began).Milliseconds(), Attempts: attempt}
	if err != nil {
		if ctx.Err() != nil && stop.Err() != nil {
			// Cut short by the process stopping: another process answers.
			_ = msg.Nak()
			return
		}
		if ctx.Err() != nil {
			// Cancelled by an abort: the turn has finished and ignores any
			// answer.
			o.calls.drop(id)
			_ = msg.Ack()
			return
		}
		var me *model.Error
		if errors.As(err, &me) && me.Retryable() && attempt < model.MaxAttempts {
			delay := retryDelay(attempt, me.RetryAfter)
			log().Warn("model call failed; retrying", "err", err, "in", delay)
			r.retry(msg, ref, attempt+1, delay)
			return
		}
		log().Warn("model call failed for good", "err", err)
		res = failedCall(res, err.Error())
	}
	data, err := events.Marshal(res)
	if err == nil && len(data) > o.maxResult() {
		// An answer that cannot be stored ends its step with an error
		// that says so, instead of a publish that fails for ever.
		log().Warn("model answer too big to store", "bytes", len(data))
		data, err = events.Marshal(failedCall(res, fmt.Sprintf("the model's answer (%d bytes encoded) exceeds the server's max payload (%d bytes)",
			len(data), o.nc.MaxPayload())))
	}
	if err != nil {
		log().Error("cannot encode a model result", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	kept = &data
	// The answer is published until it is stored (its id makes a copy
	// nothing), the job heartbeated meanwhile: handing the job back would
	// call the model again for an answer this process holds. Only a stop
	// of the process bounds the tries, by its drain grace.
	pause := 250 * time.Millisecond
	for try := 1; ; try++ {
		pctx, pcancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		_, err := o.js.Publish(pctx, events.ModelResultSubject(ref.TurnID), data, jetstream.WithMsgID(id))
		pcancel()
		if err == nil {
			break
		}
		if stop.Err() != nil && time.Since(began) > o.drainGrace {
			log().Warn("cannot publish a model result before stopping; the call runs again elsewhere", "err", err)
			_ = msg.Nak()
			return
		}
		log().Warn("cannot publish a model result; trying again", "err", err, "try", try)
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Second)
	}
	o.calls.drop(id)
	actx, acancel := context.WithTimeout(context.Background(), o.ackWait)
	defer acancel()
	if err := bus.AckSure(actx, msg); err != nil {
		log().Warn("ack of a model job not confirmed; the call may run again (its answer is deduplicated)", "err", err)
	}
}

// failedCall is the answer of a call that failed for good.
func failedCall(res events.ModelResult, reason string) events.ModelResult {
	return events.ModelResult{TurnID: res.TurnID, Step: res.Step, Kind: res.Kind, Usage: events.Usage{},
		DurationMs: res.DurationMs, Attempts: res.Attempts, Error: reason}
}

// maxResult is the largest model result that leaves room, within the
// server's max payload, for the event that records it.
func (o *Orchestrator) maxResult() int {
	return int(o.nc.MaxPayload()) - eventRoom
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
	if job, ok := r.o.calls.get(id); ok {
		return job, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultIOTimeout)
	defer cancel()
	st, _, err := r.o.store.Load(ctx, ref.TurnID)
	if err != nil {
		return nil, err
	}
	if !st.Exists() || st.Done() {
		return nil, errStaleCall
	}
	if err := r.o.history.fill(ctx, st); err != nil {
		return nil, err
	}
	for _, j := range fsm.Jobs(st) {
		if j.ID == id && j.Model != nil {
			return j.Model, nil
		}
	}
	return nil, errStaleCall
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
	ref.Attempt = attempt
	ref.NotBefore = time.Now().Add(delay).UTC()
	data, err := events.Marshal(ref)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		defer cancel()
		_, err = r.o.js.Publish(ctx, events.SubjectModel, data,
			jetstream.WithMsgID(fmt.Sprintf("%s:attempt-%d", modelJobID(ref), attempt)))
	}
	if err != nil {
		// This attempt is made again instead: the count stays honest.
		r.o.log.Warn("cannot schedule a model retry", "turn", ref.TurnID, "err", err)
		_ = msg.NakWithDelay(delay)
		return
	}
	_ = msg.Ack()
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
	p, ok := r.o.providers[provider]
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
		_ = r.o.nc.Publish(subject, data) // live view only: a lost delta loses nothing
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
