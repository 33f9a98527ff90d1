// Package logstore folds the logs of JETLOOP_EVENTS into the machines'
// states: bus.Store reads and appends a log's messages, and what those
// messages mean, a turn (internal/fsm) or a workflow (internal/workflow),
// is decided here. A process that only moves messages (a tool worker, the
// public worker package) links bus without either machine.
package logstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// Store is a bus.Store that also folds what it reads.
type Store struct {
	*bus.Store
}

// New binds the events stream, which must exist.
func New(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	s, err := bus.NewStore(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// ErrIsWorkflow: the id names a workflow's log, not a turn's (the two share
// one namespace).
var ErrIsWorkflow = errors.New("bus: the id is a workflow's")

// ErrIsTurn: the id names a turn's log, not a workflow's.
var ErrIsTurn = errors.New("bus: the id is a turn's")

// LoadWorkflow folds a workflow's log into its state and returns the stream
// sequence of its last event. A workflow without a log is workflow.New; a
// turn's log is ErrIsTurn.
func (s *Store) LoadWorkflow(ctx context.Context, id string) (*workflow.State, uint64, error) {
	log, lastSeq, err := s.Read(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if len(log) > 0 && !log[0].Type.Workflow() {
		return nil, 0, fmt.Errorf("%w: %s", ErrIsTurn, id)
	}
	st, err := workflow.Fold(log)
	if err != nil {
		return nil, 0, fmt.Errorf("bus: fold workflow %s: %w", id, err)
	}
	if st.ID == "" {
		st = workflow.New(id)
	}
	return st, lastSeq, nil
}

// Load folds a turn's log into its state and returns the stream sequence of
// its last event. A turn without a log is fsm.New; a workflow's log is
// ErrIsWorkflow.
func (s *Store) Load(ctx context.Context, turn string) (*fsm.State, uint64, error) {
	log, lastSeq, err := s.Read(ctx, turn)
	if err != nil {
		return nil, 0, err
	}
	if len(log) > 0 && log[0].Type.Workflow() {
		return nil, 0, fmt.Errorf("%w: %s", ErrIsWorkflow, turn)
	}
	st, err := fsm.Fold(log)
	if err != nil {
		return nil, 0, fmt.Errorf("bus: fold %s: %w", turn, err)
	}
	if st.TurnID == "" {
		st = fsm.New(turn)
	}
	return st, lastSeq, nil
}
