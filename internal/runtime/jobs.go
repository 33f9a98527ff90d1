package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// conversation keeps the JSON of a cached turn's conversation, message by
// message. A model job carries the whole conversation, so marshalling it
// afresh for every step costs O(n²) over a turn; a turn's messages only ever
// grow at the end (fsm.Evolve appends), so each is encoded once and a job's
// messages are spliced from the encoded ones.
type conversation struct {
	history *events.Message // the first message of the History it was built on
	msgs    [][]byte        // JSON of the conversation's first len(msgs) messages
}

// messagesNull is how a model job without messages encodes its messages:
// the fields before them are strings and numbers, so its first occurrence
// is the key, never text inside a value (where quotes are escaped).
var messagesNull = []byte(`"messages":null`)

// encodeJob encodes a job as json.Marshal does; c, when not nil, supplies and
// keeps the encoded messages of a turn's model jobs.
func encodeJob(c *conversation, st *fsm.State, j fsm.Job) ([]byte, error) {
	if j.Model == nil {
		return json.Marshal(j.Tool)
	}
	if c == nil || st.KeepSteps > 0 {
		// Compaction rewrites the conversation it sends: no stable prefix.
		return json.Marshal(j.Model)
	}
	var first *events.Message
	if len(st.History) > 0 {
		first = &st.History[0]
	}
	msgs := j.Model.Messages
	if c.history != first || len(c.msgs) > len(msgs) {
		*c = conversation{history: first}
	}
	for _, m := range msgs[len(c.msgs):] {
		data, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		c.msgs = append(c.msgs, data)
	}
	job := *j.Model
	job.Messages = nil
	head, err := json.Marshal(&job)
	if err != nil {
		return nil, err
	}
	at := bytes.Index(head, messagesNull)
	if at < 0 {
		return nil, fmt.Errorf("runtime: model job %s: no messages key", j.ID)
	}
	size := len(head) + len(c.msgs)
	for _, m := range c.msgs {
		size += len(m)
	}
	out := make([]byte, 0, size)
	out = append(out, head[:at+len(`"messages":`)]...)
	if msgs == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, '[')
		for i, m := range c.msgs {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, m...)
		}
		out = append(out, ']')
	}
	return append(out, head[at+len(messagesNull):]...), nil
}
