package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
)

// goldenLogs reads every recorded log in testdata, by name.
func goldenLogs(t *testing.T) map[string][]events.Envelope {
	t.Helper()
	paths, err := filepath.Glob("testdata/*.jsonl")
	if err != nil || len(paths) < 6 {
		t.Fatalf("recorded logs: %v %v", paths, err)
	}
	logs := map[string][]events.Envelope{}
	for _, p := range paths {
		log, err := readLogFile(p)
		if err != nil {
			t.Fatal(err)
		}
		logs[strings.TrimSuffix(filepath.Base(p), ".jsonl")] = log
	}
	return logs
}

func renderPage(t *testing.T, log []events.Envelope) string {
	t.Helper()
	var b bytes.Buffer
	if err := timeline.Write(&b, log); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var scriptBlock = regexp.MustCompile(`(?s)<script type="application/json" id="([a-z-]+)">(.*?)</script>`)

// pageData returns the page's JSON blocks by id.
func pageData(t *testing.T, page string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range scriptBlock.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	if len(out) != 2 || out["timeline-data"] == "" || out["turn-events"] == "" {
		t.Fatalf("the page embeds %d JSON blocks, want timeline-data and turn-events", len(out))
	}
	return out
}

// TestTimelinePageOfGoldenLogs renders each recorded turn and checks the
// page holds every step and every tool call of its log, embeds the whole log
// unchanged, and refers to no other resource.
func TestTimelinePageOfGoldenLogs(t *testing.T) {
	for name, log := range goldenLogs(t) {
		t.Run(name, func(t *testing.T) {
			page := renderPage(t, log)
			checkSelfContained(t, page)
			blocks := pageData(t, page)

			var tl timeline.Timeline
			if err := json.Unmarshal([]byte(blocks["timeline-data"]), &tl); err != nil {
				t.Fatalf("timeline-data: %v", err)
			}
			steps, calls := stepsAndCalls(log)
			if len(tl.Steps) != len(steps) {
				t.Fatalf("timeline has %d steps, the log %d", len(tl.Steps), len(steps))
			}
			for i, s := range tl.Steps {
				if s.Step != steps[i] {
					t.Errorf("step %d of the timeline is %d, want %d", i, s.Step, steps[i])
				}
				if s.Model == nil {
					t.Errorf("step %d has no model call", s.Step)
				}
				for _, c := range s.Tools {
					if calls[c.CallID] != s.Step {
						t.Errorf("call %s drawn in step %d, the log has it in step %d", c.CallID, s.Step, calls[c.CallID])
					}
					delete(calls, c.CallID)
				}
			}
			if len(calls) > 0 {
				t.Errorf("calls missing from the timeline: %v", calls)
			}
			if len(tl.Rows) != len(log) {
				t.Errorf("%d event rows, want %d", len(tl.Rows), len(log))
			}

			var back []events.Envelope
			if err := json.Unmarshal([]byte(blocks["turn-events"]), &back); err != nil {
				t.Fatalf("turn-events: %v", err)
			}
			want, _ := json.Marshal(log)
			got, _ := json.Marshal(back)
			if !bytes.Equal(got, want) {
				t.Fatal("the embedded log differs from the log")
			}
			// The event table is in the HTML itself, for print and for readers
			// without script.
			for _, e := range log {
				if !strings.Contains(page, `<tr id="event-`+itoa(e.Seq)+`"`) {
					t.Errorf("no table row for event %d", e.Seq)
				}
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// stepsAndCalls lists a log's started steps and the step of each tool call.
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

// checkSelfContained fails when the page could load anything: no src or
// href, no CSS url() or @import, and no URL outside the embedded data (which
// is the turn's own text and may quote any URL).
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	outside := scriptBlock.ReplaceAllString(page, "")
	for _, bad := range []string{"http://", "https://", "//cdn", "src=", "href=", "url(", "@import", "<link", "<img", "<iframe", "<object", "<embed"} {
		if strings.Contains(strings.ToLower(outside), bad) {
			t.Errorf("the page contains %q outside its embedded data", bad)
		}
	}
}

// TestTimelineLayout checks where things are drawn, turn by turn.
func TestTimelineLayout(t *testing.T) {
	logs := goldenLogs(t)
	build := func(name string) *timeline.Timeline {
		t.Helper()
		tl, err := timeline.Build(logs[name])
		if err != nil {
			t.Fatal(err)
		}
		within(t, tl)
		return tl
	}

	t.Run("completed", func(t *testing.T) {
		tl := build("completed")
		if tl.Running || tl.Finished == nil || tl.Finished.StopReason != events.StopCompleted || len(tl.Steps) != 4 {
			t.Fatalf("running %v finished %+v steps %d", tl.Running, tl.Finished, len(tl.Steps))
		}
		s := tl.Steps[0]
		if s.Model.StartMs != s.StartMs || s.Model.EndMs <= s.StartMs || s.Model.DurationMs != 605 || s.Model.Usage.InputTokens != 126 {
			t.Fatalf("step 1 model call %+v in step %v..%v", s.Model, s.StartMs, s.EndMs)
		}
		if len(s.Tools) != 2 || s.Tools[0].Name != "list_dir" || s.Tools[0].Lane != 0 || s.Tools[1].Lane != 1 {
			t.Fatalf("step 1 tools %+v", s.Tools)
		}
		for _, c := range s.Tools {
			if c.Open || c.StartMs < s.Model.EndMs || c.EndMs > s.EndMs || c.Worker == "" || c.Attempts != 1 {
				t.Errorf("tool %+v in step %v..%v", c, s.StartMs, s.EndMs)
			}
		}
		if last := tl.Steps[3]; last.Decision != events.DecisionStop || last.StopReason != events.StopCompleted || len(last.Tools) != 0 {
			t.Fatalf("last step %+v", last)
		}
		if tl.Summary != nil || tl.Sentinel != nil || len(tl.Pauses) != 0 {
			t.Fatalf("a completed turn has no summary, sentinel or pause: %+v %+v %+v", tl.Summary, tl.Sentinel, tl.Pauses)
		}
	})

	t.Run("paused", func(t *testing.T) {
		tl := build("paused")
		if len(tl.Pauses) != 1 {
			t.Fatalf("pauses %+v", tl.Pauses)
		}
		p, ask := tl.Pauses[0], tl.Steps[0].Tools[0]
		if p.Open || p.Kind != events.PauseInput || p.Question != "Which file?" || p.Answer != "go.mod" || p.CallID != ask.CallID {
			t.Fatalf("pause %+v, ask_user %+v", p, ask)
		}
		if p.EndMs-p.StartMs < 1000 || p.StartMs < ask.StartMs || p.EndMs > ask.EndMs {
			t.Fatalf("pause %v..%v, ask_user call %v..%v", p.StartMs, p.EndMs, ask.StartMs, ask.EndMs)
		}
		var errs []string
		for _, c := range tl.Steps[1].Tools {
			if c.IsError {
				errs = append(errs, c.Name)
			}
		}
		if strings.Join(errs, ",") != "nosuch,echo" {
			t.Fatalf("error calls of step 2: %v", errs)
		}
	})

	t.Run("doom_loop", func(t *testing.T) {
		tl := build("doom_loop")
		sm, last := tl.Summary, tl.Steps[2]
		if sm == nil || sm.Open || sm.StartMs != last.EndMs || tl.Sentinel == nil || sm.EndMs != tl.Sentinel.AtMs || sm.Usage == nil {
			t.Fatalf("summary %+v after step %+v, sentinel %+v", sm, last, tl.Sentinel)
		}
		if tl.Sentinel.Reason != events.StopDoomLoop || !strings.HasPrefix(tl.Sentinel.Text, "Stopped: the same tool call") {
			t.Fatalf("sentinel %+v", tl.Sentinel)
		}
		// The repeating call was asked for but never run: no bar.
		if len(last.Model.ToolCalls) != 1 || len(last.Tools) != 0 {
			t.Fatalf("step 3 asked %v, ran %v", last.Model.ToolCalls, last.Tools)
		}
	})

	t.Run("aborted", func(t *testing.T) {
		tl := build("aborted")
		s := tl.Steps[0]
		if !s.Open || s.EndMs != tl.Finished.AtMs || len(s.Tools) != 1 || !s.Tools[0].Open || s.Tools[0].EndMs != tl.EndMs {
			t.Fatalf("an aborted step and its waiting call end at the abort: %+v", s)
		}
		if len(tl.Pauses) != 1 || !tl.Pauses[0].Open || tl.Pauses[0].EndMs != tl.EndMs || tl.Finished.Error != "changed my mind" {
			t.Fatalf("pauses %+v finished %+v", tl.Pauses, tl.Finished)
		}
	})

	t.Run("running", func(t *testing.T) {
		// The log of a turn still running: cut after step 2's tool.requested.
		log := logs["completed"][:11]
		tl, err := timeline.Build(log)
		if err != nil {
			t.Fatal(err)
		}
		within(t, tl)
		if !tl.Running || tl.Finished != nil || len(tl.Steps) != 2 {
			t.Fatalf("running %v finished %+v steps %d", tl.Running, tl.Finished, len(tl.Steps))
		}
		s := tl.Steps[1]
		if !s.Open || s.Model.Open || len(s.Tools) != 1 || !s.Tools[0].Open || s.Tools[0].EndMs != tl.EndMs {
			t.Fatalf("the running step %+v", s)
		}
		page := renderPage(t, log)
		if !strings.Contains(page, `id="status">running<`) {
			t.Fatal("the page of a running turn does not say so")
		}
		// Mid model call: the model bar is open and ends at the last event.
		tl, err = timeline.Build(logs["completed"][:9])
		if err != nil {
			t.Fatal(err)
		}
		if m := tl.Steps[1].Model; !m.Open || m.StartMs != tl.EndMs {
			t.Fatalf("a model call not answered yet: %+v", m)
		}
	})

	t.Run("rejected", func(t *testing.T) {
		// A rejected submission's log is a single turn.finished.
		data, _ := json.Marshal(events.TurnFinishedData{StopReason: events.StopRejected, Error: "unknown agent \"Nobody\""})
		log := []events.Envelope{{ID: "01a20577-5181-78d6-ad8c-7c32306c1099", Type: events.TurnFinished, TurnID: "rej",
			SessionID: "rej", Seq: 1, Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Data: data}}
		tl, err := timeline.Build(log)
		if err != nil {
			t.Fatal(err)
		}
		if len(tl.Steps) != 0 || tl.Running || tl.Finished.StopReason != events.StopRejected {
			t.Fatalf("%+v", tl)
		}
		page := renderPage(t, log)
		if !strings.Contains(page, "unknown agent &#34;Nobody&#34;") {
			t.Fatal("the page of a rejected turn does not show its error")
		}
	})
}

// within fails when anything is drawn outside the axis or ends before it
// starts.
func within(t *testing.T, tl *timeline.Timeline) {
	t.Helper()
	span := func(what string, a, b float64) {
		if a < 0 || b < a || b > tl.EndMs {
			t.Errorf("%s: %v..%v outside 0..%v", what, a, b, tl.EndMs)
		}
	}
	for _, s := range tl.Steps {
		span("step", s.StartMs, s.EndMs)
		span("model", s.Model.StartMs, s.Model.EndMs)
		for _, c := range s.Tools {
			span("tool "+c.CallID, c.StartMs, c.EndMs)
		}
	}
	for _, p := range tl.Pauses {
		span("pause", p.StartMs, p.EndMs)
	}
	if tl.Summary != nil {
		span("summary", tl.Summary.StartMs, tl.Summary.EndMs)
	}
}

// hostile is the text a model or a tool might return to break out of the
// page's script.
const hostile = `</script><script>alert(1)</script><!-- <script> ]]> "' & \u2028`

// hostileLog is the completed turn with hostile text in a tool's output, a
// tool's arguments, the model's text and the user's input.
func hostileLog(t *testing.T) []events.Envelope {
	t.Helper()
	log := append([]events.Envelope(nil), goldenLogs(t)["completed"]...)
	for i, e := range log {
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case events.TurnStarted:
			d["input"] = []map[string]string{{"role": "user", "content": hostile}}
		case events.ModelCompleted:
			d["text"] = hostile
		case events.ToolRequested:
			d["arguments"] = map[string]string{"path": hostile}
		case events.ToolCompleted:
			d["output"] = hostile
		default:
			continue
		}
		log[i].Data, _ = json.Marshal(d)
	}
	return log
}

// TestTimelineEscapesEverything renders text written to break out of the
// page: it stays data, in the JSON and in the HTML.
func TestTimelineEscapesEverything(t *testing.T) {
	log := hostileLog(t)
	page := renderPage(t, log)
	checkSelfContained(t, page)
	if n := strings.Count(strings.ToLower(page), "<script"); n != 3 {
		t.Fatalf("the page has %d script elements, want 3 (timeline-data, turn-events, the code)", n)
	}
	if n := strings.Count(strings.ToLower(page), "</script"); n != 3 {
		t.Fatalf("the page closes %d script elements, want 3", n)
	}
	if strings.Contains(page, "<!--") {
		t.Fatal("a comment opener got into the page")
	}
	if !strings.Contains(page, "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatal("the event table does not show the hostile text escaped")
	}
	blocks := pageData(t, page)
	var back []events.Envelope
	if err := json.Unmarshal([]byte(blocks["turn-events"]), &back); err != nil {
		t.Fatal(err)
	}
	var out events.ToolCompletedData
	for _, e := range back {
		if e.Type == events.ToolCompleted {
			_ = json.Unmarshal(e.Data, &out)
		}
	}
	if out.Output != hostile {
		t.Fatalf("the embedded output is %q, want %q", out.Output, hostile)
	}
	var tl timeline.Timeline
	if err := json.Unmarshal([]byte(blocks["timeline-data"]), &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Input != hostile || tl.Steps[0].Model.Text != hostile || tl.Steps[0].Tools[0].Output != hostile {
		t.Fatalf("the timeline's texts changed: %q %q %q", tl.Input, tl.Steps[0].Model.Text, tl.Steps[0].Tools[0].Output)
	}
}

// TestReplayHTML runs the command: replay --html --file writes the page and
// says so; a log that breaks the invariants still gets its page and exits 1.
func TestReplayHTML(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "turn.html")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"replay", "--html", out, "--file", "testdata/paused.jsonl"}, &stdout, &stderr)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if stdout.String() != "wrote "+out+": 21 events, 3 steps\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
	page, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(page, []byte("<!DOCTYPE html>")) {
		t.Fatalf("%v: %.40q", err, page)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".timeline-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	// A log whose last two events are swapped does not fold: no page, exit 1.
	log := goldenLogs(t)["budget"]
	broken := append(append([]events.Envelope(nil), log[:len(log)-2]...), log[len(log)-1], log[len(log)-2])
	path := filepath.Join(dir, "broken.jsonl")
	var b bytes.Buffer
	for _, e := range broken {
		line, _ := json.Marshal(e)
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	bad := filepath.Join(dir, "broken.html")
	code = Main(context.Background(), []string{"replay", "--html", bad, "--file", path}, &stdout, &stderr)
	if code != ExitStopped || !strings.Contains(stderr.String(), "does not fold") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("a page was written for a log that does not fold: %v", err)
	}

	// An unwritable place is the command's failure, not the log's.
	stderr.Reset()
	code = Main(context.Background(), []string{"replay", "--html", filepath.Join(dir, "no", "such", "dir.html"),
		"--file", "testdata/paused.jsonl"}, &stdout, &stderr)
	if code != ExitFailed {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
