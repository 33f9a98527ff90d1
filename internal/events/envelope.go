package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// The envelope's fields are fixed, and its strings (ids, types) are plain
// ASCII, so it is read and written by hand: encoding/json scans an event
// twice (checkValid, then the decode) and reflects over every field, which
// made decoding an envelope cost more than folding it. Anything the fast
// paths do not expect (an escape, an unknown key, a number with a fraction)
// goes through encoding/json, so both accept and produce the same JSON.

// Marshal returns the JSON encoding of v as json.Marshal does, except that
// '<', '>' and '&' are written as they are, not as \u003c, \u003e and
// \u0026: events are JSON read by programs, never HTML, and escaping makes a
// tool output full of '<' six times its size, past the server's max payload.
// Both forms decode alike, so logs written either way read the same.
func Marshal(v any) ([]byte, error) {
	var out sink
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	// Encode ends every value with a newline that Marshal does not write.
	return out[:len(out)-1], nil
}

// sink keeps a copy of what an Encoder writes: one Write per Encode, of
// bytes the Encoder reuses afterwards.
type sink []byte

func (s *sink) Write(p []byte) (int, error) {
	*s = append(*s, p...)
	return len(p), nil
}

// AppendEnvelope appends e's JSON encoding to buf: the bytes Marshal gives
// for e, written by hand when its strings need no escape, as the machine's
// events' are.
func AppendEnvelope(buf []byte, e Envelope) ([]byte, error) {
	// time.Time's MarshalJSON refuses what RFC 3339 cannot write: a year
	// of other than four digits, a zone of 24 hours or more.
	if _, off := e.Time.Zone(); !plain(e.ID) || !plain(string(e.Type)) || !plain(e.TurnID) || !plain(e.SessionID) ||
		e.Time.Year() < 0 || e.Time.Year() > 9999 || off <= -24*3600 || off >= 24*3600 {
		data, err := Marshal(e)
		return append(buf, data...), err
	}
	buf = append(buf, `{"id":"`...)
	buf = append(buf, e.ID...)
	buf = append(buf, `","type":"`...)
	buf = append(buf, e.Type...)
	buf = append(buf, `","turn_id":"`...)
	buf = append(buf, e.TurnID...)
	buf = append(buf, `","session_id":"`...)
	buf = append(buf, e.SessionID...)
	buf = append(buf, `","seq":`...)
	buf = strconv.AppendInt(buf, int64(e.Seq), 10)
	buf = append(buf, `,"step":`...)
	buf = strconv.AppendInt(buf, int64(e.Step), 10)
	buf = append(buf, `,"time":"`...)
	buf = e.Time.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","data":`...)
	if e.Data == nil {
		buf = append(buf, "null"...)
	} else {
		// Compact checks and compacts the data as Marshal does with a
		// RawMessage, and leaves '<', '>' and '&' as they are, as Marshal.
		b := bytes.NewBuffer(buf)
		if err := json.Compact(b, e.Data); err != nil {
			return buf, &json.MarshalerError{Type: nil, Err: err}
		}
		buf = b.Bytes()
	}
	return append(buf, '}'), nil
}

// plain reports whether s is written in JSON as it is: printable ASCII that
// Marshal does not escape.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// DecodeEnvelope reads one encoded event into e, as json.Unmarshal into a
// zero Envelope does: the
// same envelopes accepted, the same fields set (Data is a copy, so data may be
// reused). The data is checked to be JSON but not decoded.
func DecodeEnvelope(data []byte, e *Envelope) error {
	if fastEnvelope(data, e) {
		return nil
	}
	*e = Envelope{}
	return json.Unmarshal(data, e)
}

// fastEnvelope decodes a plain envelope; false leaves the work (and the
// error, if any) to encoding/json.
func fastEnvelope(data []byte, e *Envelope) bool {
	d := reader{b: data}
	var out Envelope
	if !d.byte('{') {
		return false
	}
	if d.peek() == '}' {
		d.i++
	} else {
		for {
			key, ok := d.str()
			if !ok || !d.byte(':') {
				return false
			}
			switch key {
			case "id":
				ok = d.text(&out.ID)
			case "type":
				t := string(out.Type)
				ok = d.text(&t)
				out.Type = Type(t)
			case "turn_id":
				ok = d.text(&out.TurnID)
			case "session_id":
				ok = d.text(&out.SessionID)
			case "seq":
				ok = d.int(&out.Seq)
			case "step":
				ok = d.int(&out.Step)
			case "time":
				ok = d.time(&out.Time)
			case "data":
				out.Data, ok = d.raw()
			default:
				return false
			}
			if !ok {
				return false
			}
			d.space()
			if d.peek() == '}' {
				d.i++
				break
			}
			if !d.byte(',') {
				return false
			}
		}
	}
	d.space()
	if d.i != len(d.b) {
		return false
	}
	*e = out
	return true
}

// reader walks an encoded envelope.
type reader struct {
	b []byte
	i int
}

func (d *reader) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *reader) peek() byte {
	d.space()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// byte consumes c after any space.
func (d *reader) byte(c byte) bool {
	if d.peek() != c {
		return false
	}
	d.i++
	return true
}

// strBytes reads a string without escapes, of printable ASCII, and returns
// its bytes, which share the buffer.
func (d *reader) strBytes() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

func (d *reader) str() (string, bool) {
	b, ok := d.strBytes()
	return string(b), ok
}

// text reads a string value into s; null leaves s as it is (a key given
// twice, the second time null, keeps the first value), as json.Unmarshal
// does.
func (d *reader) text(s *string) bool {
	if d.null() {
		return true
	}
	v, ok := d.str()
	if ok {
		*s = v
	}
	return ok
}

func (d *reader) null() bool {
	if d.peek() == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")) {
		d.i += 4
		return true
	}
	return false
}

// int reads an integer without fraction or exponent into n; null leaves n
// as it is, as json.Unmarshal does.
func (d *reader) int(n *int) bool {
	if d.null() {
		return true
	}
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i-digits > 1) {
		return false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return false
	}
	v, err := strconv.Atoi(string(d.b[start:d.i]))
	if err != nil {
		return false
	}
	*n = v
	return true
}

// time reads a time the way time.Time's UnmarshalJSON does.
func (d *reader) time(t *time.Time) bool {
	if d.null() {
		return true
	}
	d.space()
	start := d.i
	if _, ok := d.strBytes(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}

// raw reads any JSON value and returns a copy of its bytes; the value is
// checked with json.Valid.
func (d *reader) raw() (json.RawMessage, bool) {
	d.space()
	start := d.i
	if !d.skip() {
		return nil, false
	}
	v := bytes.TrimRight(d.b[start:d.i], " \t\r\n")
	if !json.Valid(v) {
		return nil, false
	}
	return bytes.Clone(v), true
}

// skip moves past one value: strings are skipped with their escapes, and
// brackets counted; json.Valid judges the rest.
func (d *reader) skip() bool {
	depth := 0
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch c {
		case '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
			if d.i >= len(d.b) {
				return false
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return true // the end of the enclosing object
			}
			depth--
		case ',':
			if depth == 0 {
				return true
			}
		}
		d.i++
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return true
		}
	}
	return depth == 0
}

// EachField calls fn with each key of the JSON object in data and its value's
// bytes, which share data. Keys must be plain (no escapes), and values are
// delimited, not checked: a caller decodes the values it uses, which checks
// them. It returns false, having called fn for some fields or none, when data
// is not such an object or fn returns false.
func EachField(data []byte, fn func(key string, value []byte) bool) bool {
	d := reader{b: data}
	if !d.byte('{') {
		return false
	}
	if d.peek() == '}' {
		d.i++
	} else {
		for {
			key, ok := d.strBytes()
			if !ok || !d.byte(':') {
				return false
			}
			d.space()
			start := d.i
			if !d.skip() {
				return false
			}
			if !fn(string(key), bytes.TrimRight(d.b[start:d.i], " \t\r\n")) {
				return false
			}
			d.space()
			if d.peek() == '}' {
				d.i++
				break
			}
			if !d.byte(',') {
				return false
			}
		}
	}
	d.space()
	return d.i == len(d.b)
}

// EachElement calls fn with the bytes of each value of the JSON array in
// data, which share data. Values are delimited, not checked, as with
// EachField. It returns false, having called fn for some values or none,
// when data is not an array or fn returns false.
func EachElement(data []byte, fn func(value []byte) bool) bool {
	d := reader{b: data}
	if !d.byte('[') {
		return false
	}
	if d.peek() == ']' {
		d.i++
	} else {
		for {
			d.space()
			start := d.i
			if !d.skip() {
				return false
			}
			if !fn(bytes.TrimRight(d.b[start:d.i], " \t\r\n")) {
				return false
			}
			if d.peek() == ']' {
				d.i++
				break
			}
			if !d.byte(',') {
				return false
			}
		}
	}
	d.space()
	return d.i == len(d.b)
}
