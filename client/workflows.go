package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkflowSummary is a workflow at a glance, from the first and last events
// of its log: its Status (StatusRunning; StatusPaused while a gate waits
// for ApproveWorkflow; StatusFinished, with its StopReason), the Task it
// is at or ended at, the type of its Last event, and when it Started and
// was last Updated. Its JSON is what `jetloop workflows --json` prints.
type WorkflowSummary struct {
	WorkflowID string     `json:"workflow_id"`
	Status     Status     `json:"status"`
	StopReason StopReason `json:"stop_reason,omitempty"`
	Task       int        `json:"task"`
	Last       EventType  `json:"last"`
	Started    time.Time  `json:"started"`
	Updated    time.Time  `json:"updated"`
}

// Workflows lists the workflows, newest first: two reads each, however
// long their logs.
func (c *Client) Workflows(ctx context.Context) ([]WorkflowSummary, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	l, err := c.summaries(ctx)
	if err != nil {
		return nil, err
	}
	var (
		mu  sync.Mutex
		out []WorkflowSummary
	)
	err = l.Each(ctx, "", func(ctx context.Context, subject string) error {
		stream := l.StreamOf(bus.TurnOf(subject))
		fm, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			return nil // purged since the listing
		}
		first, err := events.FirstOf(fm.Data)
		if err != nil || !first.Type.Workflow() {
			return nil // a turn's log
		}
		lm, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return nil
		}
		last, _ := events.LastOf(lm.Data)
		mu.Lock()
		defer mu.Unlock()
		out = append(out, workflowSummary(first, last))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	slices.SortFunc(out, func(a, b WorkflowSummary) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(a.WorkflowID, b.WorkflowID)
	})
	return out, nil
}

func workflowSummary(first, last Record) WorkflowSummary {
	s := WorkflowSummary{WorkflowID: first.TurnID, Status: StatusRunning, Task: last.Step, Last: last.Type,
		Started: first.Time, Updated: last.Time}
	switch {
	case last.Type == events.WorkflowFinished:
		var d events.WorkflowFinishedData
		_ = json.Unmarshal(last.Data, &d)
		s.Status, s.StopReason = StatusFinished, d.StopReason
	case last.Type == events.WorkflowGated && strings.Contains(string(last.Data), `"wait"`):
		s.Status = StatusPaused
	}
	return s
}
