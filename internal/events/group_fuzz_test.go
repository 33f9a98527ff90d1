package events

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzEventGroup holds the grouped layout to encoding/json: where
// encoding/json reads a message as an array of envelopes, Each reads the
// same events in the same order (and a lone object as that one event), and
// AppendGroup writes what encoding/json reads back as those events.
func FuzzEventGroup(f *testing.F) {
	lines := logLines(f)
	for i, l := range lines {
		f.Add(l)
		if i+1 < len(lines) {
			f.Add(append(append(append(append([]byte("["), l...), ','), lines[i+1]...), ']'))
		}
	}
	for _, s := range []string{`[]`, `[{}]`, `[1]`, `[{},2]`, ` [{"type":"x"}] `, `[{"seq":1}]]`, `{}`, ``, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []Envelope
		err := Each(bytes.Clone(data), func(e Envelope) error { got = append(got, e); return nil })
		var want []Envelope
		var werr error
		if body := bytes.TrimLeft(data, " \t\r\n"); len(body) > 0 && body[0] == '[' {
			werr = json.Unmarshal(data, &want)
			var raw []json.RawMessage
			if werr == nil && json.Unmarshal(data, &raw) == nil {
				for _, r := range raw {
					if r[0] != '{' {
						werr = ErrBadGroup // an array of anything but objects is no group
					}
				}
				if len(raw) == 0 {
					werr = ErrBadGroup
				}
			}
		} else {
			var e Envelope
			if werr = json.Unmarshal(data, &e); werr == nil {
				want = []Envelope{e}
			}
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s: encoding/json error %v, Each error %v", data, werr, err)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%s: Each read %d events, encoding/json %d", data, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(want[i], got[i]) || !want[i].Time.Equal(got[i].Time) {
				t.Fatalf("%s: event %d:\n encoding/json %#v\n Each          %#v", data, i, want[i], got[i])
			}
		}
		enc, err := AppendGroup(nil, want)
		if err != nil {
			return // an envelope encoding/json cannot write either (sameEncoding's domain)
		}
		var back []Envelope
		if err := json.Unmarshal(enc, &back); err != nil || len(back) != len(want) {
			t.Fatalf("AppendGroup wrote %s, which encoding/json reads as %d events (%v)", enc, len(back), err)
		}
		for i := range want {
			if back[i].ID != want[i].ID || back[i].Seq != want[i].Seq || !back[i].Time.Equal(want[i].Time) {
				t.Fatalf("AppendGroup changed event %d: %#v → %#v", i, want[i], back[i])
			}
		}
	})
}
