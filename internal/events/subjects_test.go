package events

import "testing"

// An answer's subject names the tool or hook it answers for, and only an
// answer's may: every other kind with a name is no kind of the protocol.
func TestSplitKind(t *testing.T) {
	for _, tc := range []struct {
		subject  string
		kind, by string
		ok       bool
	}{
		{ToolResultSubject("read_file", "t1"), "result", "read_file", true},
		{HookAnswerSubjectOf("cost-guard", "wf1"), "hook", "cost-guard", true},
		{ResultSubject("t1"), "result", "", true},
		{ControlSubject("t1"), "control", "", true},
		{"jetloop.inbox.control@x.t1", "control@x", "", false},
		{"jetloop.inbox.result@.t1", "result@", "", false},
		{"jetloop.inbox.result@a@b.t1", "result@a@b", "", false},
	} {
		kind, _, found := InboxKind(tc.subject)
		if !found {
			t.Fatalf("%s: not an inbox subject", tc.subject)
		}
		base, by, ok := SplitKind(kind)
		if base != tc.kind || by != tc.by || ok != tc.ok {
			t.Errorf("%s: SplitKind = %q %q %v, want %q %q %v", tc.subject, base, by, ok, tc.kind, tc.by, tc.ok)
		}
	}
}

// ParseInbox names every input by its subject, and calls anything else
// unknown rather than guess.
func TestParseInbox(t *testing.T) {
	for _, tc := range []struct {
		subject string
		kind    Input
		id, by  string
	}{
		{SubjectSubmit, InputSubmit, "", ""},
		{"jetloop.inbox.workflow", InputWorkflow, "", ""},
		{ControlSubject("t1"), InputControl, "t1", ""},
		{ResultSubject("t1"), InputResult, "t1", ""},
		{ToolResultSubject("echo", "t1"), InputResult, "t1", "echo"},
		{ModelResultSubject("t1"), InputModel, "t1", ""},
		{TimerSubject("t1"), InputTimer, "t1", ""},
		{TaskSubject("wf"), InputTask, "wf", ""},
		{HookAnswerSubjectOf("audit", "wf"), InputHook, "wf", "audit"},
		{"jetloop.inbox.control@x.t1", InputUnknown, "", ""},
		{"jetloop.inbox.nudge.t1", InputUnknown, "", ""},
		{"jetloop.inbox.control.t1.extra", InputUnknown, "", ""},
		{"jetloop.events.s.t1", InputUnknown, "", ""},
	} {
		kind, id, by := ParseInbox(tc.subject)
		if kind != tc.kind || id != tc.id || by != tc.by {
			t.Errorf("%s: ParseInbox = %q %q %q, want %q %q %q", tc.subject, kind, id, by, tc.kind, tc.id, tc.by)
		}
		if kind.Submission() != (tc.kind == InputSubmit || tc.kind == InputWorkflow) {
			t.Errorf("%s: Submission() = %v", tc.subject, kind.Submission())
		}
	}
}
