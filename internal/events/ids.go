package events

import "strconv"

// Message ids: the Nats-Msg-Id each message of the protocol is published
// under (docs/protocol.md, "Dedup ids"). JetStream keeps one message per
// id within its duplicate window, so an id says which publishes are the
// same message: a second publish of a job, a result or a notice after a
// crash is nothing.

// ToolJobID is the id of the job asking for call of turn.
func ToolJobID(turn, call string) string { return "tool:" + turn + ":" + call }

// ResultID is the id of the result of call of turn, whoever sends it (a
// worker, or an orchestrator telling a parent its child ended).
func ResultID(turn, call string) string { return "result:" + turn + ":" + call }

// ModelJobID is the id of the job asking for the model call of a turn's
// step; its answer has the same id.
func ModelJobID(turn string, step int) string { return "model:" + turn + ":" + strconv.Itoa(step) }

// SummaryJobID is the id of the model job that summarizes a turn's
// conversation for its compaction.
func SummaryJobID(turn string) string { return "model:" + turn + ":summary" }

// SubagentID is the id of the submission of a subagent's turn.
func SubagentID(child string) string { return "subagent:" + child }

// ControlID is the id of one control message to turn or workflow id:
// nonce is fresh for each message its sender means to send.
func ControlID(id, nonce string) string { return "control:" + id + ":" + nonce }

// WorkflowAbortID is the id of the abort a workflow sends its task's turn
// when it stops: one per turn.
func WorkflowAbortID(turn string) string { return ControlID(turn, "workflow") }

// TaskStartID is the id of the submission of a workflow task's turn.
func TaskStartID(turn string) string { return "task-start:" + turn }

// TaskDoneID is the id of the notice that a task's turn finished.
func TaskDoneID(turn string) string { return "task:" + turn }

// TimerID is the id of a deadline's message: one per deadline.
func TimerID(tm Timer) string {
	id := "timer:" + tm.TurnID + ":" + string(tm.Kind)
	if tm.CallID != "" {
		id += ":" + tm.CallID
	}
	return id + ":" + strconv.FormatInt(tm.At.UnixNano(), 10)
}

// DeadID is the id of the dead letter of the message at seq in stream.
func DeadID(stream string, seq uint64) string {
	return "dead:" + stream + ":" + strconv.FormatUint(seq, 10)
}

// RetryID is the id of dead letter seq sent again: once per letter.
func RetryID(seq uint64) string { return "retry:" + StreamDead + ":" + strconv.FormatUint(seq, 10) }
