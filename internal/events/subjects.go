package events

import (
	"strings"
)

// Stream, bucket and subject names with the default prefix.
const (
	StreamInbox  = "JETLOOP_INBOX"
	StreamJobs   = "JETLOOP_JOBS"
	StreamEvents = "JETLOOP_EVENTS"
	StreamDead   = "JETLOOP_DEAD"
	BucketTools  = "JETLOOP_TOOLS"

	SubjectSubmit = "jetloop.inbox.submit"
	SubjectModel  = "jetloop.jobs.model"

	// HeaderType repeats an event's type; HeaderError carries a dead
	// letter's reason.
	HeaderType  = "Jetloop-Type"
	HeaderError = "Jetloop-Error"
)

// ValidID reports whether id can be a turn, session or call id: such ids
// appear in subjects. It matches the schemas' id pattern,
// ^[A-Za-z0-9_-]{1,64}$, without a regexp: it runs on every input.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// EventsSubject is the subject of a turn's log.
func EventsSubject(session, turn string) string {
	return "jetloop.events." + session + "." + turn
}

// TurnEventsFilter matches a turn's log without knowing its session.
func TurnEventsFilter(turn string) string { return "jetloop.events.*." + turn }

// SessionEventsFilter matches the logs of every turn of a session.
func SessionEventsFilter(session string) string { return "jetloop.events." + session + ".*" }

// ControlSubject is where control messages for a turn go.
func ControlSubject(turn string) string { return "jetloop.inbox.control." + turn }

// ResultSubject is where the orchestrators tell a turn of a result they
// hold (a subagent's end); no worker deployment is granted it.
func ResultSubject(turn string) string { return "jetloop.inbox.result." + turn }

// ToolResultSubject is where a worker answers a call of tool for turn:
// jetloop.inbox.result@<tool>.<turn_id>. The tool is in the subject so that
// an account is granted the answers of the tools it serves and no others
// (docs/accounts.md); a result on it is taken only for that tool.
func ToolResultSubject(tool, turn string) string {
	return "jetloop.inbox.result" + answerMark + tool + "." + turn
}

// DirectResultSubject is where a worker hands a result of tool for turn to
// the orchestrator that owns the turn, as a request:
// jetloop.direct.result@<tool>.<turn_id>. No stream stores it: the owner
// appends the result's decision, then answers (an empty reply: applied;
// one with HeaderError: not applied), and a worker that hears no answer
// publishes the result on ToolResultSubject as before. The tool is in the
// subject for the reason it is in ToolResultSubject.
func DirectResultSubject(tool, turn string) string {
	return DirectPrefix + "result" + answerMark + tool + "." + turn
}

// DirectPrefix begins the subjects of requests to a turn's owner.
const DirectPrefix = "jetloop.direct."

// ParseDirect reads a direct result's subject: the tool it answers and the
// turn; ok is false for any other subject.
func ParseDirect(subject string) (tool, turn string, ok bool) {
	rest, found := strings.CutPrefix(subject, DirectPrefix)
	if !found {
		return "", "", false
	}
	kind, turn, found := strings.Cut(rest, ".")
	if !found || strings.Contains(turn, ".") || !ValidID(turn) {
		return "", "", false
	}
	base, by, ok := SplitKind(kind)
	if !ok || base != "result" || by == "" {
		return "", "", false
	}
	return by, turn, true
}

// answerMark joins an answer's kind and the tool or hook it answers for.
const answerMark = "@"

// SplitKind splits an inbox kind into its kind and the tool or hook whose
// answers it carries: "result@echo" is ("result", "echo"), "result" is
// ("result", ""). by is "" for every other kind, and ok false for a kind
// that names a tool or hook but is no answer, or names an invalid one.
func SplitKind(kind string) (base, by string, ok bool) {
	base, by, found := strings.Cut(kind, answerMark)
	if !found {
		return kind, "", true
	}
	if (base != "result" && base != "hook") || !ValidName(by) {
		return kind, "", false
	}
	return base, by, true
}

// ValidName reports whether s can be a tool's or hook's name in a subject:
// one token of letters, digits, '_' and '-'.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ModelResultSubject is where model answers for a turn go.
func ModelResultSubject(turn string) string { return "jetloop.inbox.model." + turn }

// TimerSubject is where a turn's deadlines are reported.
func TimerSubject(turn string) string { return "jetloop.inbox.timer." + turn }

// ToolSubject is the jobs subject of a tool.
func ToolSubject(tool string) string { return "jetloop.jobs.tool." + tool }

// ToolConsumer is the durable consumer every worker of a tool shares.
func ToolConsumer(tool string) string { return "tool_" + tool }

// DeltaSubject carries a turn's streamed model text.
func DeltaSubject(turn string) string { return "jetloop.stream." + turn }

// CancelSubject tells every process to stop work for a turn.
func CancelSubject(turn string) string { return "jetloop.cancel." + turn }

// DeadSubject is where a dead letter of a kind ("submit", "control",
// "result", "job") goes.
func DeadSubject(kind string) string { return "jetloop.dead." + kind }

// InboxKind splits an inbox subject into its kind ("submit", "workflow",
// "control", "result", "model", "timer", "task", "hook") and turn or workflow id (""
// for the two submissions).
func InboxKind(subject string) (kind, turn string, ok bool) {
	rest, found := strings.CutPrefix(subject, "jetloop.inbox.")
	if !found {
		return "", "", false
	}
	if rest == "submit" || rest == "workflow" {
		return rest, "", true
	}
	kind, turn, found = strings.Cut(rest, ".")
	if !found || strings.Contains(turn, ".") {
		return "", "", false
	}
	return kind, turn, true
}

// Input is the kind of an inbox message: which input of a turn or workflow
// it carries.
type Input string

// Inputs, by their subjects' kind token (jetloop.inbox.<kind>[.<id>]).
const (
	InputSubmit   Input = "submit"
	InputWorkflow Input = "workflow"
	InputControl  Input = "control"
	InputResult   Input = "result"
	InputModel    Input = "model"
	InputTimer    Input = "timer"
	InputTask     Input = "task"
	InputHook     Input = "hook"
	// InputUnknown is a subject that names no input.
	InputUnknown Input = "unknown"
)

// Submission reports whether the input starts a turn or a workflow: its
// subject names no id.
func (in Input) Submission() bool { return in == InputSubmit || in == InputWorkflow }

// ParseInbox reads an inbox subject: its kind of input, the turn or
// workflow it is for ("" for a submission), and the tool or hook an
// answer's subject is bound to ("" on the unbound subjects). A subject
// that names no known kind, or has extra tokens, is InputUnknown.
func ParseInbox(subject string) (kind Input, id, by string) {
	k, id, ok := InboxKind(subject)
	if ok {
		k, by, ok = SplitKind(k)
	}
	if !ok {
		return InputUnknown, "", ""
	}
	switch in := Input(k); in {
	case InputSubmit, InputWorkflow, InputControl, InputResult, InputModel, InputTimer, InputTask, InputHook:
		return in, id, by
	}
	return InputUnknown, "", ""
}
