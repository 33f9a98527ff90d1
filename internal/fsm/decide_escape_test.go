package fsm

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// html is text full of what HTML escaping would write six times as long.
const html = "<script>alert(1) && x > y</script>"

// The machine writes '<', '>' and '&' as they are, so a tool output full of
// them keeps its size in the event; and a log written before, with them
// escaped, folds and verifies the same.
func TestDecideKeepsHTMLCharacters(t *testing.T) {
	s, log := feed(t, &clock{now: t0}, start(func(s *Start) {
		s.Digest = "d"
		s.Input = []events.Message{{Role: events.RoleUser, Content: html}}
		s.Metadata = map[string]string{"<k>": "&"}
	}), answer(1, html, echo("a", "&lt;")), result("a", html), answer(2, html))
	if s.Phase != PhaseDone {
		t.Fatalf("phase %s, want done", s.Phase)
	}
	kept := 0
	for _, e := range log {
		if bytes.Contains(e.Data, []byte(`\u00`)) {
			t.Errorf("%s: escaped data %s", e.Type, e.Data)
		}
		if bytes.Contains(e.Data, []byte(html)) {
			kept++
		}
	}
	if kept < 4 { // turn.started, both model.completed, tool.completed
		t.Errorf("%d events hold %q as it is, want at least 4", kept, html)
	}

	old := make([]events.Envelope, len(log))
	escaped := 0
	for i, e := range log {
		var b bytes.Buffer
		json.HTMLEscape(&b, e.Data)
		if !bytes.Equal(b.Bytes(), e.Data) {
			escaped++
		}
		e.Data = b.Bytes()
		old[i] = e
	}
	if escaped < 4 {
		t.Fatalf("only %d events changed by escaping", escaped)
	}
	n, err := Verify(log)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := Verify(old); err != nil || m != n {
		t.Fatalf("the escaped log: %d decisions (%v), want %d", m, err, n)
	}
	a, err := Fold(log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Fold(old)
	if err != nil {
		t.Fatal(err)
	}
	// Arguments are kept as they were written: compare them as JSON.
	ma, _ := json.Marshal(a.Messages)
	mb, _ := json.Marshal(b.Messages)
	if !bytes.Equal(ma, mb) || a.runSig != b.runSig || !reflect.DeepEqual(a.Metadata, b.Metadata) ||
		a.Finished == nil || b.Finished == nil || *a.Finished != *b.Finished || a.Finished.Output != html {
		t.Fatalf("folded differently:\n%+v\n%+v", a, b)
	}
}
