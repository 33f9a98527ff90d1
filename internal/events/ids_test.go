package events

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every id the constructors make has the shape docs/protocol.md gives it:
// outside programs (a worker in another language, an auditor reading the
// streams) depend on the table, not on this package.
func TestIDsAsTheProtocolSaysThem(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 1234)
	for _, tc := range []struct {
		id, shape string
	}{
		{ToolJobID("t1", "c1"), "`tool:<turn_id>:<call_id>`"},
		{ResultID("t1", "c1"), "`result:<turn_id>:<call_id>`"},
		{ModelJobID("t1", 3), "`model:<turn_id>:<step>`"},
		{SummaryJobID("t1"), "`model:<turn_id>:summary`"},
		{SubagentID("t2"), "`subagent:<child_turn_id>`"},
		{ControlID("t1", "n1"), "`control:<turn_id>:<n or uuid>`"},
		{TaskStartID("t1"), "`task-start:<turn_id>`"},
		{TaskDoneID("t1"), "`task:<turn_id>`"},
		{HookJobID("wf", 2, "audit"), "`hook:<workflow_id>:<task>:<name>`"},
		{HookAnswerID("wf", 2, "audit"), "`hook-answer:<workflow_id>:<task>:<name>`"},
		{HookFinalJobID("wf", 2, "audit"), "`hook-final:<workflow_id>:<task>:<name>`"},
		{TimerID(Timer{TurnID: "t1", Kind: TimerCall, CallID: "c1", At: at}), "`timer:<turn_id>:<kind>[:<call_id>]:<unix nanoseconds>`"},
		{TimerID(Timer{TurnID: "t1", Kind: TimerWake, At: at}), "`timer:<turn_id>:<kind>[:<call_id>]:<unix nanoseconds>`"},
		{DeadID(StreamInbox, 7), "`dead:<stream>:<seq>`"},
		{RetryID(7), "`retry:JETLOOP_DEAD:<seq>`"},
	} {
		if !strings.Contains(string(doc), tc.shape) {
			t.Errorf("docs/protocol.md has no id %s", tc.shape)
			continue
		}
		if !shape(tc.shape).MatchString(tc.id) {
			t.Errorf("id %q does not have the shape %s", tc.id, tc.shape)
		}
	}
	if WorkflowAbortID("t1") != ControlID("t1", "workflow") {
		t.Errorf("a workflow's abort is a control message of its own id: %q", WorkflowAbortID("t1"))
	}
}

// shape turns a documented id into a pattern: each <placeholder> one
// token, [optional] parts optional, literals as they are.
func shape(doc string) *regexp.Regexp {
	s := regexp.QuoteMeta(strings.Trim(doc, "`"))
	s = strings.NewReplacer(`\[`, "(?:", `\]`, ")?").Replace(s)
	s = regexp.MustCompile(`<[^>]+>`).ReplaceAllString(s, `[^:]+`)
	return regexp.MustCompile("^" + s + "$")
}
