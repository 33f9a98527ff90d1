package events

import (
	"bytes"
	"errors"
	"fmt"
)

// HeaderEvents, on a message of the events stream, counts the events it
// stores: a decision's events, stored as one message (docs/protocol.md,
// "Reading a log: both layouts"). A message without it stores one event.
const HeaderEvents = "Jetloop-Events"

// Under sync_interval: always the server fsyncs every stored message on its
// own, so a decision's events cost one fsync each when stored one per
// message. Stored as one message — a JSON array of their envelopes, in
// order — they cost one fsync, and are written all or nothing.

// AppendGroup appends the encoding of a decision's events as one message
// to buf: a JSON array of their envelopes, each encoded as AppendEnvelope
// encodes it, so encoding/json reads it as a []Envelope.
func AppendGroup(buf []byte, evs []Envelope) ([]byte, error) {
	buf = append(buf, '[')
	for i, e := range evs {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = AppendEnvelope(buf, e); err != nil {
			return buf, err
		}
	}
	return append(buf, ']'), nil
}

// ErrBadGroup is a stored message of the events stream that is neither an
// event (a JSON object) nor a non-empty JSON array of them.
var ErrBadGroup = errors.New("events: a message is neither an event nor an array of events")

// Split returns the encoded events of one stored message of the events
// stream, in order, whichever layout it has: the message's data when it is
// one event (a JSON object), each element when it stores a decision's
// events (a JSON array). The elements share data. It checks the shape, not
// the events: a caller decodes them. The body alone tells the layouts
// apart; HeaderEvents is there for readers that want a count without
// parsing.
func Split(data []byte) ([][]byte, error) {
	body := bytes.TrimLeft(data, " \t\r\n")
	if len(body) == 0 || body[0] != '[' {
		return [][]byte{data}, nil
	}
	var out [][]byte
	if !EachElement(body, func(v []byte) bool {
		if len(v) == 0 || v[0] != '{' {
			return false
		}
		out = append(out, v)
		return true
	}) || len(out) == 0 {
		return nil, ErrBadGroup
	}
	return out, nil
}

// Each calls fn with each event of one stored message of the events stream
// (see Split), decoded with DecodeEnvelope, and stops at fn's first error.
func Each(data []byte, fn func(Envelope) error) error {
	parts, err := Split(data)
	if err != nil {
		return err
	}
	for i, p := range parts {
		var e Envelope
		if err := DecodeEnvelope(p, &e); err != nil {
			if len(parts) > 1 {
				return fmt.Errorf("event %d of %d: %w", i+1, len(parts), err)
			}
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// LastOf decodes the last event of one stored message of the events stream.
func LastOf(data []byte) (Envelope, error) {
	parts, err := Split(data)
	if err != nil {
		return Envelope{}, err
	}
	var e Envelope
	err = DecodeEnvelope(parts[len(parts)-1], &e)
	return e, err
}

// FirstOf decodes the first event of one stored message of the events
// stream.
func FirstOf(data []byte) (Envelope, error) {
	parts, err := Split(data)
	if err != nil {
		return Envelope{}, err
	}
	var e Envelope
	err = DecodeEnvelope(parts[0], &e)
	return e, err
}
