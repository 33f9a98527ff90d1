package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// envelopeSeeds are encoded events the hand-written codec must read exactly
// as encoding/json does: real logs, and envelopes off its fast path.
func envelopeSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{
		[]byte(`{"id":"e1","type":"step.started","turn_id":"t1","session_id":"s1","seq":2,"step":1,"time":"2026-01-02T03:04:05.123456789Z","data":{}}`),
		[]byte(` { "id" : "e1" , "type":"turn.finished", "seq": 3, "data" : {"a":[1,{"b":"}\"]"}]} , "step":0 } `),
		[]byte(`{"id":"e\u0031","type":"x","seq":1}`),
		[]byte(`{"ID":"e1","seq":1}`),
		[]byte(`{"id":"e1","seq":1.5}`),
		[]byte(`{"id":"e1","seq":01}`),
		[]byte(`{"id":"e1","seq":-4,"step":null,"time":null,"data":null}`),
		[]byte(`{"id":"e1","data":{"a":}}`),
		[]byte(`{"id":"e1","data":"x\"y"}`),
		[]byte(`{"id":"e1","data":12 }`),
		[]byte(`{"id":"e1","time":"2026-01-02T03:04:05+02:00"}`),
		[]byte(`{"id":"e1","time":"yesterday"}`),
		[]byte(`{"id":"e1"} x`),
		[]byte(`{"id":"e1",}`),
		[]byte(`{"id":"é"}`),
		[]byte(`{}`),
		[]byte(`null`),
		[]byte(`[]`),
		[]byte(`{"seq":99999999999999999999}`),
		[]byte(`{"id":"e1","type":"x","turn_id":"t","session_id":"s","seq":3,"step":2,"time":"2026-01-02T03:04:05Z","data":{},"id":null,"type":null,"turn_id":null,"session_id":null,"seq":null,"step":null,"time":null}`),
		[]byte(`{"id":"<a&b>","data":{"o":"<\u003c>"}}`),
	}
	seeds = append(seeds, logLines(t)...)
	if len(seeds) < 40 {
		t.Fatalf("only %d seeds: the golden logs were not found", len(seeds))
	}
	for _, name := range []string{"envelope.json", "event.turn.started.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	return seeds
}

// logLines are the events of the golden logs, one encoded event each, and
// each again as a log written before events kept '<', '>' and '&' had it.
func logLines(t testing.TB) [][]byte {
	files, _ := filepath.Glob("../cli/testdata/*.jsonl")
	var lines [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines = append(lines, bytes.Clone(sc.Bytes()))
			var esc bytes.Buffer
			json.HTMLEscape(&esc, sc.Bytes())
			if !bytes.Equal(esc.Bytes(), sc.Bytes()) {
				lines = append(lines, esc.Bytes())
			}
		}
	}
	return lines
}

// encoded is what AppendEnvelope must write: encoding/json's bytes with
// '<', '>' and '&' as they are.
func encoded(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// sameAsJSON fails when DecodeEnvelope and json.Unmarshal disagree on data
// (DecodeEnvelope is documented to be json.Unmarshal, its fast path an
// implementation detail), and when AppendEnvelope encodes a decoded
// envelope other than encoding/json without HTML escaping.
func sameAsJSON(t *testing.T, data []byte) {
	t.Helper()
	if want, ok := sameDecoding(t, data); ok {
		sameEncoding(t, want)
	}
}

// sameDecoding fails when DecodeEnvelope and json.Unmarshal disagree on
// data, and returns what they read.
func sameDecoding(t *testing.T, data []byte) (Envelope, bool) {
	t.Helper()
	var want, got Envelope
	werr := json.Unmarshal(data, &want)
	// The input is overwritten after decoding: what DecodeEnvelope returns
	// must not share it.
	buf := bytes.Clone(data)
	gerr := DecodeEnvelope(buf, &got)
	for i := range buf {
		buf[i] = 'x'
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s: json.Unmarshal error %v, DecodeEnvelope error %v", data, werr, gerr)
	}
	if werr != nil {
		return want, false
	}
	if !reflect.DeepEqual(want, got) || !want.Time.Equal(got.Time) {
		t.Fatalf("%s:\n json.Unmarshal %#v\nDecodeEnvelope %#v", data, want, got)
	}
	return want, true
}

// sameEncoding fails when AppendEnvelope, onto a buffer that holds
// something already, writes other bytes than encoding/json without HTML
// escaping, or when what it writes does not decode to e again.
func sameEncoding(t *testing.T, e Envelope) {
	t.Helper()
	wb, werr := encoded(e)
	prefix := []byte("prefix")
	gb, gerr := AppendEnvelope(prefix, e)
	if (werr == nil) != (gerr == nil) || (werr == nil && !bytes.Equal(wb, gb[len(prefix):])) {
		t.Fatalf("encode %#v:\n encoding/json  %s (%v)\nAppendEnvelope %s (%v)", e, wb, werr, gb, gerr)
	}
	if !bytes.HasPrefix(gb, prefix) {
		t.Fatalf("AppendEnvelope overwrote the buffer: %q", gb)
	}
	if werr != nil {
		return
	}
	back, ok := sameDecoding(t, gb[len(prefix):])
	if !ok {
		t.Fatalf("%s does not decode", gb[len(prefix):])
	}
	if _, off := e.Time.Zone(); !utf8.ValidString(e.ID) || !utf8.ValidString(string(e.Type)) ||
		!utf8.ValidString(e.TurnID) || !utf8.ValidString(e.SessionID) || off%60 != 0 {
		// encoding/json writes U+FFFD for invalid bytes, and RFC 3339 has
		// no seconds of zone offset: such envelopes do not come back.
		return
	}
	var data bytes.Buffer
	if e.Data != nil {
		_ = json.Compact(&data, e.Data)
	} else {
		data.WriteString("null")
	}
	if back.ID != e.ID || back.Type != e.Type || back.TurnID != e.TurnID || back.SessionID != e.SessionID ||
		back.Seq != e.Seq || back.Step != e.Step || !back.Time.Equal(e.Time) || !bytes.Equal(back.Data, data.Bytes()) {
		t.Fatalf("%#v encodes as %s, which decodes as %#v", e, gb[len(prefix):], back)
	}
}

func TestEnvelopeCodecMatchesEncodingJSON(t *testing.T) {
	for _, s := range envelopeSeeds(t) {
		sameAsJSON(t, s)
	}
	// Strings that need escapes, and times of every precision, take the
	// slow path or format the same.
	for _, e := range []Envelope{
		{ID: "a<b", Type: StepStarted, Data: json.RawMessage(`{}`)},
		{ID: "x", TurnID: "t\"1", Time: time.Date(2026, 1, 2, 3, 4, 5, 120000000, time.UTC)},
		{ID: "x", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))},
		{ID: "x", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 24*3600))},
		{ID: "x", Time: time.Date(10000, 1, 2, 3, 4, 5, 0, time.UTC)},
		{ID: "x", Data: json.RawMessage(` { "a" : [ 1 , 2 ] } `)},
		{ID: "x", Data: json.RawMessage(`{"a":"<\u003c&\u2028 "}`)},
		{ID: "é", Data: json.RawMessage(`"<"`)},
	} {
		sameEncoding(t, e)
	}
	if _, err := AppendEnvelope(nil, Envelope{ID: "x", Data: json.RawMessage(`{`)}); err == nil {
		t.Error("invalid data encoded")
	}
}

// An event keeps '<', '>' and '&' as they are, so an output of them is not
// six times its size, and still reads back the same.
func TestEnvelopeKeepsHTMLCharacters(t *testing.T) {
	out := "<script>alert(1) && x > y</script>"
	data, err := Marshal(ToolCompletedData{CallID: "c1", Name: "read_file", Output: out, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []Envelope{
		{ID: "e1", Type: ToolCompleted, TurnID: "t1", SessionID: "s1", Seq: 5, Step: 1, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Data: data},
		{ID: "e<1>&", Type: ToolCompleted, TurnID: "t1", SessionID: "s1", Seq: 5, Step: 1, Data: data}, // off the fast path
	} {
		b, err := AppendEnvelope(nil, e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(out)) || bytes.Contains(b, []byte(`\u00`)) {
			t.Fatalf("%s: want %q as it is", b, out)
		}
		var back Envelope
		if err := DecodeEnvelope(b, &back); err != nil {
			t.Fatal(err)
		}
		var d ToolCompletedData
		if err := json.Unmarshal(back.Data, &d); err != nil || back.ID != e.ID || d.Output != out {
			t.Fatalf("%s read back as %#v, %#v (%v)", b, back, d, err)
		}
		if !ValidID(e.ID) {
			continue
		}
		if _, d, err := Decode(b); err != nil || d.(*ToolCompletedData).Output != out {
			t.Fatalf("%s: %#v %v", b, d, err)
		}
	}

	big := strings.Repeat("<", 200<<10)
	b, err := Marshal(ToolCompletedData{Output: big})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > len(big)+200 {
		t.Errorf("an output of %d bytes of '<' encodes in %d bytes", len(big), len(b))
	}
}

// Logs written before events kept '<', '>' and '&' as they are hold them as
// \u003c, \u003e and \u0026; they read the same.
func TestDecodeEnvelopeReadsEscapedLogs(t *testing.T) {
	plain := []byte(`{"id":"e1","type":"tool.completed","turn_id":"t1","session_id":"s1","seq":5,"step":1,"time":"2026-01-02T03:04:05Z","data":{"call_id":"c1","name":"echo","output":"<b> & </b>","is_error":false,"final":false,"duration_ms":0,"worker":"w","attempts":1}}`)
	var esc bytes.Buffer
	json.HTMLEscape(&esc, plain)
	if !bytes.Contains(esc.Bytes(), []byte(`\u003cb\u003e \u0026`)) {
		t.Fatalf("not escaped: %s", esc.Bytes())
	}
	var a, b Envelope
	if err := DecodeEnvelope(plain, &a); err != nil {
		t.Fatal(err)
	}
	if err := DecodeEnvelope(esc.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	_, da, errA := Decode(plain)
	_, db, errB := Decode(esc.Bytes())
	if errA != nil || errB != nil || !reflect.DeepEqual(da, db) || da.(*ToolCompletedData).Output != "<b> & </b>" {
		t.Fatalf("plain %#v (%v), escaped %#v (%v)", da, errA, db, errB)
	}
	if a.ID != b.ID || a.Seq != b.Seq || !a.Time.Equal(b.Time) {
		t.Fatalf("plain %#v, escaped %#v", a, b)
	}
}

func TestMarshal(t *testing.T) {
	for _, v := range []any{
		"<&>", 12, nil, map[string]string{"b<": "&", "a": "\u2028"},
		json.RawMessage(` {"a" : "<"} `), struct {
			S string `json:"s,omitempty"`
			N []int  `json:"n"`
		}{S: "x>y"},
	} {
		want, _ := encoded(v)
		got, err := Marshal(v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Marshal(%#v) = %s (%v), want %s", v, got, err, want)
		}
		if bytes.Contains(got, []byte(`\u00`)) {
			t.Errorf("Marshal(%#v) = %s: escaped", v, got)
		}
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("a func encoded")
	}
	if _, err := Marshal(json.RawMessage(`{`)); err == nil {
		t.Error("invalid raw JSON encoded")
	}
}

// TestValidIDMatchesPattern holds ValidID to the schemas' id pattern.
func TestValidIDMatchesPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	ids := []string{"", "a", "A-z_09", "a.b", "a b", "é", "a\n", strings.Repeat("x", 64), strings.Repeat("x", 65), "call_0123abcd", "a/b", "*", ">"}
	for c := 0; c < 256; c++ {
		ids = append(ids, "x"+string(rune(c)), string([]byte{byte(c)}))
	}
	for _, id := range ids {
		if got, want := ValidID(id), pattern.MatchString(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}
