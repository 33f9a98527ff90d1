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
	}
	files, _ := filepath.Glob("../cli/testdata/*.jsonl")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			seeds = append(seeds, bytes.Clone(sc.Bytes()))
		}
	}
	if len(seeds) < 40 {
		t.Fatalf("only %d seeds: the golden logs were not found", len(seeds))
	}
	return seeds
}

// sameAsJSON fails when DecodeEnvelope and json.Unmarshal disagree on data,
// and when AppendEnvelope encodes a decoded envelope other than json.Marshal.
func sameAsJSON(t *testing.T, data []byte) {
	t.Helper()
	var want, got Envelope
	werr := json.Unmarshal(data, &want)
	gerr := DecodeEnvelope(data, &got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s: json.Unmarshal error %v, DecodeEnvelope error %v", data, werr, gerr)
	}
	if werr != nil {
		return
	}
	if !reflect.DeepEqual(want, got) || !want.Time.Equal(got.Time) {
		t.Fatalf("%s:\n json.Unmarshal %#v\nDecodeEnvelope %#v", data, want, got)
	}
	wb, werr := json.Marshal(want)
	gb, gerr := AppendEnvelope(nil, want)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(wb, gb) {
		t.Fatalf("encode %#v:\n json.Marshal   %s (%v)\nAppendEnvelope %s (%v)", want, wb, werr, gb, gerr)
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
		{ID: "x", Data: json.RawMessage(` { "a" : [ 1 , 2 ] } `)},
	} {
		wb, _ := json.Marshal(e)
		gb, err := AppendEnvelope(nil, e)
		if err != nil || !bytes.Equal(wb, gb) {
			t.Errorf("encode %#v:\n json.Marshal   %s\nAppendEnvelope %s (%v)", e, wb, gb, err)
		}
	}
	if _, err := AppendEnvelope(nil, Envelope{ID: "x", Data: json.RawMessage(`{`)}); err == nil {
		t.Error("invalid data encoded")
	}
}

func FuzzEnvelopeCodec(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameAsJSON(t, data) })
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
