package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/turnlog"
)

// Turn is a turn at a glance: TurnID, SessionID, Status (and StopReason
// once finished, or Waiting while paused), Agent, Model, Steps, ToolCalls,
// Started and Last (the times of its first and last events), Events (their
// count), ForkedFrom and Error. Its JSON is what `jetloop turns --json`
// prints.
type Turn = turnlog.Turn

// Status is where a turn stands: StatusRunning, StatusPaused or
// StatusFinished.
type Status = turnlog.Status

// Turn statuses.
const (
	StatusRunning  = turnlog.Running
	StatusPaused   = turnlog.Paused
	StatusFinished = turnlog.Finished
)

// Waiting is what a paused turn waits for: Kind PauseInput with the
// Question of an ask_user call (answer it with Reply), or Kind
// PauseApproval with the Tool and Arguments of a gated call (Approve or
// Deny it). CallID names the call either way.
type Waiting = turnlog.Waiting

// TurnFilter selects turns; its zero value selects every turn.
type TurnFilter struct {
	SessionID  string     // only the turns of this session
	Agent      string     // only the turns of this agent
	Status     Status     // only turns with this status
	StopReason StopReason // only finished turns that stopped with this reason
}

func (f TurnFilter) match(t Turn) bool {
	return (f.Agent == "" || t.Agent == f.Agent) && (f.Status == "" || t.Status == f.Status) &&
		(f.StopReason == "" || t.StopReason == f.StopReason)
}

// Turns lists the turns the filter selects, newest first. A finished turn
// costs two reads, so listing thousands is quick; a turn under way is read
// whole, to say what it waits for.
func (c *Client) Turns(ctx context.Context, filter TurnFilter) ([]Turn, error) {
	if filter.SessionID != "" && !events.ValidID(filter.SessionID) {
		return nil, fmt.Errorf("client: invalid session id %q", filter.SessionID)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	l, err := c.summaries(ctx)
	if err != nil {
		return nil, err
	}
	all, err := l.List(ctx, filter.SessionID)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	out := all[:0]
	for _, t := range all {
		if filter.match(t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Turn describes one turn as it stands now; ErrTurnNotFound when it has no
// log.
func (c *Client) Turn(ctx context.Context, turnID string) (Turn, error) {
	if !events.ValidID(turnID) {
		return Turn{}, fmt.Errorf("client: invalid turn id %q", turnID)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	l, err := c.summaries(ctx)
	if err != nil {
		return Turn{}, err
	}
	t, err := l.Get(ctx, turnID)
	if errors.Is(err, turnlog.ErrNoTurn) {
		return Turn{}, notFound(turnID)
	}
	if err != nil {
		return Turn{}, fmt.Errorf("client: %w", err)
	}
	return t, nil
}
