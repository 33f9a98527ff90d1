package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
)

// readDoc reads a page of docs/ (the test runs in this directory).
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every schema in schemas/ is linked from the protocol page: a writer in
// another language finds each message's shape from there.
func TestProtocolNamesEverySchema(t *testing.T) {
	doc := readDoc(t, "protocol.md")
	files, err := filepath.Glob(filepath.Join("..", "schemas", "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas found: %v", err)
	}
	for _, f := range files {
		link := "(../schemas/" + filepath.Base(f) + ")"
		if !strings.Contains(doc, link) {
			t.Errorf("docs/protocol.md does not link %s", link)
		}
	}
}

// Every subject, stream, bucket, consumer and header the code defines is
// named on the protocol page, with the placeholders the page uses.
func TestProtocolNamesEverySubject(t *testing.T) {
	doc := readDoc(t, "protocol.md")
	names := []string{
		events.SubjectSubmit, events.SubjectWorkflow, events.SubjectModel,
		events.EventsSubject("<session_id>", "<turn_id>"),
		events.TurnEventsFilter("<turn_id>"), events.SessionEventsFilter("<session_id>"),
		events.ControlSubject("<turn_id>"), events.ControlSubject("<workflow_id>"),
		events.ResultSubject("<turn_id>"), events.ToolResultSubject("<tool_name>", "<turn_id>"),
		events.HookAnswerSubjectOf("<name>", "<workflow_id>"), events.ModelResultSubject("<turn_id>"),
		events.TimerSubject("<turn_id>"), events.TaskSubject("<workflow_id>"),
		events.ToolSubject("<tool_name>"), events.ToolConsumer("<tool_name>"),
		events.DeltaSubject("<turn_id>"), events.CancelSubject("<turn_id>"),
		events.DeadSubject("<kind>"),
		events.StreamInbox, events.StreamJobs, events.StreamEvents, events.StreamDead,
		events.BucketTools, bus.BucketWorkers, bus.BucketCheckpoints, bus.BucketOrchestrators,
		bus.BucketLive, bus.BucketBlobs,
		bus.InboxConsumer, bus.ModelConsumer,
		strings.TrimSuffix(bus.PartitionConsumer(0), "0") + "<p>",
		events.HeaderType, events.HeaderError, "Jetloop-Subject", "Jetloop-Truncated", "Jetloop-Events",
	}
	for _, kind := range []string{"submit", "workflow", "control", "result", "model", "timer", "task", "job", "unknown"} {
		names = append(names, "`"+kind+"`")
	}
	for _, n := range names {
		if !strings.Contains(doc, n) {
			t.Errorf("docs/protocol.md does not name %s", n)
		}
	}
}

// subjectLiteral is a subject or stream name written as a Go string
// literal: what a function or constant outside internal/events may define.
var subjectLiteral = regexp.MustCompile(`"((?:jetloop\.(?:inbox|jobs|events|dead|stream|cancel)\b[^"]*)|JETLOOP_[A-Z_]+)"`)

// notOnTheWire are names that look like the protocol's but are not in it.
var notOnTheWire = map[string]bool{
	// jetloop ui's permission probe: a publish that expects a stream
	// no server has, refused either way, so nothing is stored.
	"JETLOOP_UI_PROBE": true,
}

// No code outside the test files names a subject or stream that the page
// leaves out: a subject added in any package shows here.
func TestProtocolNamesEverySubjectLiteral(t *testing.T) {
	doc := readDoc(t, "protocol.md")
	missing := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range subjectLiteral.FindAllStringSubmatch(string(src), -1) {
			if notOnTheWire[m[1]] || strings.Contains(m[1], "{{") {
				continue // a transform's template is written out in the page's prose
			}
			if !strings.Contains(doc, m[1]) {
				missing[m[1]] = append(missing[m[1]], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(missing))
	for k := range missing {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("%s (in %v) is not named in docs/protocol.md", k, missing[k])
	}
}

// Nothing in the repository cites a file it does not ship.
func TestNoCitationOfMissingContract(t *testing.T) {
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".json", ".ts", ".txt", ".yaml", ".conf":
		default:
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), "CONTRACT.md") {
			t.Errorf("%s cites CONTRACT.md, which the repository does not ship: cite docs/protocol.md", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
