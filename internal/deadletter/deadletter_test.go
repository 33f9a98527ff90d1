package deadletter

import (
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// letter is a dead letter of kind, first sent to subject (none when empty),
// with the extra headers hdr.
func letter(kind, subject, data string, hdr ...string) *jetstream.RawStreamMsg {
	m := &jetstream.RawStreamMsg{Subject: events.DeadSubject(kind), Sequence: 7, Header: nats.Header{}, Data: []byte(data),
		Time: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	if subject != "" {
		m.Header.Set(headerSubject, subject)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	return m
}

// A letter is re-sent only as what a client may send, only to the inbox
// subject it was taken from, and whole.
func TestRetryTarget(t *testing.T) {
	for _, c := range []struct {
		name    string
		m       *jetstream.RawStreamMsg
		fixed   bool
		subject string
		wantErr string
	}{
		{"a submission", letter("submit", events.SubjectSubmit, `{}`), false, events.SubjectSubmit, ""},
		{"a workflow", letter("workflow", events.SubjectWorkflow, `{}`), false, events.SubjectWorkflow, ""},
		{"a control", letter("control", events.ControlSubject("t1"), `{}`), false, events.ControlSubject("t1"), ""},
		{"a tool worker's", letter("job", events.ControlSubject("t1"), `{}`), false, "", "tool worker's"},
		{"a model answer", letter("model", "jetloop.inbox.model", `{}`), false, "", "only what a client may send"},
		{"no subject", letter("submit", "", `{}`), false, "", "does not say where"},
		{"another kind's subject", letter("submit", events.ControlSubject("t1"), `{}`), false, "", "was not taken from"},
		{"a control of no turn", letter("control", "jetloop.inbox.control.a b", `{}`), false, "", "was not taken from"},
		{"cut, not fixed", letter("submit", events.SubjectSubmit, `{`, "Jetloop-Truncated", "2000000"), false, "", "--file"},
		{"cut, fixed", letter("submit", events.SubjectSubmit, `{`, "Jetloop-Truncated", "2000000"), true, events.SubjectSubmit, ""},
	} {
		subject, _, err := retryTarget(c.m, c.fixed)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.wantErr)
		case subject != c.subject:
			t.Errorf("%s: re-sent to %q, want %q", c.name, subject, c.subject)
		}
	}
}

// A letter names its turn from its payload, or else from the control
// subject it was taken from.
func TestOf(t *testing.T) {
	l := Of(letter("submit", events.SubjectSubmit, `{"turn_id":"t1"}`, events.HeaderError, "unknown agent"))
	want := Letter{Seq: 7, Time: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC), Subject: events.SubjectSubmit, Kind: "submit",
		Turn: "t1", Reason: "unknown agent"}
	if l != want {
		t.Errorf("a submission: %+v, want %+v", l, want)
	}
	if l := Of(letter("control", events.ControlSubject("t2"), `not json`)); l.Turn != "t2" || l.Kind != "control" {
		t.Errorf("a control: %+v", l)
	}
}
