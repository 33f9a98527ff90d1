package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go/jetstream"
)

type invoiceArgs struct {
	Customer string   `json:"customer" description:"customer id"`
	Months   int      `json:"months,omitempty"`
	Tags     []string `json:"tags,omitempty"`
}

// HandleFunc derives the schema from the arguments' type, advertises it,
// checks calls against it and hands the function typed arguments.
func TestHandleFuncTypesArguments(t *testing.T) {
	e := newEnv(t)
	e.serve([]worker.Option{worker.WithName("billing")}, func(w *worker.Worker) error {
		must(t, worker.HandleFunc(w, "invoice", "Sums a customer's invoices.",
			func(_ context.Context, a invoiceArgs) (worker.Result, error) {
				if a.Customer == "boom" {
					return worker.Result{}, errors.New("billing is down")
				}
				if a.Customer == "panic" {
					panic("a bug")
				}
				return worker.Result{Output: fmt.Sprintf("%s: %d months, %d tags", a.Customer, a.Months, len(a.Tags))}, nil
			}))
		must(t, w.Handle("call", "Says what it was called with.", nil, func(_ context.Context, c worker.Call) (worker.Result, error) {
			return worker.Result{Output: fmt.Sprintf("%s %s %d %s %d", c.TurnID, c.CallID, c.Step, c.Arguments, c.Attempt), Final: true}, nil
		}, worker.WithTimeout(90e9)))
		return nil
	})
	info := e.info("invoice")
	want, err := worker.Schema(invoiceArgs{})
	must(t, err)
	if info == nil || string(info.Parameters) != string(want) || info.Description != "Sums a customer's invoices." || info.Workers != 1 {
		t.Fatalf("invoice advertised as %+v", info)
	}
	if info := e.info("call"); info == nil || info.TimeoutMs != 90_000 || string(info.Parameters) != `{"type":"object"}` {
		t.Fatalf("call advertised as %+v", info)
	}
	for _, tc := range []struct {
		turn, tool, args string
		want             string
		isError, final   bool
	}{
		{"a1", "invoice", `{"customer":"C-42","months":3,"tags":["x"]}`, "C-42: 3 months, 1 tags", false, false},
		{"a2", "invoice", `{"months":3}`, "invalid arguments for invoice", true, false},
		{"a3", "invoice", `{"customer":"C-1","extra":true}`, "invalid arguments for invoice", true, false},
		{"a4", "invoice", `{"customer":"boom"}`, "billing is down", true, false},
		{"a5", "invoice", `{"customer":"panic"}`, "internal error: a bug", true, false},
		{"a6", "call", `{"any":[1]}`, `a6 c-a6 1 {"any":[1]} 1`, false, true},
	} {
		e.job(job(tc.turn, tc.tool, tc.args))
		r := e.result(tc.turn)
		if !strings.Contains(r.Output, tc.want) || r.IsError != tc.isError || r.Final != tc.final || r.Worker != "billing" {
			t.Errorf("%s %s: %+v", tc.tool, tc.args, r)
		}
	}
	e.waitFor("every job acknowledged", func() bool { return e.pending() == 0 })
}

// Jobs no worker can run are dead letters, answered when they name their
// call; huge arguments are answered like any others. None stops the worker.
func TestHostileJobs(t *testing.T) {
	e := newEnv(t)
	e.serve(nil, func(w *worker.Worker) error {
		must(t, w.Handle("size", "Counts its arguments' bytes.", nil, func(_ context.Context, c worker.Call) (worker.Result, error) {
			return worker.Result{Output: fmt.Sprint(len(c.Arguments))}, nil
		}))
		return nil
	})
	// A job for another tool on this tool's subject.
	wrong := job("h1", "other", `{}`)
	data, err := json.Marshal(wrong)
	must(t, err)
	e.publish(events.ToolSubject("size"), data)
	if r := e.result("h1"); !r.IsError || !strings.Contains(r.Output, "invalid job") {
		t.Errorf("a job for another tool answered with %+v", r)
	}
	// Not JSON, and JSON that is not a job.
	e.publish(events.ToolSubject("size"), []byte("\x00\xff{"))
	e.publish(events.ToolSubject("size"), []byte(`[1,2,3]`))
	// Arguments of 600 KB.
	big := fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 600_000))
	e.job(job("h2", "size", big))
	if r := e.result("h2"); r.IsError || r.Output != fmt.Sprint(len(big)) {
		t.Errorf("huge arguments answered with %+v", r)
	}
	e.waitFor("the jobs gone from the stream", func() bool { return e.pending() == 0 })
	e.waitFor("three dead letters", func() bool { return e.dead() == 3 })
	// Still serving.
	e.job(job("h3", "size", `{}`))
	if r := e.result("h3"); r.Output != "2" {
		t.Errorf("after the hostile jobs: %+v", r)
	}
}

// Handle and New refuse what cannot be served, and Run what has nothing to
// serve, each with an error that says why.
func TestConfigurationErrors(t *testing.T) {
	e := newEnv(t)
	nc, _ := e.srv.Connect(t)
	if _, err := worker.New(nil); err == nil {
		t.Error("New without a connection")
	}
	if _, err := worker.New(nc, worker.WithName("no spaces")); !errors.Is(err, worker.ErrInvalidName) {
		t.Errorf("New with a name that has spaces: %v", err)
	}
	for i, o := range []worker.Option{worker.WithConcurrency(-1), worker.WithConcurrency(0), worker.WithAckWait(1), worker.WithMaxDeliver(-2),
		worker.WithDrainGrace(0), worker.WithLogger(nil)} {
		if _, err := worker.New(nc, o); err == nil {
			t.Errorf("New with option %d accepted", i)
		}
	}
	w, err := worker.New(nc)
	must(t, err)
	if w.Name() == "" {
		t.Error("no default name")
	}
	if err := w.Run(t.Context()); !errors.Is(err, worker.ErrNoTools) {
		t.Errorf("Run without tools: %v", err)
	}
	if err := w.Run(t.Context()); !errors.Is(err, worker.ErrRunning) {
		t.Errorf("Run twice: %v", err)
	}
	w, err = worker.New(nc)
	must(t, err)
	ok := func(context.Context, worker.Call) (worker.Result, error) { return worker.Result{}, nil }
	for _, tc := range []struct {
		name   string
		params any
		fn     worker.Func
		opts   []worker.ToolOption
	}{
		{"bad.name", nil, ok, nil},
		{"t1", `{"type":"object"`, ok, nil},
		{"t2", `{"type":"nonsense"}`, ok, nil},
		{"t3", 42, ok, nil},
		{"t4", struct{ C chan int }{}, ok, nil},
		{"t5", nil, nil, nil},
		{"t6", nil, ok, []worker.ToolOption{worker.WithTimeout(0)}},
	} {
		if err := w.Handle(tc.name, "", tc.params, tc.fn, tc.opts...); err == nil {
			t.Errorf("Handle(%q, %v) accepted", tc.name, tc.params)
		}
	}
	if err := w.Handle("bad.name", "", nil, ok); !errors.Is(err, worker.ErrInvalidName) {
		t.Errorf("a tool name with a dot: %v", err)
	}
	must(t, w.Handle("fine", "", map[string]any{"type": "object"}, ok))
	if err := w.Handle("fine", "", nil, ok); !errors.Is(err, worker.ErrDuplicate) {
		t.Errorf("a tool registered twice: %v", err)
	}
	hook := worker.HookFunc(func(context.Context, worker.Checkpoint) (worker.Decision, error) { return worker.Continue(""), nil })
	must(t, w.HandleHook("audit", hook))
	if err := w.HandleHook("audit", hook); !errors.Is(err, worker.ErrDuplicate) {
		t.Errorf("a hook registered twice: %v", err)
	}
	if err := w.HandleHook("rules", hook); !errors.Is(err, worker.ErrInvalidName) {
		t.Errorf("a hook named rules: %v", err)
	}
}

// A worker's Run that stops at once is a graceful stop.
func TestRunStopsGracefully(t *testing.T) {
	e := newEnv(t)
	stop, _ := e.serve(nil, func(w *worker.Worker) error {
		must(t, w.Handle("noop", "", nil, func(context.Context, worker.Call) (worker.Result, error) { return worker.Result{}, nil }))
		return nil
	})
	stop()
	e.waitFor("the tool withdrawn", func() bool { return e.info("noop") == nil })
}

// dead counts the dead letters of jobs.
func (e *env) dead() uint64 {
	s, err := e.js.Stream(context.Background(), events.StreamDead)
	must(e.t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(events.DeadSubject("job")))
	must(e.t, err)
	return info.State.Msgs
}
