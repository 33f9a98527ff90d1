//go:build linux

package ui

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/timeline"
)

// The browser tests drive headless Chromium, from Debian's chromium package
// (.ci/run installs it in CI). JETLOOP_CHROMIUM names another binary.

// chromium returns the browser to drive, or skips the test when there is none
// outside CI; in CI a missing browser is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("JETLOOP_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: .ci/run installs it with apt-get install chromium")
	}
	t.Skip("chromium is not installed (apt-get install chromium); the browser test of the web view is skipped")
	return ""
}

// browsers bounds the Chromium processes running at once: each takes a few
// hundred megabytes, and the machine runs other tests beside.
var browsers = make(chan struct{}, 2)

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// runGatedWorkflow runs gatedWorkflow to its end, approving between its
// tasks, and returns the workflow's log and its tasks' logs. Each waiting
// gate is passed to waiting, if given, before the approval.
func runGatedWorkflow(t *testing.T, e *env, waiting ...func(task int)) (string, []events.Envelope, map[string][]events.Envelope) {
	t.Helper()
	const id = "wf-html"
	e.runWorkflow(gatedWorkflow)
	for task := 2; task <= 3; task++ {
		e.waitFor(fmt.Sprintf("the gate before task %d", task), func() bool {
			last, ok := e.last(id)
			return ok && last.Type == events.WorkflowGated && last.Step == task
		})
		for _, w := range waiting {
			w(task)
		}
		e.approveWorkflow(id, fmt.Sprintf("go on with %d", task))
	}
	e.waitType(id, events.WorkflowFinished)
	log := e.log(id)
	turns := map[string][]events.Envelope{}
	for i := 1; i <= 3; i++ {
		turn := fmt.Sprintf("%s-%d", id, i)
		turns[turn] = e.log(turn)
	}
	return id, log, turns
}

// subagentsExample is the agents file of make demo-subagents: a Lead that
// delegates to a Researcher and a Coder, on scripted models.
var subagentsExample = filepath.Join("..", "..", "examples", "subagents", "AGENTS.md")

// runSubagentsExample runs the example's Lead on the embedded server (the
// worker's tools reading the repository, as the demo's do) and returns the
// turn's id, its log and its children's logs.
func runSubagentsExample(t *testing.T) (*env, string, []events.Envelope, map[string][]events.Envelope) {
	t.Helper()
	e := newEnvServing(t, subagentsExample, filepath.Join("..", ".."))
	const id = "lead-html"
	e.submit(client.TurnRequest{TurnID: id, Agent: "Lead",
		Input: []events.Message{{Role: events.RoleUser, Content: "Document the hard step cap"}}})
	e.waitType(id, events.TurnFinished)
	log := e.log(id)
	children := map[string][]events.Envelope{}
	for _, child := range timeline.ChildTurns(log) {
		children[child] = e.log(child)
	}
	if len(children) != 2 {
		t.Fatalf("the example's Lead ran %d subagents, want 2", len(children))
	}
	return e, id, log, children
}

// stepsAndCalls lists a log's steps and, by call id, the step of each tool
// call.
func stepsAndCalls(log []events.Envelope) ([]int, map[string]int) {
	var steps []int
	calls := map[string]int{}
	for _, e := range log {
		switch e.Type {
		case events.StepStarted:
			steps = append(steps, e.Step)
		case events.ToolRequested, events.ToolCompleted:
			var c struct {
				CallID string `json:"call_id"`
			}
			_ = json.Unmarshal(e.Data, &c)
			calls[c.CallID] = e.Step
		}
	}
	return steps, calls
}

// browser is headless Chromium driven through the DevTools protocol over
// the pipes of --remote-debugging-pipe: JSON messages ended by a NUL byte,
// commands on the child's fd 3, answers and events on its fd 4. No
// WebSocket, no driver library.
type browser struct {
	t       *testing.T
	in      io.WriteCloser
	mu      sync.Mutex
	next    int
	pending map[int]chan cdpMsg
	// problems are exceptions the pages threw and errors they logged.
	problems []string
}

type cdpMsg struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromium(t)
	browsers <- struct{}{}
	t.Cleanup(func() { <-browsers })
	profile := t.TempDir()
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--disable-dev-shm-usage",
		// Both tabs stay live: a tab in the background is not slowed down.
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
		"--force-device-scale-factor=1", "--user-data-dir="+profile, "--crash-dumps-dir="+profile,
		"--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, outW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmdR.Close()
	outW.Close()
	b := &browser{t: t, in: cmdW, pending: map[int]chan cdpMsg{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := bufio.NewReaderSize(outR, 1<<20)
		for {
			line, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m cdpMsg
			if json.Unmarshal(line[:len(line)-1], &m) != nil {
				continue
			}
			b.mu.Lock()
			if ch, ok := b.pending[m.ID]; ok && m.ID != 0 {
				delete(b.pending, m.ID)
				ch <- m
			} else if p := problem(m); p != "" {
				b.problems = append(b.problems, p)
			}
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmdW.Close() // Chromium exits when its pipe closes
		stopped := make(chan error, 1)
		go func() { stopped <- cmd.Wait() }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-stopped
		}
		outR.Close()
		<-done
		if t.Failed() {
			t.Logf("chromium's stderr:\n%s", tail(stderr.String(), 3000))
		}
	})
	return b
}

// problem describes an event that says a page went wrong.
func problem(m cdpMsg) string {
	switch m.Method {
	case "Runtime.exceptionThrown":
		return "exception: " + string(m.Params)
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
			return "console: " + string(m.Params)
		}
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level  string `json:"level"`
				Source string `json:"source"`
				Text   string `json:"text"`
			} `json:"entry"`
		}
		// Chromium reports a CSP violation (an inline script or handler it
		// refused) as a log entry with source "security".
		if json.Unmarshal(m.Params, &p) == nil && p.Entry.Level == "error" && p.Entry.Source != "network" {
			return "log: " + p.Entry.Source + ": " + p.Entry.Text
		}
	}
	return ""
}

// call sends one command (to a tab when session is set) and returns its
// result.
func (b *browser) call(session, method string, params any) json.RawMessage {
	b.t.Helper()
	result, failed := b.try(session, method, params)
	if failed != "" {
		b.t.Fatalf("%s: %s", method, failed)
	}
	return result
}

// try is call that returns the browser's error message instead of failing.
func (b *browser) try(session, method string, params any) (json.RawMessage, string) {
	b.t.Helper()
	ch := make(chan cdpMsg, 1)
	b.mu.Lock()
	b.next++
	id := b.next
	b.pending[id] = ch
	b.mu.Unlock()
	p, _ := json.Marshal(params)
	msg, _ := json.Marshal(cdpMsg{ID: id, Method: method, Params: p, SessionID: session})
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, m.Error.Message
		}
		return m.Result, ""
	case <-time.After(time.Minute):
		b.t.Fatalf("%s: no answer", method)
	}
	return nil, ""
}

// tab opens a page in a tab of its own and returns the tab's session.
func (b *browser) tab(url string) string {
	b.t.Helper()
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}), &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}), &att)
	s := att.SessionID
	b.call(s, "Runtime.enable", nil)
	b.call(s, "Log.enable", nil)
	b.call(s, "Page.enable", nil)
	b.call(s, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false})
	b.call(s, "Page.navigate", map[string]any{"url": url})
	return s
}

// eval runs a script in a tab and returns its value as JSON.
func (b *browser) eval(session, expr string) json.RawMessage {
	b.t.Helper()
	value, exception, failed := b.evaluate(session, expr)
	switch {
	case failed != "":
		b.t.Fatalf("Runtime.evaluate: %s", failed)
	case exception != "":
		b.t.Fatalf("%s: %s", expr, exception)
	}
	return value
}

// evaluate evaluates expr in a tab: its value, the exception it threw, or
// the browser's error message.
func (b *browser) evaluate(session, expr string) (value json.RawMessage, exception, failed string) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	result, failed := b.try(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	_ = json.Unmarshal(result, &r)
	if r.Exception != nil {
		exception = r.Exception.Text
	}
	return r.Result.Value, exception, failed
}

// waitTrue evaluates expr in a tab until it is true.
func (b *browser) waitTrue(session, what, expr string) {
	b.t.Helper()
	// Until the page has loaded, what expr reads may not exist yet.
	guarded := "(function () { try { return (" + expr + "); } catch (e) { return false; } })()"
	testkit.WaitFor(b.t, what+" ("+expr+")", func() bool {
		value, _, failed := b.evaluate(session, guarded)
		// A page that redirects (or reloads) is evaluated again once it
		// has: an evaluation the navigation cut short is not a failure.
		if failed != "" && !strings.Contains(failed, "navigated or closed") {
			b.t.Fatalf("waiting for %s: Runtime.evaluate: %s", what, failed)
		}
		return string(value) == "true"
	})
}

func (b *browser) text(session, expr string) string {
	b.t.Helper()
	var s string
	_ = json.Unmarshal(b.eval(session, expr), &s)
	return s
}

// hostileOutput is a tool output that would run if the page parsed it as markup.
const hostileOutput = `<script>window.pwned = 1; document.title = "pwned";</script>` +
	`<img src=x onerror="window.pwned = 2; document.title = 'pwned'">`

// demoScript is the turn the browser test follows: two parallel calls (one
// with a hostileOutput output), a question, and an answer streamed slowly.
var demoScript = func() string {
	out, _ := json.Marshal(map[string]any{"responses": []map[string]any{
		{"text": "Let me look at the page first.", "delay_ms": 200, "tool_calls": []map[string]any{
			{"name": "echo", "arguments": map[string]any{"text": hostileOutput}},
			{"name": "echo", "arguments": map[string]any{"text": "the button is grey"}}}},
		{"text": "One question before I change it.", "delay_ms": 200, "tool_calls": []map[string]any{
			{"name": "ask_user", "arguments": map[string]any{"question": "Which colour should the button be?"}}}},
		{"text": "Blue it is: the button is now blue, and the page says so.", "delay_ms": 400},
	}})
	return string(out)
}()

// TestUIInChromium follows a turn in two tabs of headless Chromium: the
// turns page, open before the turn starts, lists it without a reload; the
// turn's page, also open before, draws its steps as they come, shows a
// hostileOutput tool output as text without running it, and a reply typed into it
// resumes the paused turn to its end.
func TestUIInChromium(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	b := startBrowser(t)
	const turn = "ui-demo"

	list := b.tab(ts.URL + "/")
	b.waitTrue(list, "the turns page", `document.body.dataset.loaded === "true"`)
	page := b.tab(ts.URL + "/turn/" + turn)
	b.waitTrue(page, "the turn page", `document.getElementById("metrics").textContent.startsWith("no events yet")`)
	// Marks that a reload would wipe.
	b.eval(list, `window.stayed = 1`)
	b.eval(page, `window.stayed = 1`)

	submitScript(t, e.js, turn, "Asker", demoScript)

	b.waitTrue(list, "the turn on the list", `!!document.querySelector('tr[data-turn="`+turn+`"]')`)
	b.waitTrue(page, "the turn's first step drawn", `document.querySelectorAll("#timeline .row.step").length >= 1`)
	b.waitTrue(page, "the pause drawn", `document.body.dataset.status === "paused" && !!document.querySelector(".pause") &&
		document.querySelectorAll("#timeline .row.step").length === 2 && !document.getElementById("ask").hidden`)
	b.waitTrue(list, "the turn paused on the list", `document.querySelector('tr[data-turn="`+turn+`"]').dataset.status === "paused"`)
	if q := b.text(page, `document.getElementById("ask-question").textContent`); q != "Which colour should the button be?" {
		t.Fatalf("the question shown: %q", q)
	}

	// The hostileOutput output, in the event table and in the call's details.
	b.eval(page, `document.querySelector('.tool-bar[data-tool="echo"]').focus()`)
	b.waitTrue(page, "the call's details", `!document.getElementById("tooltip").hidden`)
	if tip := b.text(page, `document.getElementById("tooltip").textContent`); !strings.Contains(tip, hostileOutput) {
		t.Errorf("the call's details do not show the output as text: %q", tip)
	}
	if rows := b.text(page, `document.getElementById("events").textContent`); !strings.Contains(rows, "<script>window.pwned") {
		t.Errorf("the event table does not show the output as text: %q", tail(rows, 600))
	}
	if shot := os.Getenv("JETLOOP_UI_SCREENSHOT"); shot != "" {
		b.eval(page, `document.activeElement.blur()`)
		// The pause drawn growing, past a second.
		b.waitTrue(page, "the pause a second long", `/· \d\.\d\ds$/.test(document.querySelector(".pause-label").textContent)`)
		screenshot(t, b, page, shot)
	}

	// The reply, typed.
	b.eval(page, `document.getElementById("reply-text").focus()`)
	b.call(page, "Input.insertText", map[string]any{"text": "blue"})
	if v := b.text(page, `document.getElementById("reply-text").value`); v != "blue" {
		t.Fatalf("typed %q", v)
	}
	b.eval(page, `document.getElementById("reply-send").click()`)
	b.waitTrue(page, "the turn finished", `document.body.dataset.status === "completed"`)
	b.waitTrue(list, "the turn finished on the list", `document.querySelector('tr[data-turn="`+turn+`"]').dataset.status === "finished"`)
	if fin := e.finished(turn); fin.StopReason != events.StopCompleted || !strings.HasPrefix(fin.Output, "Blue it is") {
		t.Fatalf("%s: %+v", turn, fin)
	}
	for _, ev := range e.log(turn) {
		if ev.Type == events.TurnResumed && !strings.Contains(string(ev.Data), `"answer":"blue"`) {
			t.Fatalf("resumed with %s", ev.Data)
		}
	}
	if out := b.text(page, `document.getElementById("outcome-output").textContent`); !strings.HasPrefix(out, "Blue it is") {
		t.Errorf("the outcome shown: %q", out)
	}

	for _, s := range []string{list, page} {
		if got := string(b.eval(s, `[window.stayed, window.pwned === undefined, document.title.indexOf("pwned") < 0,
			document.querySelectorAll("img").length]`)); got != "[1,true,true,0]" {
			t.Errorf("[stayed, not pwned, title clean, images] = %s", got)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page went wrong: %s", p)
	}
}

// With the viewer role the pages show the turn and the dead letters, and no
// control: no answer box, no abort, no retry.
func TestUIViewerInChromium(t *testing.T) {
	e, srv := newRolesEnv(t)
	submitScript(t, e.js, "ui-view", "Asker", askJSON)
	e.waitType("ui-view", events.TurnPaused)
	submitScript(t, e.js, "ui-view-bad", "Nobody", askJSON)
	e.finished("ui-view-bad")
	_, ts := startUI(t, dialAs(t, srv.ClientURL(), "viewer"))
	b := startBrowser(t)

	page := b.tab(ts.URL + "/turn/ui-view")
	b.waitTrue(page, "the paused turn", `document.body.dataset.status === "paused" && !!document.querySelector(".pause")`)
	if got := string(b.eval(page, `[document.body.dataset.canControl, getComputedStyle(document.getElementById("controls")).display,
		document.getElementById("abort").getClientRects().length, document.getElementById("reply-send").getClientRects().length]`)); got != `["false","none",0,0]` {
		t.Errorf("the viewer's turn page: [can control, controls' display, abort boxes, reply boxes] = %s", got)
	}
	dead := b.tab(ts.URL + "/dead")
	b.waitTrue(dead, "the dead letters", `document.querySelectorAll("#letters tbody tr").length === 1`)
	if got := string(b.eval(dead, `document.querySelectorAll("button[data-retry]").length`)); got != "0" {
		t.Errorf("the viewer's dead letters page has %s retry buttons", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page went wrong: %s", p)
	}
}

// screenshot saves the tab as a PNG at path (relative to the package
// directory) and checks that it is one.
func screenshot(t *testing.T, b *browser, session, path string) {
	t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	_ = json.Unmarshal(b.call(session, "Page.captureScreenshot", map[string]any{"format": "png"}), &shot)
	data, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() != 1280 || r.Dy() != 800 {
		t.Fatalf("screenshot %dx%d", r.Dx(), r.Dy())
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestUIWorkflowInChromium follows a workflow in headless Chromium: on the
// turns page, open before it starts, it is one row with its tasks' turns
// listed under it in task order (its toggle hides and shows them); its page,
// opened while the gate waits, draws it live, each task a band holding its
// turn's steps and linking to the turn's page, and goes on to the finish;
// the turn page of a task links back to it, and /turn/ID of the workflow
// leads to its page.
func TestUIWorkflowInChromium(t *testing.T) {
	e := newEnv(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	b := startBrowser(t)
	const id = "wf-html"

	list := b.tab(ts.URL + "/")
	b.waitTrue(list, "the turns page", `document.body.dataset.loaded === "true"`)
	var page string
	_, _, turns := runGatedWorkflow(t, e, func(task int) {
		if task != 2 {
			return
		}
		page = b.tab(ts.URL + "/workflow/" + id)
		b.waitTrue(page, "the workflow paused on its page", `document.body.dataset.status === "paused" &&
			document.querySelectorAll("#timeline .task-band").length === 1 && !!document.querySelector("#timeline .gate-wait")`)
		b.waitTrue(list, "the workflow paused on the list", `document.querySelector('tr[data-turn="`+id+`"]').dataset.status === "paused"`)
		if got := b.text(list, `document.querySelector('tr[data-turn="`+id+`"] td.st').textContent`); got != "paused: approve task 2 · 1/3 done" {
			t.Errorf("the paused workflow's status: %q", got)
		}
	})
	if page == "" {
		t.Fatal("the gate never waited")
	}

	b.waitTrue(list, "the workflow finished on the list", `document.querySelector('tr[data-turn="`+id+`"]').dataset.status === "finished" &&
		document.querySelectorAll('tr[data-workflow="`+id+`"]').length === 3`)
	order := `Array.from(document.querySelectorAll("#turns tbody tr")).filter(function (tr) { return !tr.hidden; }).map(function (tr) {
		return tr.dataset.turn + (tr.dataset.workflow ? "<" + tr.dataset.workflow + ":" + tr.dataset.task : ""); }).join(" ")`
	want := id + " " + id + "-1<" + id + ":1 " + id + "-2<" + id + ":2 " + id + "-3<" + id + ":3"
	if got := b.text(list, order); got != want {
		t.Errorf("the rows: %q, want %q", got, want)
	}
	row := `document.querySelector('tr[data-turn="` + id + `"]')`
	if got := b.text(list, row+`.querySelector("td.st").textContent`); got != "finished: completed · 3/3 tasks" {
		t.Errorf("the finished workflow's status: %q", got)
	}
	if got := string(b.eval(list, `[`+row+`.querySelector("a").getAttribute("href"), `+row+`.children[5].textContent,
		`+row+`.children[6].textContent]`)); got != `["/workflow/`+id+`","5","3"]` {
		t.Errorf("the workflow's [link, steps, tool calls]: %s", got)
	}
	b.eval(list, row+`.querySelector("button.toggle").click()`)
	if got := b.text(list, order); got != id {
		t.Errorf("with its tasks hidden: %q", got)
	}
	b.eval(list, row+`.querySelector("button.toggle").click()`)
	if got := b.text(list, order); got != want {
		t.Errorf("with its tasks shown again: %q", got)
	}

	b.waitTrue(page, "the workflow finished on its page", `document.body.dataset.status === "completed" &&
		document.querySelectorAll("#timeline .task-band").length === 3`)
	for i := 1; i <= 3; i++ {
		turn := fmt.Sprintf("%s-%d", id, i)
		steps, _ := stepsAndCalls(turns[turn])
		band := fmt.Sprintf(`document.getElementById("task-%d")`, i)
		got := string(b.eval(page, `[`+band+`.querySelectorAll(".row.step").length, `+band+`.querySelector("a.turn-link").getAttribute("href"),
			document.querySelector('#tasks tr[data-task="`+fmt.Sprint(i)+`"] a').getAttribute("href")]`))
		if want := fmt.Sprintf(`[%d,"/turn/%s","/turn/%s"]`, len(steps), turn, turn); got != want {
			t.Errorf("task %d: [steps in its band, its band's link, its row's link] = %s, want %s", i, got, want)
		}
	}

	// A task's turn names its workflow; the workflow's id as a turn leads
	// to the workflow's page.
	task := b.tab(ts.URL + "/turn/" + id + "-2")
	b.waitTrue(task, "the task's turn", `document.body.dataset.status === "completed"`)
	if got := b.text(task, `document.querySelector('#meta a').getAttribute("href")`); got != "/workflow/"+id {
		t.Errorf("the task's turn links to %q", got)
	}
	moved := b.tab(ts.URL + "/turn/" + id)
	b.waitTrue(moved, "the workflow's page from /turn/", `location.pathname === "/workflow/`+id+`" && document.body.dataset.status === "completed"`)

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page went wrong: %s", p)
	}
}

// TestUISubagentsInChromium: the page of a turn whose calls ran subagents
// (examples/subagents' Lead) draws each child as a band under its call,
// linked to the child's page; the child's page links back to its parent's
// page at the call, which opens with that call's details.
func TestUISubagentsInChromium(t *testing.T) {
	e, id, _, children := runSubagentsExample(t)
	_, ts := startUI(t, dialURL(e.srv.ClientURL()))
	b := startBrowser(t)
	page := b.tab(ts.URL + "/turn/" + id)
	b.waitTrue(page, "the parent's page with its children", `document.body.dataset.status === "completed" &&
		document.querySelectorAll("#timeline .child-band").length === 2 &&
		document.querySelectorAll("#timeline .child-band .row.step").length > 0`)
	for child, clog := range children {
		href := b.text(page, `document.querySelector('#child-`+child+` a.turn-link').getAttribute("href")`)
		if href != "/turn/"+child {
			t.Errorf("the band of %s links to %q", child, href)
		}
		steps, _ := stepsAndCalls(clog)
		if n := b.text(page, `String(document.querySelectorAll('#child-`+child+` .row.step[data-turn="`+child+`"]').length)`); n != fmt.Sprint(len(steps)) {
			t.Errorf("the band of %s draws %s steps, its log has %d", child, n, len(steps))
		}
		var st events.TurnStartedData
		_ = json.Unmarshal(clog[0].Data, &st)

		// The child's page links back to the parent's call.
		cp := b.tab(ts.URL + "/turn/" + child)
		b.waitTrue(cp, "the child's page", `document.body.dataset.status === "completed" && !!document.getElementById("parent-link")`)
		want := "/turn/" + id + "#call-" + st.Parent.CallID
		if got := b.text(cp, `document.getElementById("parent-link").getAttribute("href")`); got != want {
			t.Errorf("the child %s links back to %q, want %q", child, got, want)
		}
		up := b.tab(ts.URL + want)
		b.waitTrue(up, "the parent's page at the call", `!document.getElementById("tooltip").hidden &&
			document.getElementById("tooltip").textContent.indexOf("`+child+`") >= 0`)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page went wrong: %s", p)
	}
}
