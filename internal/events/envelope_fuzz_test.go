package events

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The hand-written readers and writers of this package are held to
// encoding/json: make test runs each target for a few seconds (make fuzz),
// and what a run finds is kept in testdata/fuzz.

func FuzzEnvelopeCodec(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameAsJSON(t, data) })
}

// FuzzAppendEnvelope encodes envelopes that no decoder made: any strings,
// times of any zone and year, any data.
func FuzzAppendEnvelope(f *testing.F) {
	f.Add("e1", "step.started", "t1", "s1", 2, 1, int64(1798000000), int64(123456789), 0, []byte(`{}`))
	f.Add("e<1>&", "tool.completed", "t\"1", "s\\1", -1, 0, int64(0), int64(0), 3600, []byte(` {"o" : "<\u2028&"} `))
	f.Add("é", "", "", "\x00\xff", 0, 0, int64(-62135596800), int64(0), -86399, []byte(nil))
	f.Add("x", "x", "x", "x", 1, 1, int64(253402300800), int64(1), 86400, []byte(`[1,`))
	f.Fuzz(func(t *testing.T, id, typ, turn, session string, seq, step int, sec, nsec int64, zone int, data []byte) {
		e := Envelope{ID: id, Type: Type(typ), TurnID: turn, SessionID: session, Seq: seq, Step: step,
			Time: time.Unix(sec, nsec).In(time.FixedZone("", zone)), Data: data}
		sameEncoding(t, e)
	})
}

// fieldSeeds are JSON objects of the shapes EachField reads: every fixture,
// the golden logs, and objects off its path.
func fieldSeeds(t testing.TB) [][]byte {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) < 10 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	var seeds [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	seeds = append(seeds, logLines(t)...)
	for _, s := range []string{
		`{}`, ` { } `, `{"a":1,"a":2}`, `{"a":{"b":[1,"]}"]},"c":"\"}"}`, `{"a\u0062":1}`, `{"TURN_ID":"x"}`,
		`{"a":tru}`, `{"a":1 2}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":[}]}`, `{"a":1}}`, `{"a":1} {}`,
		`{"a":"é"}`, `{"é":1}`, "{\"a\":\"\x00\"}", `{"a":-0.5e+3, "b" : null , "c":true}`, `[]`, `null`, `"x"`, ``,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

type field struct {
	key   string
	value string
}

// jsonFields is encoding/json's view of a top-level object: its keys as
// written (escapes and all) and their values' bytes, in order; ok is false
// when data is not a valid object.
func jsonFields(data []byte) (fields []field, plainKeys, ok bool) {
	if !json.Valid(data) {
		return nil, false, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false, false
	}
	plainKeys = true
	for dec.More() {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, false, false
		}
		written := bytes.TrimLeft(data[start:dec.InputOffset()], " \t\r\n,")
		key := tok.(string)
		if !bytes.Equal(written, []byte(`"`+key+`"`)) || !plainASCII(key) {
			plainKeys = false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false, false
		}
		fields = append(fields, field{key, string(v)})
	}
	return fields, plainKeys, true
}

func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f || s[i] == '\\' || s[i] == '"' {
			return false
		}
	}
	return true
}

// FuzzEachField holds EachField to encoding/json: on a valid object whose
// keys are plain it must succeed, with the same keys and values in order;
// it may succeed on invalid JSON only through a value it delimits but does
// not check (its documented contract), never through a wrong split.
func FuzzEachField(f *testing.F) {
	for _, s := range fieldSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []field
		ok := EachField(data, func(key string, value []byte) bool {
			got = append(got, field{key, string(value)})
			return true
		})
		want, plainKeys, valid := jsonFields(data)
		if valid && plainKeys && !ok {
			t.Fatalf("%s: EachField failed on a plain object", data)
		}
		if !ok {
			return
		}
		if !valid {
			for _, fl := range got {
				if !json.Valid([]byte(fl.value)) {
					return // a bad value the caller's decode rejects
				}
			}
			t.Fatalf("%s is no JSON object, and EachField read it as %q", data, got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n EachField     %q\n encoding/json %q", data, got, want)
		}
		// Stopping early stops, and says so.
		n := 0
		if len(want) > 0 && EachField(data, func(string, []byte) bool { n++; return false }) || n > 1 {
			t.Fatalf("%s: EachField went on after fn returned false", data)
		}
	})
}

// FuzzEachElement holds EachElement to encoding/json as FuzzEachField holds
// EachField.
func FuzzEachElement(f *testing.F) {
	for _, s := range []string{
		`[]`, ` [ ] `, `[1,"a",{"b":[2]},[3,[4]],null,true,-1.5e3]`, `["]\"[", {"a":"}"}]`,
		`[1,]`, `[,]`, `[1 2]`, `[}]`, `[1]]`, `[1] []`, `[tru]`, `{}`, `null`, ``, `[`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range fieldSeeds(f) {
		f.Add(append(append([]byte("["), s...), ']'))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []string
		ok := EachElement(data, func(value []byte) bool {
			got = append(got, string(value))
			return true
		})
		var raw []json.RawMessage
		valid := json.Unmarshal(data, &raw) == nil && len(bytes.TrimLeft(data, " \t\r\n")) > 0 &&
			bytes.TrimLeft(data, " \t\r\n")[0] == '['
		if valid && !ok {
			t.Fatalf("%s: EachElement failed on an array", data)
		}
		if !ok {
			return
		}
		if !valid {
			for _, v := range got {
				if !json.Valid([]byte(v)) {
					return
				}
			}
			t.Fatalf("%s is no JSON array, and EachElement read it as %q", data, got)
		}
		want := make([]string, len(raw))
		for i, v := range raw {
			want[i] = string(v)
		}
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%s:\n EachElement   %q\n encoding/json %q", data, got, want)
		}
	})
}
