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
// The tools and the script, the same in every job of a turn, are kept
// encoded too.
type conversation struct {
	history *events.Message // the first message of the History it was built on
	msgs    [][]byte        // JSON of the conversation's first len(msgs) messages
	tools   encoded[events.ToolSpec]
	script  encoded[byte]
}

// encoded is the JSON of a slice, known by the slice's first element and
// length: the turn's state hands the same slice to each job.
type encoded[T any] struct {
	first *T
	n     int
	json  []byte
}

// get returns v's JSON, encoding it unless it is the slice last encoded.
func (e *encoded[T]) get(v []T, marshal func() ([]byte, error)) ([]byte, error) {
	if len(v) > 0 && e.first == &v[0] && e.n == len(v) {
		return e.json, nil
	}
	data, err := marshal()
	if err != nil {
		return nil, err
	}
	*e = encoded[T]{n: len(v), json: data}
	if len(v) > 0 {
		e.first = &v[0]
	}
	return data, nil
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
	tools, err := c.tools.get(job.Tools, func() ([]byte, error) { return json.Marshal(job.Tools) })
	if err != nil {
		return nil, err
	}
	script, err := c.script.get(job.Script, func() ([]byte, error) { return json.Marshal(job.Script) })
	if err != nil {
		return nil, err
	}
	// Messages, tools and script come in this order in a job's JSON; the
	// head is the job without them, and they are spliced in.
	job.Messages, job.Tools, job.Script = nil, nil, nil
	head, err := json.Marshal(&job)
	if err != nil {
		return nil, err
	}
	at := bytes.Index(head, messagesNull)
	if at < 0 {
		return nil, fmt.Errorf("runtime: model job %s: no messages key", j.ID)
	}
	size := len(head) + len(c.msgs) + len(tools) + len(script) + len(`,"tools":,"script":`)
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
	// omitempty: json.Marshal leaves out empty tools and script.
	if len(j.Model.Tools) > 0 {
		out = append(append(out, `,"tools":`...), tools...)
	}
	if len(j.Model.Script) > 0 {
		out = append(append(out, `,"script":`...), script...)
	}
	return append(out, head[at+len(messagesNull):]...), nil
}
