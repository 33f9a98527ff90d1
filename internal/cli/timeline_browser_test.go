//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
)

// The browser test drives headless Chromium, from Debian's chromium package
// (.ci/run installs it in CI). JETLOOP_CHROMIUM names another binary;
// JETLOOP_TIMELINE_SCREENSHOT keeps the screenshot at that path (relative to
// the package directory, as go test runs there).
const (
	screenshotW = 1280
	screenshotH = 720
)

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
	t.Skip("chromium is not installed (apt-get install chromium); the browser test of the timeline is skipped")
	return ""
}

// browsers bounds the Chromium processes running at once: each takes a few
// hundred megabytes, and the machine runs other tests beside.
var browsers = make(chan struct{}, 2)

// runChromium runs one headless Chromium with a fresh profile, cut off after a
// deadline with all its processes, and returns its stdout.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	browsers <- struct{}{}
	defer func() { <-browsers }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	profile := t.TempDir()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
		"--disable-dev-shm-usage", // containers often have a tiny /dev/shm
		"--force-device-scale-factor=1", "--user-data-dir=" + profile, "--crash-dumps-dir=" + profile}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	// Chromium starts helper processes: its own process group lets a
	// deadline stop them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, tail(stderr.String(), 2000))
	}
	return stdout.Bytes()
}

// htmlText is s as Chromium serializes a text node.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\u00a0", "&nbsp;").Replace(s)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var (
	startTag = regexp.MustCompile(`<([a-z]+)((?:\s+[a-z-]+(?:="[^"]*")?)*)\s*/?>`)
	attrRe   = regexp.MustCompile(`([a-z-]+)(?:="([^"]*)")?`)
)

// element is a start tag of the dumped DOM.
type element struct {
	tag   string
	attrs map[string]string
}

func (e element) hasClass(c string) bool {
	for _, f := range strings.Fields(e.attrs["class"]) {
		if f == c {
			return true
		}
	}
	return false
}

// elements parses the start tags of a DOM that Chromium serialized (its
// attributes are always double-quoted, so a regular expression is enough).
// The text inside script elements is not markup and is left out.
func elements(dom string) []element {
	dom = regexp.MustCompile(`(?s)(<script[^>]*>).*?</script>`).ReplaceAllString(dom, "$1</script>")
	var out []element
	for _, m := range startTag.FindAllStringSubmatch(dom, -1) {
		e := element{tag: m[1], attrs: map[string]string{}}
		for _, a := range attrRe.FindAllStringSubmatch(m[2], -1) {
			e.attrs[a[1]] = a[2]
		}
		out = append(out, e)
	}
	return out
}

// dumpDOM renders a page (url is a file path, with a #fragment or not) and
// returns its DOM after the page's script ran.
func dumpDOM(t *testing.T, bin, url string) (string, []element) {
	t.Helper()
	dom := runChromium(t, bin, "--virtual-time-budget=5000", "--dump-dom", "file://"+url)
	els := elements(string(dom))
	if len(els) < 20 {
		t.Fatalf("chromium dumped %d elements:\n%s", len(els), tail(string(dom), 2000))
	}
	return string(dom), els
}

// TestTimelineInChromium renders the page of every recorded turn in headless
// Chromium and checks, in the DOM the page's script built, that every step,
// every tool call, every pause and the stop are drawn; then takes a
// screenshot and checks it shows the bars.
func TestTimelineInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	logs := goldenLogs(t)
	logs["hostile"] = hostileLog(t)
	for name, log := range logs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tl, err := timeline.Build(log)
			if err != nil {
				t.Fatal(err)
			}
			page := filepath.Join(dir, name+".html")
			if err := timeline.WriteFile(page, tl, log); err != nil {
				t.Fatal(err)
			}
			_, els := dumpDOM(t, bin, page)
			checkDOM(t, els, log, tl)
			if name == "completed" {
				checkZoom(t, bin, page, tl)
			}
			if name != "paused" && name != "hostile" {
				return
			}
			// A link to a call opens with its details, as a hover shows them:
			// name, call id, arguments and output, as text.
			c := tl.Steps[0].Tools[0]
			dom, els := dumpDOM(t, bin, page+"#call-"+c.CallID)
			tip := regexp.MustCompile(`(?s)<div id="tooltip"[^>]*>(.*?)</div>\s*<script`).FindStringSubmatch(dom)
			if tip == nil || strings.Contains(tip[0], " hidden") {
				t.Fatalf("no details shown for %s#call-%s", name, c.CallID)
			}
			for _, want := range []string{`<div class="t">` + c.Name, "<dd>" + c.CallID + "</dd>",
				"<pre>" + htmlText(c.Arguments) + "</pre>", "<pre>" + htmlText(c.Output)} {
				if !strings.Contains(tip[1], want) {
					t.Errorf("the details of %s lack %q:\n%s", c.CallID, want, tip[1])
				}
			}
			scripts := 0
			for _, e := range els {
				if e.tag == "script" {
					scripts++
				}
			}
			if scripts != 3 {
				t.Errorf("%d script elements in the DOM with details shown, want 3", scripts)
			}
		})
	}
	t.Run("screenshot", func(t *testing.T) {
		t.Parallel()
		shot := os.Getenv("JETLOOP_TIMELINE_SCREENSHOT")
		if shot == "" {
			shot = filepath.Join(t.TempDir(), "timeline.png")
		} else if abs, err := filepath.Abs(shot); err == nil {
			shot = abs
		}
		// The paused turn shows the most: a long pause drawn compressed,
		// parallel calls, errors.
		page := filepath.Join(t.TempDir(), "paused.html")
		tl, err := timeline.Build(logs["paused"])
		if err != nil {
			t.Fatal(err)
		}
		if err := timeline.WriteFile(page, tl, logs["paused"]); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(shot), 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(shot)
		runChromium(t, bin, "--virtual-time-budget=5000", fmt.Sprintf("--window-size=%d,%d", screenshotW, screenshotH),
			"--screenshot="+shot, "file://"+page)
		checkScreenshot(t, shot)
		t.Logf("screenshot: %s", shot)
	})
}

// checkZoom opens the page zoomed to its second step (page#step-2): the
// step's model bar then spans most of the axis, and the way back is offered.
func checkZoom(t *testing.T, bin, page string, tl *timeline.Timeline) {
	t.Helper()
	dom, els := dumpDOM(t, bin, page+"#step-2")
	if !strings.Contains(dom, `<span id="zoom-note">showing step 2:`) {
		t.Errorf("the page did not zoom to step 2")
	}
	for _, e := range els {
		if _, hidden := e.attrs["hidden"]; e.attrs["id"] == "zoom-reset" && hidden {
			t.Errorf("zoomed, but no way back: %v", e.attrs)
		}
		if e.hasClass("model-bar") && e.attrs["data-step"] == "2" {
			var left, width float64
			if _, err := fmt.Sscanf(e.attrs["style"], "left: %f%%; width: %f%%;", &left, &width); err != nil || width < 50 {
				t.Errorf("step 2's model bar when zoomed to it: %q (%v)", e.attrs["style"], err)
			}
			return
		}
	}
	t.Error("no model bar of step 2")
}

func checkDOM(t *testing.T, els []element, log []events.Envelope, tl *timeline.Timeline) {
	t.Helper()
	var root *element
	scripts := 0
	steps := map[string]bool{}
	models := map[string]bool{}
	calls := map[string]element{}
	pauses := map[string]bool{} // call id: drawn compressed
	breaks := 0
	var finish, sentinel, summary *element
	for i, e := range els {
		switch {
		case e.attrs["id"] == "timeline":
			root = &els[i]
		case e.tag == "script":
			scripts++
		case e.hasClass("step") && e.hasClass("row"):
			steps[e.attrs["data-step"]] = true
		case e.hasClass("model-bar"):
			models[e.attrs["data-step"]] = true
		case e.hasClass("tool-bar"):
			calls[e.attrs["data-call-id"]] = e
		case e.hasClass("pause"):
			pauses[e.attrs["data-call-id"]] = e.hasClass("compressed")
		case e.hasClass("axis-break"):
			breaks++
		case e.hasClass("finish-marker"):
			finish = &els[i]
		case e.hasClass("sentinel-marker"):
			sentinel = &els[i]
		case e.hasClass("summary-bar"):
			summary = &els[i]
		}
	}
	if root == nil || root.attrs["data-rendered"] != "true" {
		t.Fatalf("the page's script did not draw the timeline: %v", root)
	}
	if scripts != 3 {
		t.Errorf("%d script elements in the DOM, want 3", scripts)
	}
	for _, s := range tl.Steps {
		n := fmt.Sprint(s.Step)
		if !steps[n] || !models[n] {
			t.Errorf("step %s: row drawn %v, model bar drawn %v", n, steps[n], models[n])
		}
	}
	if len(steps) != len(tl.Steps) {
		t.Errorf("%d step rows drawn, want %d", len(steps), len(tl.Steps))
	}
	_, want := stepsAndCalls(log)
	for id, step := range want {
		e, ok := calls[id]
		if !ok {
			t.Errorf("call %s is not drawn", id)
			continue
		}
		if e.attrs["data-step"] != fmt.Sprint(step) {
			t.Errorf("call %s drawn in step %s, want %d", id, e.attrs["data-step"], step)
		}
		if !strings.Contains(e.attrs["style"], "left:") || !strings.Contains(e.attrs["style"], "width:") {
			t.Errorf("call %s is not placed on the axis: %q", id, e.attrs["style"])
		}
	}
	if len(calls) != len(want) {
		t.Errorf("%d tool bars drawn, want %d", len(calls), len(want))
	}
	for _, c := range tl.Steps {
		for _, tc := range c.Tools {
			if e := calls[tc.CallID]; tc.IsError != e.hasClass("error") || tc.Open != e.hasClass("open") {
				t.Errorf("call %s: class %q, is_error %v open %v", tc.CallID, e.attrs["class"], tc.IsError, tc.Open)
			}
		}
	}
	long := 0
	for _, p := range tl.Pauses {
		compressed, ok := pauses[p.CallID]
		if !ok {
			t.Errorf("the pause of %s is not drawn", p.CallID)
		}
		// A pause longer than a fifth of the turn is drawn compressed.
		if want := p.EndMs-p.StartMs > tl.EndMs/5; compressed != want {
			t.Errorf("the pause of %s: compressed %v, want %v", p.CallID, compressed, want)
		}
		if compressed {
			long++
		}
	}
	if breaks != long {
		t.Errorf("%d breaks on the axis, want %d", breaks, long)
	}
	if tl.Finished != nil && (finish == nil || finish.attrs["data-stop-reason"] != string(tl.Finished.StopReason)) {
		t.Errorf("the stop is not marked: %v", finish)
	}
	if (tl.Sentinel != nil) != (sentinel != nil) || (tl.Summary != nil) != (summary != nil) {
		t.Errorf("sentinel drawn %v (want %v), summary drawn %v (want %v)", sentinel != nil, tl.Sentinel != nil,
			summary != nil, tl.Summary != nil)
	}
}

// checkScreenshot decodes the PNG, checks its size and that it shows the
// chart: a model bar is a long run of its colour, which nothing else on the
// page has (the legend's swatch is a few pixels wide).
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != screenshotW || b.Dy() != screenshotH {
		t.Fatalf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), screenshotW, screenshotH)
	}
	if run := longestRun(img, color.RGBA{0x3d, 0x6f, 0xd9, 0xff}); run < 200 {
		t.Fatalf("the screenshot shows no model bar: the longest run of its colour is %d pixels", run)
	}
}

// longestRun is the longest horizontal run of pixels close to c.
func longestRun(img image.Image, c color.RGBA) int {
	best := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		run := 0
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r>>8, c.R) && near(g>>8, c.G) && near(bl>>8, c.B) {
				run++
				best = max(best, run)
			} else {
				run = 0
			}
		}
	}
	return best
}

func near(v uint32, c uint8) bool {
	d := int(v) - int(c)
	return d > -8 && d < 8
}

// TestWorkflowTimelineInChromium renders the page of a workflow run on the
// embedded server in headless Chromium and checks, in the DOM the page's
// script built, that each task is a band holding exactly its turn's steps
// and tool calls, that the workflow's events, the gate's waits and the stop
// are drawn, and that a link to a task or to one of its steps zooms to it.
func TestWorkflowTimelineInChromium(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	_, log, turns := runGatedWorkflow(t, e)
	wt, err := timeline.BuildWorkflow(log, turns)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "workflow.html")
	if err := timeline.WriteWorkflowFile(page, wt, timeline.WorkflowLogs{Workflow: log, Turns: turns}); err != nil {
		t.Fatal(err)
	}
	_, els := dumpDOM(t, bin, page)
	var root, finish *element
	scripts, marks, waits := 0, 0, 0
	// The elements of each band, in document order: a band runs from its
	// start tag to the next band's, or to the row of marks after the last.
	bands := map[string][]element{}
	band := ""
	for i, el := range els {
		switch {
		case el.attrs["id"] == "timeline":
			root = &els[i]
		case el.tag == "script":
			scripts++
		case el.hasClass("task-band"):
			band = el.attrs["data-task"]
			if el.attrs["id"] != "task-"+band {
				t.Errorf("band %s has id %q", band, el.attrs["id"])
			}
			continue
		case el.hasClass("marks") && el.hasClass("row"):
			band = ""
		case el.hasClass("wf-mark"):
			marks++
		case el.hasClass("gate-wait"):
			waits++
		case el.hasClass("finish-marker"):
			finish = &els[i]
		}
		if band != "" {
			bands[band] = append(bands[band], el)
		}
	}
	if root == nil || root.attrs["data-rendered"] != "true" || root.attrs["data-tasks"] != "3" ||
		root.attrs["data-steps"] != fmt.Sprint(wt.Steps()) {
		t.Fatalf("the page's script did not draw the workflow: %v", root)
	}
	if scripts != 3 {
		t.Errorf("%d script elements in the DOM, want 3", scripts)
	}
	if len(bands) != 3 {
		t.Fatalf("%d bands drawn, want 3", len(bands))
	}
	for _, k := range wt.Tasks {
		n := fmt.Sprint(k.Task)
		steps, calls := stepsAndCalls(turns[k.TurnID])
		rows, models, bars := map[string]bool{}, map[string]bool{}, 0
		for _, el := range bands[n] {
			if task, ok := el.attrs["data-task"]; ok && task != n {
				t.Errorf("band %s holds an element of task %s: %v", n, task, el.attrs)
			}
			switch {
			case el.hasClass("task-bar"):
				bars++
				if !strings.Contains(el.attrs["style"], "left:") || !strings.Contains(el.attrs["style"], "width:") {
					t.Errorf("task %s's bar is not placed on the axis: %q", n, el.attrs["style"])
				}
			case el.hasClass("step") && el.hasClass("row"):
				rows[el.attrs["data-step"]] = true
				if el.attrs["id"] != "task-"+n+"-step-"+el.attrs["data-step"] {
					t.Errorf("task %s: step row id %q", n, el.attrs["id"])
				}
			case el.hasClass("model-bar"):
				models[el.attrs["data-step"]] = true
			case el.hasClass("tool-bar"):
				id := el.attrs["data-call-id"]
				if step, ok := calls[id]; !ok || el.attrs["data-step"] != fmt.Sprint(step) {
					t.Errorf("band %s draws call %s in step %s; its turn has it in step %d (%v)", n, id, el.attrs["data-step"], step, ok)
				}
				delete(calls, id)
			}
		}
		if bars != 1 {
			t.Errorf("band %s: %d task bars", n, bars)
		}
		if len(rows) != len(steps) || len(models) != len(steps) {
			t.Errorf("band %s: %d step rows and %d model bars, its turn has %d steps", n, len(rows), len(models), len(steps))
		}
		for _, s := range steps {
			if !rows[fmt.Sprint(s)] {
				t.Errorf("band %s lacks step %d", n, s)
			}
		}
		if len(calls) > 0 {
			t.Errorf("band %s lacks the calls %v", n, calls)
		}
	}
	if marks != len(log) || waits != len(wt.Waits) || waits != 2 {
		t.Errorf("%d workflow marks for %d events, %d gate waits drawn for %d", marks, len(log), waits, len(wt.Waits))
	}
	if finish == nil || finish.attrs["data-stop-reason"] != string(events.StopCompleted) {
		t.Errorf("the stop is not marked: %v", finish)
	}
	// A link to a task or to a step of it opens zoomed to it.
	for frag, want := range map[string]string{"task-2": "showing task 2:", "task-2-step-1": "showing task 2 step 1:"} {
		if dom, _ := dumpDOM(t, bin, page+"#"+frag); !strings.Contains(dom, `<span id="zoom-note">`+want) {
			t.Errorf("#%s did not zoom: %s", frag, tail(regexp.MustCompile(`<span id="zoom-note">[^<]*`).FindString(dom), 200))
		}
	}
}

// TestSubagentTimelineInChromium renders the page of make demo-subagents'
// turn (examples/subagents: a Lead whose calls run a Researcher and a
// Coder) in headless Chromium and checks, in the DOM the page's script
// built, that each child is a band right under the step of its call,
// linked to the call, holding exactly the child's steps and calls, and
// that a link to a child's call opens its details.
func TestSubagentTimelineInChromium(t *testing.T) {
	bin := chromium(t)
	e, id, log, children := runSubagentsExample(t)
	page := filepath.Join(t.TempDir(), "lead.html")
	e.mustRun(ExitOK, "replay", "--html", page, id)
	_, els := dumpDOM(t, bin, page)
	_, parentCalls := stepsAndCalls(log)

	// The elements of each child's band, in document order: a band runs
	// from its start tag to the next step row of the parent, the next band
	// or the row of marks.
	bands := map[string][]element{}
	band, prevStep := "", ""
	var subBars []element
	for _, el := range els {
		switch {
		case el.hasClass("child-band"):
			band = el.attrs["data-turn"]
			if el.attrs["id"] != "child-"+band || el.attrs["data-parent-turn"] != id || el.attrs["data-depth"] != "1" {
				t.Errorf("band %s: %v", band, el.attrs)
			}
			// Right under the step that made its call.
			if step, ok := parentCalls[el.attrs["data-call-id"]]; !ok || fmt.Sprint(step) != prevStep || el.attrs["data-step"] != prevStep {
				t.Errorf("band %s for call %s follows step %s, the call is in step %d (%v)", band, el.attrs["data-call-id"], prevStep, step, ok)
			}
			continue
		case el.hasClass("step") && el.hasClass("row") && el.attrs["data-turn"] == "":
			band, prevStep = "", el.attrs["data-step"]
		case el.hasClass("marks") && el.hasClass("row"):
			band = ""
		case el.hasClass("subagent-bar"):
			subBars = append(subBars, el)
		}
		if band != "" {
			bands[band] = append(bands[band], el)
		}
	}
	if len(bands) != 2 || len(subBars) != 2 {
		t.Fatalf("%d child bands and %d subagent call bars drawn, want 2 and 2", len(bands), len(subBars))
	}
	for _, b := range subBars {
		if _, ok := children[b.attrs["data-child-turn"]]; !ok {
			t.Errorf("the call bar %s names child %q", b.attrs["id"], b.attrs["data-child-turn"])
		}
	}
	for child, clog := range children {
		steps, calls := stepsAndCalls(clog)
		rows, heads := map[string]bool{}, 0
		for _, el := range bands[child] {
			switch {
			case el.hasClass("child-bar"):
				heads++
				if !strings.Contains(el.attrs["style"], "left:") || !strings.Contains(el.attrs["style"], "width:") {
					t.Errorf("child %s's bar is not placed on the axis: %q", child, el.attrs["style"])
				}
			case el.hasClass("step") && el.hasClass("row"):
				rows[el.attrs["data-step"]] = true
				if el.attrs["data-turn"] != child || el.attrs["id"] != "child-"+child+"-step-"+el.attrs["data-step"] {
					t.Errorf("child %s: step row %v", child, el.attrs)
				}
			case el.hasClass("tool-bar"):
				cid := el.attrs["data-call-id"]
				if step, ok := calls[cid]; !ok || el.attrs["data-step"] != fmt.Sprint(step) || el.attrs["id"] != "child-"+child+"-call-"+cid {
					t.Errorf("band %s draws call %v; its turn has it in step %d (%v)", child, el.attrs, step, ok)
				}
				delete(calls, cid)
			}
		}
		if heads != 1 || len(rows) != len(steps) || len(calls) > 0 {
			t.Errorf("band %s: %d head bars, %d step rows for %d steps, calls not drawn %v", child, heads, len(rows), len(steps), calls)
		}
	}

	// A link to a child's call opens with its details shown.
	for child, clog := range children {
		_, calls := stepsAndCalls(clog)
		for cid := range calls {
			dom, _ := dumpDOM(t, bin, page+"#child-"+child+"-call-"+cid)
			// The tooltip's own tag says whether it is hidden: an output may
			// say "hidden" too.
			tip := regexp.MustCompile(`(?s)(<div id="tooltip"[^>]*>)(.*?)</div>\s*<script`).FindStringSubmatch(dom)
			if tip == nil || strings.Contains(tip[1], " hidden") || !strings.Contains(tip[2], "<dd>"+cid+"</dd>") {
				t.Errorf("no details shown for the child's call %s: %v", cid, tip)
			}
		}
	}
}
