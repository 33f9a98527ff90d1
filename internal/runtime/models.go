package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/nats-io/nats.go/jetstream"
)

// ModelConsumer is the durable consumer of model jobs shared by every
// orchestrator's runners.
const ModelConsumer = "model_runner"

// modelRunners run model jobs: each runner pulls one job only when it is free,
// so no job waits in a buffer while its ack timer runs, and a provider's
// rate limit becomes a delayed redelivery instead of a sleeping goroutine.
type modelRunners struct {
	o    *Orchestrator
	cons jetstream.Consumer
	// Every model job of a turn carries the turn's whole script and tool
	// specs; decoding them for each call cost more than a scripted call.
	// They are kept decoded by their bytes, so a kept one is the one the
	// job carries.
	scripts byBytes[*model.Script]
	tools   byBytes[[]events.ToolSpec]
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

func decodeTools(raw []byte) ([]events.ToolSpec, error) {
	var t []events.ToolSpec
	return t, json.Unmarshal(raw, &t)
}

func newModelRunners(ctx context.Context, o *Orchestrator, alone bool) (*modelRunners, error) {
	cons, err := o.js.CreateOrUpdateConsumer(ctx, events.StreamJobs, ModelConsumerConfig(o.ackWait))
	if err != nil {
		return nil, fmt.Errorf("runtime: model consumer: %w", err)
	}
	if alone {
		if err := o.reclaim(ctx, events.StreamJobs, cons); err != nil {
			return nil, err
		}
	}
	return &modelRunners{o: o, cons: cons}, nil
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
	PullEach(ctx, r.cons, r.o.log.With("consumer", ModelConsumer), func(msg jetstream.Msg) { r.handle(ctx, msg) })
}

// PullEach pulls one message at a time from cons and handles it, until ctx
// ends. Asking for a message only when free to handle it keeps every message
// out of client buffers, where its ack timer would run while it waits.
func PullEach(ctx context.Context, cons jetstream.Consumer, log *slog.Logger, handle func(jetstream.Msg)) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				log.Warn("fetch failed", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		for msg := range batch.Messages() {
			handle(msg)
		}
		cancel()
	}
}

// handle runs one model job. A stop of the process gives the call drainGrace
// to finish; a call cut short is handed back, never answered half-done.
func (r *modelRunners) handle(stop context.Context, msg jetstream.Msg) {
	o := r.o
	job, err := r.decodeJob(msg.Data())
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
	attempt := max(job.Attempt, 1)
	if wait := time.Until(job.NotBefore); wait > 0 {
		_ = msg.NakWithDelay(wait)
		return
	}
	// Built only when something is logged: a logger With attributes is a
	// copy of the handler, and most calls log nothing.
	log := func() *slog.Logger {
		return o.log.With("turn", job.TurnID, "step", job.Step, "kind", job.Kind, "attempt", attempt)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forget := o.cancels.Add(job.TurnID, cancel)
	defer forget()
	grace := context.AfterFunc(stop, func() {
		t := time.AfterFunc(o.drainGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer grace()
	beat := Heartbeat(ctx, msg, o.ackWait/3)
	defer beat()

	began := time.Now()
	resp, err := r.call(ctx, job, attempt)
	res := events.ModelResult{TurnID: job.TurnID, Step: job.Step, Kind: job.Kind, Text: resp.Text,
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
			_ = msg.Ack()
			return
		}
		var me *model.Error
		if errors.As(err, &me) && me.Retryable() && attempt < model.MaxAttempts {
			delay := retryDelay(attempt, me.RetryAfter)
			log().Warn("model call failed; retrying", "err", err, "in", delay)
			r.retry(msg, job, attempt+1, delay)
			return
		}
		log().Warn("model call failed for good", "err", err)
		res = events.ModelResult{TurnID: job.TurnID, Step: job.Step, Kind: job.Kind, Usage: events.Usage{},
			DurationMs: res.DurationMs, Attempts: attempt, Error: err.Error()}
	}
	data, err := json.Marshal(res)
	if err != nil {
		log().Error("cannot encode a model result", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	pctx, pcancel := context.WithTimeout(context.Background(), defaultIOTimeout)
	defer pcancel()
	if _, err := o.js.Publish(pctx, events.ModelResultSubject(job.TurnID), data, jetstream.WithMsgID(modelJobID(job))); err != nil {
		log().Warn("cannot publish a model result; the call runs again", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.Ack(); err != nil {
		log().Debug("ack of a model job failed; its result is deduplicated", "err", err)
	}
}

// decodeModelJob reads a model job and checks what the runner relies on.
// Only orchestrators write model jobs (nats.conf lets no other user publish
// on jetloop.jobs.model), from typed values whose JSON a test checks against
// the model_job schema, and a job's script passed the script schema when its
// turn started. So the job is not validated against its schema again: that
// check, whose cost grows with the conversation the job carries, took a
// third of the orchestrator's CPU under load.
//
// The job is read field by field: its tools come from r.tools, its script
// is kept as bytes until a scripted call needs it (r.scripts), and the other
// fields are decoded alone, so only the conversation is decoded in full.
// A job that is not a plain object is read by encoding/json.
func (r *modelRunners) decodeJob(data []byte) (events.ModelJob, error) {
	var job events.ModelJob
	var err error
	ok := events.EachField(data, func(key string, v []byte) bool {
		switch key {
		case "tools":
			if string(v) == "null" {
				job.Tools = nil
				return true
			}
			job.Tools, err = r.tools.get(v, decodeTools)
			return err == nil
		case "script":
			// Checked when a scripted call decodes it: the script passed
			// its schema when the turn started.
			job.Script = json.RawMessage(v)
			return true
		}
		f := jobField(&job, key)
		return f != nil && json.Unmarshal(v, f) == nil
	})
	if !ok {
		job = events.ModelJob{}
		if err := json.Unmarshal(data, &job); err != nil {
			return job, &deadLetter{"model_job: " + err.Error()}
		}
	}
	return job, checkModelJob(job)
}

// checkModelJob checks what the runner relies on in a decoded job.
func checkModelJob(job events.ModelJob) error {
	switch {
	case !events.ValidID(job.TurnID) || !events.ValidID(job.SessionID):
		return &deadLetter{fmt.Sprintf("model_job: invalid turn or session id %q/%q", job.SessionID, job.TurnID)}
	case job.Kind != events.ModelStep && job.Kind != events.ModelSummary:
		return &deadLetter{fmt.Sprintf("model_job: unknown kind %q", job.Kind)}
	case job.Model == "" || job.Step < 0:
		return &deadLetter{"model_job: no model, or a negative step"}
	}
	return nil
}

// jobField returns the field of job that key names, nil for any other key
// (left to encoding/json, which matches keys without regard to case). Tools
// and script are read apart.
func jobField(job *events.ModelJob, key string) any {
	switch key {
	case "turn_id":
		return &job.TurnID
	case "session_id":
		return &job.SessionID
	case "step":
		return &job.Step
	case "kind":
		return &job.Kind
	case "model":
		return &job.Model
	case "system":
		return &job.System
	case "messages":
		return &job.Messages
	case "script_index":
		return &job.ScriptIndex
	case "instruction":
		return &job.Instruction
	case "attempt":
		return &job.Attempt
	case "not_before":
		return &job.NotBefore
	}
	return nil
}

// retry replaces a job with its next attempt, due after delay. The
// replacement is published before the job is acknowledged, and its id names
// the attempt, so a crash between the two loses nothing and runs the attempt
// once.
func (r *modelRunners) retry(msg jetstream.Msg, job events.ModelJob, attempt int, delay time.Duration) {
	job.Attempt = attempt
	job.NotBefore = time.Now().Add(delay).UTC()
	data, err := json.Marshal(job)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		defer cancel()
		_, err = r.o.js.Publish(ctx, events.SubjectModel, data,
			jetstream.WithMsgID(fmt.Sprintf("%s:attempt-%d", modelJobID(job), attempt)))
	}
	if err != nil {
		// This attempt is made again instead: the count stays honest.
		r.o.log.Warn("cannot schedule a model retry", "turn", job.TurnID, "err", err)
		_ = msg.NakWithDelay(delay)
		return
	}
	_ = msg.Ack()
}

func modelJobID(job events.ModelJob) string {
	if job.Kind == events.ModelSummary {
		return fmt.Sprintf("model:%s:summary", job.TurnID)
	}
	return fmt.Sprintf("model:%s:%d", job.TurnID, job.Step)
}

// call makes one attempt of a model job with the provider its model names,
// streaming text deltas to live viewers.
func (r *modelRunners) call(ctx context.Context, job events.ModelJob, attempt int) (model.Response, error) {
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

// Heartbeat tells JetStream that a long call is alive, so its job is not
// handed to another process while it runs.
func Heartbeat(ctx context.Context, msg jetstream.Msg, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return cancel
}
