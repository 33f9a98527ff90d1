package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Row is a row of the turns page: a turn's summary, a workflow's, or for a
// log of a kind this build does not know what its envelopes say.
type Row struct {
	turnlog.Turn
	// Kind is "turn", or the first word of the log's first event type
	// ("workflow").
	Kind string `json:"kind"`
	// LastType is the type of the log's last event.
	LastType string `json:"last_type,omitempty"`
	// Workflow is set on a workflow's row; its Turn then holds the
	// workflow's id, status, stop reason, and its steps and tool calls
	// summed over its tasks.
	Workflow *WorkflowRow `json:"workflow,omitempty"`
}

// WorkflowRow is what a workflow's row adds to a summary: where it stands,
// and its tasks' turns, which the page nests under it.
type WorkflowRow struct {
	Phase workflow.Phase `json:"phase"`
	// Task is the task under way, or the last one that ran, of Tasks.
	Task  int `json:"task"`
	Tasks int `json:"tasks"`
	// Metrics are summed over the tasks finished so far.
	Metrics events.WorkflowMetrics `json:"metrics"`
	// Turns are the tasks started so far, in order; a running one has no
	// stop reason yet.
	Turns []events.TaskOutcome `json:"turns"`
}

// workflowRow describes a workflow from its whole log: the envelopes of
// its first and last events do not say which task it is at, or what its
// tasks used.
func (u *Server) workflowRow(ctx context.Context, id string) (Row, error) {
	log, err := u.cl.Log(ctx, id)
	if errors.Is(err, client.ErrTurnNotFound) {
		return Row{}, jetstream.ErrMsgNotFound // purged since the listing
	}
	if err != nil {
		return Row{}, err
	}
	st, err := workflow.Fold(log)
	if err != nil {
		return Row{}, fmt.Errorf("workflow %s does not fold: %w", id, err)
	}
	r := Row{Kind: "workflow", LastType: string(log[len(log)-1].Type), Turn: turnlog.Turn{
		TurnID: st.ID, SessionID: st.SessionID, Status: turnlog.Running, Agent: st.Agent, Steps: st.Metrics.Steps,
		ToolCalls: st.Metrics.ToolCalls, Started: log[0].Time, Last: st.LastTime, Events: st.Seq},
		Workflow: &WorkflowRow{Phase: st.Phase, Task: st.Task, Tasks: len(st.Tasks), Metrics: st.Metrics,
			Turns: append([]events.TaskOutcome{}, st.Outcomes...)}}
	switch {
	case st.Done():
		r.Status, r.StopReason, r.Error = turnlog.Finished, st.Finished.StopReason, st.Finished.Error
	case st.Phase == workflow.PhasePaused:
		r.Status = turnlog.Paused
	}
	if st.Running {
		r.Workflow.Turns = append(r.Workflow.Turns, events.TaskOutcome{Task: st.Task, TurnID: workflow.TurnID(st.ID, st.Task)})
	}
	return r, nil
}

// row describes the log on subject.
func (u *Server) row(ctx context.Context, subject string) (Row, error) {
	s, err := u.lister.Summary(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) || ctx.Err() != nil {
		return Row{}, err
	}
	if err == nil && s.TurnID != "" {
		return Row{Turn: s, Kind: "turn"}, nil
	}
	// Not a turn, or one that does not fold: show the envelopes, which
	// every log has. This is where workflows get their own summary.
	var first, last events.Envelope
	stream := u.lister.StreamOf(bus.TurnOf(subject))
	lm, lerr := stream.GetLastMsgForSubject(ctx, subject)
	fm, ferr := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if lerr != nil || ferr != nil {
		return Row{}, errors.Join(lerr, ferr)
	}
	last, _ = events.LastOf(lm.Data)
	first, _ = events.FirstOf(fm.Data)
	if first.Type.Workflow() {
		r, werr := u.workflowRow(ctx, first.TurnID)
		if werr == nil || errors.Is(werr, jetstream.ErrMsgNotFound) {
			return r, werr
		}
		err = werr // shown on the row of its envelopes
	}
	kind, _, _ := strings.Cut(string(first.Type), ".")
	r := Row{Kind: kind, LastType: string(last.Type), Turn: turnlog.Turn{TurnID: last.TurnID, SessionID: last.SessionID,
		Status: turnlog.Running, Started: first.Time, Last: last.Time, Events: last.Seq}}
	if err != nil && (kind == "turn" || kind == "workflow") {
		r.Error = err.Error()
	}
	if strings.HasSuffix(r.LastType, ".finished") {
		r.Status = turnlog.Finished
	}
	var d struct {
		Agent string `json:"agent"`
	}
	if json.Unmarshal(first.Data, &d) == nil {
		r.Agent = d.Agent
	}
	if r.TurnID == "" {
		// The subject names it even when the envelope does not.
		parts := strings.Split(subject, ".")
		r.SessionID, r.TurnID = parts[len(parts)-2], parts[len(parts)-1]
	}
	return r, nil
}

// turnsLive streams the turns page: every log's row once, then the row of
// each log again whenever it gets events.
func (u *Server) turnsLive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// Follow first, list second: an event between the two is seen twice
	// rather than missed, and a row is always read whole from the stream.
	layout := u.lister.Store().Layout()
	msgs, errs, stop, err := bus.Follow(ctx, u.js, layout.Names(), layout.AllFilter(), bus.Start{New: true})
	if err != nil {
		uiError(w, http.StatusBadGateway, "follow the logs: %v", err)
		return
	}
	defer stop()
	var mu sync.Mutex
	rows := []Row{} // null would be no list to the page
	err = u.lister.Each(ctx, "", func(ctx context.Context, subj string) error {
		row, err := u.row(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		mu.Lock()
		rows = append(rows, row)
		mu.Unlock()
		return nil
	})
	if err != nil {
		uiError(w, http.StatusBadGateway, "%v", err)
		return
	}
	s := startSSE(w)
	if s.send("rows", rows) != nil {
		return
	}
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	dirty := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			_ = s.send("failure", map[string]string{"error": err.Error()})
			return
		case <-ping.C:
			if s.ping() != nil {
				return
			}
			continue
		case m := <-msgs:
			dirty[m.Subject] = true
		}
		// A burst of events of one turn becomes one row: read what is
		// already waiting before describing the turns it touched.
	drain:
		for {
			select {
			case m := <-msgs:
				dirty[m.Subject] = true
			default:
				break drain
			}
		}
		var batch []Row
		for subj := range dirty {
			row, err := u.row(ctx, subj)
			if err == nil {
				batch = append(batch, row)
			}
			delete(dirty, subj)
		}
		if len(batch) > 0 && s.send("rows", batch) != nil {
			return
		}
	}
}

// TurnView is a turn as its page draws it.
type TurnView struct {
	Turn string `json:"turn_id"`
	// Timeline is nil when the log is not a turn's (a workflow's): Rows
	// then lists its events as they are.
	Timeline *timeline.Timeline `json:"timeline"`
	Rows     []timeline.Row     `json:"rows,omitempty"`
	Summary  *turnlog.Turn      `json:"summary,omitempty"`
	Error    string             `json:"error,omitempty"`
}

// viewOf is the view of a turn's log; children holds the logs of the
// turn's subagents read so far, drawn under their calls.
func viewOf(turn string, log []events.Envelope, children map[string][]events.Envelope) TurnView {
	v := TurnView{Turn: turn}
	if len(log) == 0 {
		return v
	}
	if log[0].Type == events.TurnStarted || log[0].Type == events.TurnFinished {
		tl, err := timeline.BuildWithChildren(log, children)
		if err == nil {
			v.Timeline = tl
			if st, err := fsm.Fold(log); err == nil {
				sum := turnlog.Of(st)
				v.Summary = &sum
			}
			return v
		}
		v.Error = err.Error()
	}
	for _, e := range log {
		v.Rows = append(v.Rows, timeline.Row{Seq: e.Seq, Step: e.Step, Type: e.Type, Time: e.Time,
			SinceMs: e.Time.Sub(log[0].Time).Milliseconds(), Detail: timeline.Clip(string(e.Data), 300)})
	}
	return v
}

// turnLive streams a turn's page: the view after every batch of events, and
// the model's text as it is streamed.
func (u *Server) turnLive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	turn := r.PathValue("id")
	if !events.ValidID(turn) {
		uiError(w, http.StatusBadRequest, "invalid turn id %q", turn)
		return
	}
	deltas := make(chan *nats.Msg, 1024)
	sub, err := u.nc.ChanSubscribe(events.DeltaSubject(turn), deltas)
	if err != nil {
		uiError(w, http.StatusBadGateway, "subscribe deltas: %v", err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	feed, err := u.cl.OpenFeed(ctx, client.FeedFilter{TurnID: turn})
	if err != nil {
		uiError(w, http.StatusBadGateway, "follow turn %s: %v", turn, err)
		return
	}
	defer feed.Close()
	msgs, errs := feed.Chan(ctx)
	s := startSSE(w)
	var log []events.Envelope
	kids := &childLogs{done: map[string][]events.Envelope{}}
	if _, err := u.cl.Last(ctx, turn); errors.Is(err, client.ErrTurnNotFound) {
		// Nothing to replay: say so now rather than after the first event.
		if s.send("turn", viewOf(turn, nil, nil)) != nil {
			return
		}
	}
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			_ = s.send("failure", map[string]string{"error": err.Error()})
			return
		case <-ping.C:
			if s.ping() != nil {
				return
			}
		case m := <-deltas:
			if d, ok := bus.DeltaOf(m, turn); ok && s.send("delta", d) != nil { // only this turn's deltas
				return
			}
		case m := <-msgs:
			log = append(log, m.Record)
			// Draw once the log read so far is caught up, not at every
			// event of a long replay.
			if !m.CaughtUp {
				continue
			}
			if s.send("turn", viewOf(turn, log, kids.read(ctx, u.cl, log))) != nil {
				return
			}
		}
	}
}

// childLogs reads the logs of a turn's subagents (and theirs) for its page,
// each time the page is drawn; a finished child's log does not change, and
// is read once.
type childLogs struct {
	done map[string][]events.Envelope
}

func (c *childLogs) read(ctx context.Context, cl *client.Client, log []events.Envelope) map[string][]events.Envelope {
	out := map[string][]events.Envelope{}
	next := timeline.ChildTurns(log)
	for level := 0; len(next) > 0 && level < fsm.MaxDepth; level++ {
		var deeper []string
		for _, id := range next {
			l, ok := c.done[id]
			if !ok {
				var err error
				if l, err = cl.Log(ctx, id); err != nil {
					continue // drawn as a band without a log, linked to its page
				}
				if l[len(l)-1].Type == events.TurnFinished {
					c.done[id] = l
				}
			}
			out[id] = l
			deeper = append(deeper, timeline.ChildTurns(l)...)
		}
		next = deeper
	}
	return out
}

// WorkflowView is a workflow as its page draws it.
type WorkflowView struct {
	WorkflowID string `json:"workflow_id"`
	// Timeline is nil until the workflow has a log, and when the id is a
	// turn's (IsTurn: the page sends the reader to the turn's page).
	Timeline *timeline.Workflow `json:"timeline"`
	IsTurn   bool               `json:"is_turn,omitempty"`
	Error    string             `json:"error,omitempty"`
}

// workflowViewOf draws the workflow id from the logs of its session read so
// far, by turn id.
func workflowViewOf(id string, logs map[string][]events.Envelope) WorkflowView {
	v := WorkflowView{WorkflowID: id}
	log := logs[id]
	switch {
	case len(log) == 0:
	case !log[0].Type.Workflow():
		v.IsTurn = true
	default:
		wt, err := timeline.BuildWorkflow(log, logs)
		if err != nil {
			v.Error = err.Error()
		}
		v.Timeline = wt
	}
	return v
}

// workflowLive streams a workflow's page: the view after every batch of
// events of the workflow or of its tasks' turns. They are all in the
// workflow's session, which the stream follows whole; until the workflow
// has a log its session is unknown, so its own subject is followed until
// its first event.
func (u *Server) workflowLive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	if !events.ValidID(id) {
		uiError(w, http.StatusBadRequest, "invalid workflow id %q", id)
		return
	}
	last, err := u.cl.Last(ctx, id)
	ok := err == nil
	if errors.Is(err, client.ErrTurnNotFound) {
		err = nil
	}
	if err != nil {
		uiError(w, http.StatusBadGateway, "workflow %s: %v", id, err)
		return
	}
	s := startSSE(w)
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	session := last.SessionID
	if !ok {
		if s.send("workflow", workflowViewOf(id, nil)) != nil {
			return
		}
		fctx, stop := context.WithCancel(ctx)
		feed, err := u.cl.OpenFeed(fctx, client.FeedFilter{TurnID: id})
		if err != nil {
			stop()
			_ = s.send("failure", map[string]string{"error": err.Error()})
			return
		}
		defer feed.Close()
		msgs, errs := feed.Chan(fctx)
		for session == "" {
			select {
			case <-ctx.Done():
				stop()
				return
			case err := <-errs:
				stop()
				_ = s.send("failure", map[string]string{"error": err.Error()})
				return
			case <-ping.C:
				if s.ping() != nil {
					stop()
					return
				}
			case m := <-msgs:
				session = m.SessionID
			}
		}
		stop()
	}
	feed, err := u.cl.OpenFeed(ctx, client.FeedFilter{SessionID: session})
	if err != nil {
		_ = s.send("failure", map[string]string{"error": err.Error()})
		return
	}
	defer feed.Close()
	msgs, errs := feed.Chan(ctx)
	// Only the workflow's log and its tasks' turns' are kept; another turn
	// of the session changes nothing drawn.
	logs := map[string][]events.Envelope{}
	dirty := false
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			_ = s.send("failure", map[string]string{"error": err.Error()})
			return
		case <-ping.C:
			if s.ping() != nil {
				return
			}
		case m := <-msgs:
			if e := m.Record; e.TurnID == id || strings.HasPrefix(e.TurnID, id+"-") {
				logs[e.TurnID] = append(logs[e.TurnID], e)
				dirty = true
			}
			// Draw once the session read so far is caught up.
			if !m.CaughtUp {
				continue
			}
			if dirty && len(logs[id]) > 0 {
				if s.send("workflow", workflowViewOf(id, logs)) != nil {
					return
				}
				dirty = false
			}
		}
	}
}

// control sends a control message as the CLI's abort, reply, approve and
// deny do, after the same check that it applies to the turn as it is.
func (u *Server) control(w http.ResponseWriter, r *http.Request) {
	turn := r.PathValue("id")
	if !events.ValidID(turn) {
		uiError(w, http.StatusBadRequest, "invalid turn id %q", turn)
		return
	}
	if !u.canControl.Load() {
		uiError(w, http.StatusForbidden, "these NATS credentials may not send control messages (read only)")
		return
	}
	var ctl events.Control
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ctl); err != nil {
		uiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	// The client checks the message against its schema and against the
	// turn as it is now, as the CLI's commands do, then sends it.
	var err error
	switch {
	case ctl.Action == events.ActionAbort:
		err = u.cl.Abort(ctx, turn, ctl.Reason)
	case ctl.Action == events.ActionReply:
		err = u.cl.Reply(ctx, turn, ctl.CallID, ctl.Answer)
	case ctl.Action == events.ActionApprove && ctl.Approved != nil && *ctl.Approved:
		err = u.cl.Approve(ctx, turn, ctl.CallID, ctl.Note)
	case ctl.Action == events.ActionApprove && ctl.Approved != nil:
		err = u.cl.Deny(ctx, turn, ctl.CallID, ctl.Note)
	default:
		uiError(w, http.StatusBadRequest, "no control action %q (with approved for approve)", ctl.Action)
		return
	}
	switch {
	case errors.Is(err, client.ErrTurnNotFound), errors.Is(err, client.ErrTurnFinished), errors.Is(err, client.ErrNotWaiting):
		uiError(w, http.StatusConflict, "%v", err)
		return
	case err != nil && !u.canControl.Load():
		uiError(w, http.StatusForbidden, "the server refused the control message: these credentials are read only")
		return
	case err != nil:
		uiError(w, http.StatusBadGateway, "%v", err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"sent": string(ctl.Action)})
}
