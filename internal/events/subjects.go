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

// ResultSubject is where tool results for a turn go.
func ResultSubject(turn string) string { return "jetloop.inbox.result." + turn }

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
