package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/deadletter"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/jetloop/jetloop/internal/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The web view's pages, script and style are files in the binary: no build
// step, nothing fetched from anywhere else. The timeline is drawn by the
// same script and style as the page of replay --html.
//
//go:embed assets
var assets embed.FS

// uiHeader is the header every control request must carry. A page of
// another site can make the browser send a form or a simple fetch to this
// server, but not with a custom header: that needs a CORS preflight, which
// this server never answers with an allow.
const uiHeader = "X-Jetloop-Ui"

// uiCSP lets the pages run only the scripts and styles this server serves:
// no inline script or style attribute, no other origin, no framing. Text
// from a log that slipped into the markup would still not run.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Server is the web view: pages and server-sent events read from the
// streams with its connection, and controls sent with it. New makes one,
// AsyncErr must be its connection's error handler, Start binds it to the
// connection, and Serve or Handler serves it.
type Server struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	lister *turnlog.Lister
	store  *logstore.Store
	dead   jetstream.Stream
	// anyHost accepts requests for any host name: set when the server is
	// bound to other than loopback. On loopback, only loopback names are
	// served, so a site whose name an attacker points at 127.0.0.1 (DNS
	// rebinding) gets nothing.
	anyHost bool

	canControl, canSubmit atomic.Bool
	// denials receives the subjects of publishes the server refused, as the
	// connection's error handler reports them.
	denials chan string
	cop     *http.CrossOriginProtection
}

// New returns a server to bind with Start.
func New() *Server {
	return &Server{denials: make(chan string, 16), cop: http.NewCrossOriginProtection()}
}

// AsyncErr is the connection's error handler: a refused publish is how the
// server says these credentials may not do something.
func (u *Server) AsyncErr(err error) {
	msg := err.Error()
	i := strings.Index(strings.ToLower(msg), `publish to "`)
	if i < 0 {
		return
	}
	subj, _, _ := strings.Cut(msg[i+len(`publish to "`):], `"`)
	if strings.HasPrefix(subj, "jetloop.inbox.control.") {
		u.canControl.Store(false)
	}
	select {
	case u.denials <- subj:
	default:
	}
}

// Start binds the streams and finds out what the credentials allow.
func (u *Server) Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	u.nc, u.js = nc, js
	var err error
	if u.lister, err = turnlog.NewLister(ctx, js); err != nil {
		return err
	}
	u.store = u.lister.Store()
	if u.dead, err = js.Stream(ctx, events.StreamDead); err != nil {
		return fmt.Errorf("%s: %w", events.StreamDead, err)
	}
	u.canControl.Store(u.probe(ctx, events.ControlSubject("ui-probe")))
	u.canSubmit.Store(u.probe(ctx, events.SubjectSubmit))
	return nil
}

// probe reports whether the server lets these credentials publish on
// subject, without storing anything: the message expects a stream that does
// not exist, so JetStream refuses it with an error of its own (it was
// allowed), or the server refuses it as a permissions violation first.
func (u *Server) probe(ctx context.Context, subject string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(u.denials) > 0 {
		<-u.denials
	}
	msg := nats.NewMsg(subject)
	msg.Header.Set(jetstream.ExpectedStreamHeader, "JETLOOP_UI_PROBE")
	msg.Data = []byte("{}")
	res := make(chan error, 1)
	go func() {
		_, err := u.js.PublishMsg(ctx, msg)
		res <- err
	}()
	for {
		select {
		case err := <-res:
			var apiErr *jetstream.APIError
			return errors.As(err, &apiErr)
		case s := <-u.denials:
			if s == subject {
				cancel()
				<-res
				return false
			}
		}
	}
}

// Handler serves the pages and the API to a client on loopback; Serve
// serves them to anyone a listener bound elsewhere lets in.
func (u *Server) Handler() http.Handler {
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			data, err := fs.ReadFile(static, name)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(data)
		}
	}
	mux.HandleFunc("GET /{$}", page("turns.html"))
	mux.HandleFunc("GET /turn/{id}", page("turn.html"))
	mux.HandleFunc("GET /workflow/{id}", page("workflow.html"))
	mux.HandleFunc("GET /dead", page("dead.html"))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /static/timeline.js", asset("text/javascript", timeline.Script))
	mux.HandleFunc("GET /static/timeline.css", asset("text/css", timeline.Style))

	mux.HandleFunc("GET /api/info", u.info)
	mux.HandleFunc("GET /api/turns/live", u.turnsLive)
	mux.HandleFunc("GET /api/turns/{id}/live", u.turnLive)
	mux.HandleFunc("POST /api/turns/{id}/control", u.control)
	mux.HandleFunc("GET /api/workflows/{id}/live", u.workflowLive)
	mux.HandleFunc("GET /api/dead/live", u.deadLive)
	mux.HandleFunc("GET /api/dead/{seq}", u.deadShow)
	mux.HandleFunc("POST /api/dead/{seq}/retry", u.deadRetry)
	return u.guard(mux)
}

func asset(ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype+"; charset=utf-8")
		_, _ = w.Write([]byte(body))
	}
}

// guard refuses what a page of another site could make a browser do here,
// and sets the headers that keep the pages to their own scripts.
func (u *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if !u.anyHost && !loopbackHost(r.Host) {
			uiError(w, http.StatusMisdirectedRequest, "this server answers to localhost only, not to %q", r.Host)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := u.cop.Check(r); err != nil {
				uiError(w, http.StatusForbidden, "cross-origin request refused")
				return
			}
			if r.Header.Get(uiHeader) != "1" {
				uiError(w, http.StatusForbidden, "a control request needs the %s header", uiHeader)
				return
			}
			if t, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); t != "application/json" {
				uiError(w, http.StatusUnsupportedMediaType, "a control request is JSON")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func uiError(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, a...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Info is what the pages need to know of the server: which buttons to
// show.
type Info struct {
	CanControl bool   `json:"can_control"`
	CanRetry   bool   `json:"can_retry"`
	Server     string `json:"server"`
}

func (u *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Info{CanControl: u.canControl.Load(), CanRetry: u.canSubmit.Load(),
		Server: u.nc.ConnectedUrlRedacted()})
}

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// send writes one event. JSON has no line breaks, so the data is one line.
func (s *sse) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

// ping keeps proxies from closing an idle stream and finds a browser gone.
func (s *sse) ping() error {
	if _, err := fmt.Fprint(s.w, ": ping\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}

const ssePing = 20 * time.Second

// follow delivers the stored messages of stream that match filter, from
// start, to a channel until ctx ends; its error channel says why it stopped
// otherwise. It reads by get (bus.Tail): a reader creates no consumer.
func follow(ctx context.Context, js jetstream.JetStream, stream, filter string, start bus.Start) (<-chan bus.TailMsg, <-chan error, func(), error) {
	tail, err := bus.NewTail(ctx, js, stream, filter, start)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	msgs := make(chan bus.TailMsg, 64)
	errs := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer tail.Close()
		for {
			m, err := tail.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return msgs, errs, func() { cancel(); <-done }, nil
}

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
	log, _, err := u.store.Read(ctx, id)
	if err != nil {
		return Row{}, err
	}
	if len(log) == 0 {
		return Row{}, jetstream.ErrMsgNotFound // purged since the listing
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
	lm, lerr := u.lister.Stream().GetLastMsgForSubject(ctx, subject)
	fm, ferr := u.lister.Stream().GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
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
	msgs, errs, stop, err := follow(ctx, u.js, events.StreamEvents, "jetloop.events.>", bus.Start{New: true})
	if err != nil {
		uiError(w, http.StatusBadGateway, "follow %s: %v", events.StreamEvents, err)
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
			SinceMs: e.Time.Sub(log[0].Time).Milliseconds(), Detail: clip(string(e.Data), 300)})
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
	msgs, errs, stop, err := follow(ctx, u.js, events.StreamEvents, events.TurnEventsFilter(turn), bus.Start{})
	if err != nil {
		uiError(w, http.StatusBadGateway, "follow turn %s: %v", turn, err)
		return
	}
	defer stop()
	s := startSSE(w)
	var log []events.Envelope
	kids := &childLogs{done: map[string][]events.Envelope{}}
	if _, _, ok, err := u.store.Last(ctx, turn); err == nil && !ok {
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
			// One event, or a decision's events, per message.
			if err := events.Each(m.Data, func(e events.Envelope) error { log = append(log, e); return nil }); err != nil {
				_ = s.send("failure", map[string]string{"error": fmt.Sprintf("event %s: %v", m.Subject, err)})
				return
			}
			// Draw once the log read so far is caught up, not at every
			// event of a long replay.
			if m.Pending > 0 {
				continue
			}
			if s.send("turn", viewOf(turn, log, kids.read(ctx, u.store.Store, log))) != nil {
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

func (c *childLogs) read(ctx context.Context, store *bus.Store, log []events.Envelope) map[string][]events.Envelope {
	out := map[string][]events.Envelope{}
	next := timeline.ChildTurns(log)
	for level := 0; len(next) > 0 && level < fsm.MaxDepth; level++ {
		var deeper []string
		for _, id := range next {
			l, ok := c.done[id]
			if !ok {
				var err error
				if l, _, err = store.Read(ctx, id); err != nil || len(l) == 0 {
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
	last, _, ok, err := u.store.Last(ctx, id)
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
		msgs, errs, stop, err := follow(ctx, u.js, events.StreamEvents, events.TurnEventsFilter(id), bus.Start{})
		if err != nil {
			_ = s.send("failure", map[string]string{"error": err.Error()})
			return
		}
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
				parts := strings.Split(m.Subject, ".")
				session = parts[len(parts)-2]
			}
		}
		stop()
	}
	msgs, errs, stop, err := follow(ctx, u.js, events.StreamEvents, events.SessionEventsFilter(session), bus.Start{})
	if err != nil {
		_ = s.send("failure", map[string]string{"error": err.Error()})
		return
	}
	defer stop()
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
			if err := events.Each(m.Data, func(e events.Envelope) error {
				if e.TurnID == id || strings.HasPrefix(e.TurnID, id+"-") {
					logs[e.TurnID] = append(logs[e.TurnID], e)
					dirty = true
				}
				return nil
			}); err != nil {
				_ = s.send("failure", map[string]string{"error": fmt.Sprintf("event %s: %v", m.Subject, err)})
				return
			}
			// Draw once the session read so far is caught up.
			if m.Pending > 0 {
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
	cl, err := client.New(u.nc)
	if err == nil {
		switch {
		case ctl.Action == events.ActionAbort:
			err = cl.Abort(ctx, turn, ctl.Reason)
		case ctl.Action == events.ActionReply:
			err = cl.Reply(ctx, turn, ctl.CallID, ctl.Answer)
		case ctl.Action == events.ActionApprove && ctl.Approved != nil && *ctl.Approved:
			err = cl.Approve(ctx, turn, ctl.CallID, ctl.Note)
		case ctl.Action == events.ActionApprove && ctl.Approved != nil:
			err = cl.Deny(ctx, turn, ctl.CallID, ctl.Note)
		default:
			uiError(w, http.StatusBadRequest, "no control action %q (with approved for approve)", ctl.Action)
			return
		}
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

// deadLive streams the dead letters: those there are, then each new one.
func (u *Server) deadLive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	msgs, errs, stop, err := follow(ctx, u.js, events.StreamDead, "jetloop.dead.>", bus.Start{New: true})
	if err != nil {
		uiError(w, http.StatusBadGateway, "follow %s: %v", events.StreamDead, err)
		return
	}
	defer stop()
	letters, err := deadletter.List(ctx, u.dead)
	if err != nil {
		uiError(w, http.StatusBadGateway, "%v", err)
		return
	}
	if letters == nil {
		letters = []deadletter.Letter{} // null would be no list to the page
	}
	s := startSSE(w)
	if s.send("letters", letters) != nil {
		return
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
		case m := <-msgs:
			l := deadletter.Of(m.RawStreamMsg)
			if s.send("letters", []deadletter.Letter{l}) != nil {
				return
			}
		}
	}
}

// deadLetter is a dead letter as its page shows it.
type deadLetter struct {
	deadletter.Letter
	Headers map[string][]string `json:"headers"`
	Payload string              `json:"payload"`
}

func (u *Server) deadShow(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		uiError(w, http.StatusBadRequest, "not a sequence number: %q", r.PathValue("seq"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	m, err := u.dead.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		uiError(w, http.StatusNotFound, "no dead letter %d", seq)
		return
	}
	if err != nil {
		uiError(w, http.StatusBadGateway, "dead letter %d: %v", seq, err)
		return
	}
	writeJSON(w, http.StatusOK, deadLetter{Letter: deadletter.Of(m), Headers: m.Header, Payload: string(m.Data)})
}

// deadRetry is `jetloop dead retry SEQ`.
func (u *Server) deadRetry(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		uiError(w, http.StatusBadRequest, "not a sequence number: %q", r.PathValue("seq"))
		return
	}
	if !u.canSubmit.Load() {
		uiError(w, http.StatusForbidden, "these NATS credentials may not re-send messages (read only)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	res, err := deadletter.Resend(ctx, u.js, u.dead, seq, nil)
	if err != nil {
		uiError(w, http.StatusConflict, "%v", err)
		return
	}
	out := struct {
		deadletter.Resent
		Removed bool   `json:"removed"`
		Note    string `json:"note,omitempty"`
	}{Resent: res, Removed: res.DeleteErr == nil}
	if res.DeleteErr != nil {
		out.Note = fmt.Sprintf("re-sent, but still listed: removing it takes the admin user (%v)", res.DeleteErr)
	}
	writeJSON(w, http.StatusOK, out)
}

// Serve serves the pages and the API on ln until ctx ends, then stops
// within a few seconds. A listener bound to other than loopback serves any
// host name: whoever reaches it reads every turn.
func (u *Server) Serve(ctx context.Context, ln net.Listener) error {
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		u.anyHost = true
	}
	srv := &http.Server{Handler: u.Handler(), ReadHeaderTimeout: 10 * time.Second,
		// Requests end with ctx, live streams included.
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// CanControl reports whether the credentials may send control messages:
// whether the pages show their buttons.
func (u *Server) CanControl() bool { return u.canControl.Load() }

// clip makes one line of s, cut to n runes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
