package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/deadletter"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// askJSON is a scripted model that asks a question, then answers.
const askJSON = `{"responses":[{"text":"asking","tool_calls":[{"name":"ask_user","arguments":{"question":"which colour?"}}]},` +
	`{"text":"blue it is"}]}`

func submitScript(t *testing.T, js jetstream.JetStream, turn, agent, script string) {
	t.Helper()
	testkit.Submit(t, js, events.Submit{TurnID: turn, Agent: agent, Model: "script", Script: json.RawMessage(script),
		Input: []events.Message{{Role: events.RoleUser, Content: "paint it"}}})
}

// startUI serves jetloop ui's handler from a connection that dial opens
// with the server's error handler, as the command does, and returns it.
func startUI(t *testing.T, dial func(opts ...nats.Option) (*nats.Conn, error)) (*Server, *httptest.Server) {
	t.Helper()
	u := New()
	nc, err := dial(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { u.AsyncErr(err) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStreamFor(t.Context(), nc, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := u.Start(ctx, nc, js); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(u.Handler())
	t.Cleanup(ts.Close)
	return u, ts
}

// dialURL connects to url with the options given here, then the caller's.
func dialURL(url string, with ...nats.Option) func(opts ...nats.Option) (*nats.Conn, error) {
	return func(opts ...nats.Option) (*nats.Conn, error) { return nats.Connect(url, slices.Concat(with, opts)...) }
}

// dialAs connects as one of nats.conf's roles (testkit.Role).
func dialAs(t *testing.T, url, role string) func(opts ...nats.Option) (*nats.Conn, error) {
	return dialURL(url, testkit.Role(t, role)...)
}

type sseEvent struct {
	name string
	data string
}

// openSSE reads a stream of server-sent events until the test ends.
func openSSE(t *testing.T, url string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s %s: %s", url, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	out := make(chan sseEvent, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// nextSSE reads events until one named name satisfies cond, and returns it.
func nextSSE[T any](t *testing.T, ch <-chan sseEvent, name, what string, cond func(T) bool) T {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream ended before %s", what)
			}
			if ev.name == "failure" {
				t.Fatalf("the event stream failed before %s: %s", what, ev.data)
			}
			if ev.name != name {
				continue
			}
			var v T
			if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
				t.Fatalf("%s event: %v: %s", name, err, ev.data)
			}
			if cond(v) {
				return v
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func rowOf(rows []Row, turn string) (Row, bool) {
	for _, r := range rows {
		if r.TurnID == turn {
			return r, true
		}
	}
	return Row{}, false
}

// postControl sends a control request as the page does.
func postControl(t *testing.T, base, turn string, ctl events.Control) (int, string) {
	t.Helper()
	body, _ := json.Marshal(ctl)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/turns/"+turn+"/control", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(uiHeader, "1")
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// The live streams of the UI: a turn started after the turns stream opened
// appears on it, paused on its question; the turn's own stream draws it,
// a reply posted as the page posts it resumes it, the model's text arrives
// as it streams, and both streams see it finish.
func TestUISSEFollowsTurns(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	list := openSSE(t, ts.URL+"/api/turns/live")
	nextSSE(t, list, "rows", "the first listing", func([]Row) bool { return true })

	submitScript(t, e.js, "ui-ask", "Asker", askJSON)
	paused := nextSSE(t, list, "rows", "ui-ask paused", func(rows []Row) bool {
		r, ok := rowOf(rows, "ui-ask")
		return ok && r.Status == turnlog.Paused
	})
	if r, _ := rowOf(paused, "ui-ask"); r.Kind != "turn" || r.Agent != "Asker" || r.Waiting == nil ||
		r.Waiting.Kind != events.PauseInput || r.Waiting.Question != "which colour?" {
		t.Fatalf("ui-ask paused: %+v", r)
	}

	turn := openSSE(t, ts.URL+"/api/turns/ui-ask/live")
	v := nextSSE(t, turn, "turn", "ui-ask's view", func(v TurnView) bool { return v.Summary != nil && v.Summary.Waiting != nil })
	if v.Timeline == nil || len(v.Timeline.Steps) != 1 || len(v.Timeline.Pauses) != 1 || !v.Timeline.Pauses[0].Open {
		t.Fatalf("ui-ask's timeline when paused: %+v", v.Timeline)
	}
	code, body := postControl(t, ts.URL, "ui-ask", events.Control{Action: events.ActionReply, CallID: v.Summary.Waiting.CallID,
		Answer: "blue"})
	if code != http.StatusAccepted {
		t.Fatalf("reply: %d %s", code, body)
	}
	// A second reply to the same question no longer applies.
	e.waitType("ui-ask", events.TurnFinished)
	if code, body := postControl(t, ts.URL, "ui-ask", events.Control{Action: events.ActionReply, CallID: v.Summary.Waiting.CallID,
		Answer: "red"}); code != http.StatusConflict || !strings.Contains(body, "has finished") {
		t.Fatalf("a reply to a finished turn: %d %s", code, body)
	}

	fin := nextSSE(t, turn, "turn", "ui-ask finished", func(v TurnView) bool {
		return v.Timeline != nil && v.Timeline.Finished != nil
	})
	if f := fin.Timeline.Finished; f.StopReason != events.StopCompleted || f.Output != "blue it is" ||
		fin.Timeline.Pauses[0].Answer != "blue" || len(fin.Timeline.Rows) != len(e.log("ui-ask")) {
		t.Fatalf("ui-ask finished: %+v, pauses %+v", f, fin.Timeline.Pauses)
	}
	nextSSE(t, list, "rows", "ui-ask finished on the list", func(rows []Row) bool {
		r, ok := rowOf(rows, "ui-ask")
		return ok && r.Status == turnlog.Finished && r.StopReason == events.StopCompleted
	})
}

// The model's text reaches the turn's page as it streams, before the
// answer's event.
func TestUISSEStreamsDeltas(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	// The turn's stream is opened before the turn exists: the page of a
	// turn just submitted.
	turn := openSSE(t, ts.URL+"/api/turns/ui-delta/live")
	nextSSE(t, turn, "turn", "the empty view", func(v TurnView) bool { return v.Timeline == nil && len(v.Rows) == 0 })
	submitScript(t, e.js, "ui-delta", "Wide", `{"responses":[{"text":"one two three four","delay_ms":100}]}`)
	var text strings.Builder
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for done := false; !done; {
		select {
		case ev, ok := <-turn:
			if !ok {
				t.Fatal("the stream ended")
			}
			switch ev.name {
			case "delta":
				var d events.Delta
				if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
					t.Fatal(err)
				}
				if d.TurnID != "ui-delta" || d.Step != 1 {
					t.Fatalf("delta %+v", d)
				}
				text.WriteString(d.Delta)
			case "turn":
				var v TurnView
				if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
					t.Fatal(err)
				}
				done = v.Timeline != nil && v.Timeline.Finished != nil
			}
		case <-deadline.C:
			t.Fatal("timed out waiting for ui-delta to finish")
		}
	}
	if text.String() != "one two three four" {
		t.Fatalf("streamed %q before the turn finished", text.String())
	}
}

// Controls are refused unless the request comes from the UI's own page:
// what a page of another site can make a browser send, and a request for
// another host name (DNS rebinding), gets nothing done.
func TestUIRefusesCrossSiteRequests(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	submitScript(t, e.js, "ui-csrf", "Asker", askJSON)
	e.waitType("ui-csrf", events.TurnPaused)
	store, err := logstore.New(t.Context(), e.js)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := store.Load(t.Context(), "ui-csrf")
	if err != nil {
		t.Fatal(err)
	}
	call := st.Pending().CallID
	body := `{"action":"reply","call_id":"` + call + `","answer":"forged"}`
	post := func(mod func(*http.Request)) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/turns/ui-csrf/control", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(uiHeader, "1")
		mod(req)
		return req
	}
	for _, c := range []struct {
		what string
		req  *http.Request
		want int
	}{
		{"a form post (no custom header)", post(func(r *http.Request) {
			r.Header.Del(uiHeader)
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}), http.StatusForbidden},
		{"a simple fetch from another site", post(func(r *http.Request) { r.Header.Del(uiHeader) }), http.StatusForbidden},
		{"a cross-site request", post(func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }), http.StatusForbidden},
		{"another origin", post(func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }), http.StatusForbidden},
		{"text, not JSON", post(func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }), http.StatusUnsupportedMediaType},
		{"another host name", post(func(r *http.Request) { r.Host = "evil.example:8080" }), http.StatusMisdirectedRequest},
		{"a page for another host name", func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, ts.URL+"/api/turns/live", nil)
			r.Host = "rebound.example"
			return r
		}(), http.StatusMisdirectedRequest},
		{"an unknown field", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/turns/ui-csrf/control", strings.NewReader(`{"action":"abort","x":1}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(uiHeader, "1")
			return r
		}(), http.StatusBadRequest},
	} {
		if code, resp := do(t, c.req); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, resp, c.want)
		}
	}
	if last, _ := e.last("ui-csrf"); last.Type != events.TurnPaused {
		t.Fatalf("a refused request moved the turn: %s", last.Type)
	}
	// The page itself: same origin, as a browser sends it.
	req := post(func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Header.Set("Origin", ts.URL)
	})
	if code, resp := do(t, req); code != http.StatusAccepted {
		t.Fatalf("the page's own reply: %d %s", code, resp)
	}
	if fin := e.finished("ui-csrf"); fin.StopReason != events.StopCompleted {
		t.Fatalf("ui-csrf: %+v", fin)
	}
	// Every page names its scripts by file: none inline.
	resp, err := http.Get(ts.URL + "/turn/ui-csrf")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "style=") {
		t.Errorf("the turn page has an inline script or style:\n%s", page)
	}
}

// With nats.conf's viewer role the UI shows turns and dead letters but has
// no controls, and its control requests are refused; with the client role
// the same request resumes the turn.
func TestUIViewerIsReadOnly(t *testing.T) {
	e, srv := newRolesEnv(t)
	submitScript(t, e.js, "ui-ro", "Asker", askJSON)
	e.waitType("ui-ro", events.TurnPaused)

	viewer, vts := startUI(t, dialAs(t, srv.ClientURL(), "viewer"))
	if viewer.canControl.Load() || viewer.canSubmit.Load() {
		t.Fatalf("viewer: can control %v, can submit %v", viewer.canControl.Load(), viewer.canSubmit.Load())
	}
	resp, err := http.Get(vts.URL + "/api/info")
	if err != nil {
		t.Fatal(err)
	}
	var info Info
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if info.CanControl || info.CanRetry {
		t.Fatalf("viewer's info: %+v", info)
	}
	rows := nextSSE(t, openSSE(t, vts.URL+"/api/turns/live"), "rows", "the viewer's listing", func([]Row) bool { return true })
	if r, ok := rowOf(rows, "ui-ro"); !ok || r.Status != turnlog.Paused {
		t.Fatalf("the viewer's listing: %+v", rows)
	}
	v := nextSSE(t, openSSE(t, vts.URL+"/api/turns/ui-ro/live"), "turn", "the viewer's view", func(v TurnView) bool { return v.Summary != nil })
	if v.Summary.Waiting == nil {
		t.Fatalf("the viewer's view: %+v", v.Summary)
	}
	reply := events.Control{Action: events.ActionReply, CallID: v.Summary.Waiting.CallID, Answer: "blue"}
	if code, body := postControl(t, vts.URL, "ui-ro", reply); code != http.StatusForbidden {
		t.Fatalf("the viewer's reply: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPost, vts.URL+"/api/dead/1/retry", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(uiHeader, "1")
	if code, body := do(t, req); code != http.StatusForbidden {
		t.Fatalf("the viewer's retry: %d %s", code, body)
	}
	nextSSE(t, openSSE(t, vts.URL+"/api/dead/live"), "letters", "the viewer's dead letters", func([]deadletter.Letter) bool { return true })

	client, cts := startUI(t, dialAs(t, srv.ClientURL(), "client"))
	if !client.canControl.Load() || !client.canSubmit.Load() {
		t.Fatalf("client: can control %v, can submit %v", client.canControl.Load(), client.canSubmit.Load())
	}
	if code, body := postControl(t, cts.URL, "ui-ro", reply); code != http.StatusAccepted {
		t.Fatalf("the client's reply: %d %s", code, body)
	}
	if fin := e.finished("ui-ro"); fin.StopReason != events.StopCompleted {
		t.Fatalf("ui-ro: %+v", fin)
	}
}

// The dead letters page lists a dead submission, shows it, and a retry
// re-sends it (here it dies again, as its agent is still unknown: a new
// letter appears and the old one is gone).
func TestUIDeadLetters(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	dead := openSSE(t, ts.URL+"/api/dead/live")
	nextSSE(t, dead, "letters", "the first listing", func(l []deadletter.Letter) bool { return len(l) == 0 })
	submitScript(t, e.js, "ui-bad", "Nobody", askJSON)
	first := nextSSE(t, dead, "letters", "the dead submission", func(l []deadletter.Letter) bool {
		return len(l) == 1 && l[0].Kind == "submit" && l[0].Turn == "ui-bad"
	})[0]
	seq := strconv.FormatUint(first.Seq, 10)
	code, body := do(t, func() *http.Request { r, _ := http.NewRequest(http.MethodGet, ts.URL+"/api/dead/"+seq, nil); return r }())
	if code != http.StatusOK || !strings.Contains(body, `unknown agent`) || !strings.Contains(body, `\"agent\":\"Nobody\"`) {
		t.Fatalf("dead letter %s: %d %s", seq, code, body)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/dead/"+seq+"/retry", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(uiHeader, "1")
	code, body = do(t, req)
	if code != http.StatusOK || !strings.Contains(body, `"removed":true`) || !strings.Contains(body, `"subject":"jetloop.inbox.submit"`) {
		t.Fatalf("retry: %d %s", code, body)
	}
	again := nextSSE(t, dead, "letters", "the retried submission dead again", func(l []deadletter.Letter) bool {
		return len(l) == 1 && l[0].Turn == "ui-bad"
	})[0]
	if again.Seq == first.Seq {
		t.Fatalf("the same letter again: %+v", again)
	}
	if code, _ := do(t, func() *http.Request { r, _ := http.NewRequest(http.MethodGet, ts.URL+"/api/dead/"+seq, nil); return r }()); code != http.StatusNotFound {
		t.Fatalf("the retried letter is still there: %d", code)
	}
}

// The retry button re-sends what dead retry would: a tool worker's letter
// naming a paused turn's control is refused, the turn stays paused.
func TestUIDeadRetryRefusesAWorkersLetter(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	submitScript(t, e.js, "ui-held", "Asker", askJSON)
	e.waitType("ui-held", events.TurnPaused)
	m := &nats.Msg{Subject: events.DeadSubject("job"), Data: []byte(`{"action":"abort"}`), Header: nats.Header{}}
	m.Header.Set("Jetloop-Subject", events.ControlSubject("ui-held"))
	ack, err := e.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/dead/"+strconv.FormatUint(ack.Sequence, 10)+"/retry", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(uiHeader, "1")
	if code, body := do(t, req); code != http.StatusConflict || !strings.Contains(body, "tool worker's") {
		t.Fatalf("retry of a worker's letter: %d %s", code, body)
	}
	if last, _ := e.last("ui-held"); last.Type != events.TurnPaused {
		t.Fatalf("the turn went on to %s", last.Type)
	}
}

// The page's approve and abort do what jetloop approve and abort do.
func TestUIApproveAndAbort(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	submitScript(t, e.js, "ui-gate", "Gated", `{"responses":[{"text":"echo needs a yes","tool_calls":[{"name":"echo","arguments":{"text":"hi"}}]},{"text":"done"}]}`)
	submitScript(t, e.js, "ui-stop", "Asker", askJSON)
	e.waitType("ui-gate", events.TurnPaused)
	e.waitType("ui-stop", events.TurnPaused)
	v := nextSSE(t, openSSE(t, ts.URL+"/api/turns/ui-gate/live"), "turn", "ui-gate waiting", func(v TurnView) bool {
		return v.Summary != nil && v.Summary.Waiting != nil
	})
	if w := v.Summary.Waiting; w.Kind != events.PauseApproval || w.Tool != "echo" {
		t.Fatalf("ui-gate waits for %+v", w)
	}
	yes := true
	if code, body := postControl(t, ts.URL, "ui-gate", events.Control{Action: events.ActionApprove, CallID: "not-this-one",
		Approved: &yes}); code != http.StatusConflict {
		t.Fatalf("an approval of another call: %d %s", code, body)
	}
	if code, body := postControl(t, ts.URL, "ui-gate", events.Control{Action: events.ActionApprove, CallID: v.Summary.Waiting.CallID,
		Approved: &yes, Note: "fine"}); code != http.StatusAccepted {
		t.Fatalf("approve: %d %s", code, body)
	}
	if code, body := postControl(t, ts.URL, "ui-stop", events.Control{Action: events.ActionAbort, Reason: "from the page"}); code != http.StatusAccepted {
		t.Fatalf("abort: %d %s", code, body)
	}
	if fin := e.finished("ui-gate"); fin.StopReason != events.StopCompleted {
		t.Fatalf("ui-gate: %+v", fin)
	}
	if fin := e.finished("ui-stop"); fin.StopReason != events.StopAborted {
		t.Fatalf("ui-stop: %+v", fin)
	}
}

// A workflow is one row of the turns stream: its id, where it stands (the
// task under way of how many, paused at the gate, then its stop reason),
// its steps and tool calls summed over its tasks, and its tasks' turns,
// which the page nests under it; those turns have rows of their own. Its
// page's stream draws it with a band per task, each naming its turn, live;
// a turn's id there says it is a turn.
func TestUIWorkflowRows(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	list := openSSE(t, ts.URL+"/api/turns/live")
	nextSSE(t, list, "rows", "the first listing", func([]Row) bool { return true })
	// The workflow's page is open before the workflow exists.
	page := openSSE(t, ts.URL+"/api/workflows/wf-html/live")
	nextSSE(t, page, "workflow", "the empty view", func(v WorkflowView) bool { return v.Timeline == nil && !v.IsTurn })

	e.runWorkflow(gatedWorkflow)
	paused := nextSSE(t, list, "rows", "the workflow paused before task 2", func(rows []Row) bool {
		r, ok := rowOf(rows, "wf-html")
		return ok && r.Status == turnlog.Paused
	})
	r, _ := rowOf(paused, "wf-html")
	if w := r.Workflow; r.Kind != "workflow" || r.Agent != "Refactorer" || w == nil || w.Phase != "paused" || w.Task != 1 ||
		w.Tasks != 3 || w.Metrics.Tasks != 1 || w.Metrics.ToolCalls != 1 || r.ToolCalls != 1 || r.Steps != w.Metrics.Steps ||
		len(w.Turns) != 1 || w.Turns[0] != (events.TaskOutcome{Task: 1, TurnID: "wf-html-1", StopReason: events.StopCompleted}) {
		t.Fatalf("the paused workflow's row: %+v %+v", r, r.Workflow)
	}
	v := nextSSE(t, page, "workflow", "the view paused", func(v WorkflowView) bool {
		return v.Timeline != nil && v.Timeline.Phase == "paused"
	})
	if tl := v.Timeline; len(tl.Tasks) != 1 || tl.Tasks[0].Turn == nil || len(tl.Waits) != 1 || !tl.Waits[0].Open || !tl.Running {
		t.Fatalf("the paused view: %+v", tl)
	}

	for task := 2; task <= 3; task++ {
		e.waitFor(fmt.Sprintf("the gate before task %d", task), func() bool {
			last, ok := e.last("wf-html")
			return ok && last.Type == events.WorkflowGated && last.Step == task
		})
		e.approveWorkflow("wf-html", "")
	}
	done := nextSSE(t, list, "rows", "the workflow finished", func(rows []Row) bool {
		r, ok := rowOf(rows, "wf-html")
		return ok && r.Status == turnlog.Finished
	})
	r, _ = rowOf(done, "wf-html")
	var fin events.WorkflowFinishedData
	log := e.log("wf-html")
	_ = json.Unmarshal(log[len(log)-1].Data, &fin)
	if w := r.Workflow; r.StopReason != events.StopCompleted || w.Task != 3 || w.Metrics != fin.Metrics || r.Steps != fin.Metrics.Steps ||
		r.ToolCalls != fin.Metrics.ToolCalls || len(w.Turns) != 3 || w.Turns[2].TurnID != "wf-html-3" || r.Events != len(log) {
		t.Fatalf("the finished workflow's row: %+v %+v", r, r.Workflow)
	}
	v = nextSSE(t, page, "workflow", "the view finished", func(v WorkflowView) bool {
		return v.Timeline != nil && v.Timeline.Finished != nil
	})
	for i, k := range v.Timeline.Tasks {
		if k.TurnID != fmt.Sprintf("wf-html-%d", i+1) || k.Turn == nil || k.Turn.Finished == nil || k.Open {
			t.Errorf("task %d in the view: %+v", i+1, k)
		}
	}

	// A new listing has the workflow and each of its tasks' turns.
	rows := nextSSE(t, openSSE(t, ts.URL+"/api/turns/live"), "rows", "a new listing", func([]Row) bool { return true })
	for i := 1; i <= 3; i++ {
		turn := fmt.Sprintf("wf-html-%d", i)
		if r, ok := rowOf(rows, turn); !ok || r.Kind != "turn" || r.Status != turnlog.Finished || r.Workflow != nil {
			t.Errorf("%s's row: %+v", turn, r)
		}
	}
	if r, ok := rowOf(rows, "wf-html"); !ok || r.Workflow == nil || len(r.Workflow.Turns) != 3 {
		t.Errorf("the workflow's row in a new listing: %+v", r)
	}
	// A turn's id on the workflow's stream; the workflow's page.
	nextSSE(t, openSSE(t, ts.URL+"/api/workflows/wf-html-2/live"), "workflow", "a turn's view", func(v WorkflowView) bool { return v.IsTurn })
	code, body := do(t, func() *http.Request {
		r, _ := http.NewRequest(http.MethodGet, ts.URL+"/workflow/wf-html", nil)
		return r
	}())
	if code != http.StatusOK || !strings.Contains(body, `data-page="workflow"`) || !strings.Contains(body, `src="/static/ui.js"`) {
		t.Fatalf("the workflow's page: %d %s", code, body)
	}
}
