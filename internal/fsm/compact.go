package fsm

import (
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
)

// CompactionNote is the user message that stands where Compact left
// messages out, with their number, so the model knows the conversation has a
// gap rather than taking a later tool result as the answer to the first
// question.
const CompactionNote = "[%d earlier messages were compacted away]"

// Compact bounds a conversation (a session's history followed by the turn's
// own messages, as a model call sends them) to its first user message, the
// turn's own input, and its last keep steps. turn is the index in msgs where
// the turn's own messages begin (the history's length). It returns the
// messages to send and how many of msgs it left out. A keep below 1 leaves
// the conversation whole; so does a conversation with no more than keep
// steps. The result never shares its backing array with msgs.
//
// Compact reads the conversation in three parts:
//
//   - the head: every message up to and including the first user message.
//     It is always kept. A conversation without a user message has none.
//   - the steps: after the head, a step begins at each assistant message and
//     runs to the next step. It holds the assistant message with its tool
//     calls, the results of those calls (tool messages always follow the
//     call that asked for them), and, in front of it, the user messages that
//     directly precede it: a later turn's input belongs to the step it
//     prompted. An assistant message without tool calls (a turn's final
//     answer, a sentinel's summary) is a step of its own. Earlier turns'
//     messages are steps by the same rule, so a step of the history and a
//     step of this turn count alike.
//   - the pending input: user messages after the last assistant message,
//     which the call is about to answer. They are always kept and are no
//     step.
//
// The last keep steps are kept whole and every earlier step is left out
// whole, so a tool call and its results are kept or dropped together and no
// tool result ever arrives without its call. When anything is left out, one
// user message, CompactionNote with the number left out, takes the dropped
// steps' place right after the head. The turn's input (the user messages at
// turn) is never left out, even when the step it opened is: a model that
// lost the question it is working on cannot finish the turn. It follows the
// note. A user message is valid there for every
// provider: it comes before a step's first message, never between a call and
// its results; it may follow the head's user message or precede a step's,
// but consecutive user messages occur without compaction too (a tool result,
// then a later turn's question), and the Anthropic Messages API combines
// consecutive same-role turns; and a conversation without a head still opens
// with a user message, as Anthropic requires.
func Compact(msgs []events.Message, keep, turn int) ([]events.Message, int) {
	head := 0
	for i, m := range msgs {
		if m.Role == events.RoleUser {
			head = i + 1
			break
		}
	}
	// starts holds the index of each step's first message. The pending
	// input needs no bookkeeping: it follows the last step's start, so it is
	// kept with the steps that are.
	var starts []int
	for i := head; i < len(msgs); i++ {
		if msgs[i].Role != events.RoleAssistant {
			continue
		}
		// The user messages right before it open its step.
		first := i
		for first > head && msgs[first-1].Role == events.RoleUser {
			first--
		}
		starts = append(starts, first)
	}
	if keep < 1 || len(starts) <= keep {
		return append(make([]events.Message, 0, len(msgs)), msgs...), 0
	}
	// Steps are contiguous from the first, so everything from the head to
	// the first kept step goes.
	from, to := starts[0], starts[len(starts)-keep]
	// The turn's input opens a step, so when that step goes, the input lies
	// wholly inside [from, to).
	input := msgs[:0]
	if turn >= from && turn < to {
		end := turn
		for end < to && msgs[end].Role == events.RoleUser {
			end++
		}
		input = msgs[turn:end]
	}
	dropped := to - from - len(input)
	out := make([]events.Message, 0, len(msgs)-dropped+1)
	out = append(out, msgs[:from]...)
	out = append(out, events.Message{Role: events.RoleUser, Content: fmt.Sprintf(CompactionNote, dropped)})
	out = append(out, input...)
	return append(out, msgs[to:]...), dropped
}
