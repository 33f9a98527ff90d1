package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// encodeResult writes s as the worker's encoder does: a JSON string without
// HTML escaping.
func encodeResult(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// encodedCut's size of a prefix is exactly what the worker's encoder writes
// for it, for every kind of character it treats apart: the prefix it keeps
// fits the limit and one more character would not.
func TestEncodedCutMatchesTheEncoder(t *testing.T) {
	pieces := []string{"a", "é", "€", "😀", "<", ">", "&", `"`, `\`, "\n", "\r", "\t", "\b", "\f", "\x00", "\x1b", "\x7f",
		"\xff", "\xe2\x82", "\u2028", "\u2029", "\ufffd"}
	for _, p := range pieces {
		for _, limit := range []int{0, 1, 5, 6, 7, 100, 1001} {
			s := strings.Repeat(p+"x", 200)
			cut := encodedCut(s, limit)
			size := len(encodeResult(t, s[:cut])) - 2 // without the quotes
			if size > limit {
				t.Errorf("%q×200 cut at %d for %d bytes encodes to %d", p, cut, limit, size)
			}
			if cut < len(s) {
				next := cut + 1
				for next < len(s) && !validStart(s[next]) {
					next++
				}
				if bigger := len(encodeResult(t, s[:next])) - 2; bigger <= limit {
					t.Errorf("%q×200 cut at %d for %d bytes, but %d bytes (%d encoded) fit", p, cut, limit, next, bigger)
				}
			}
		}
	}
	// Characters that HTML escaping would grow cost their own size.
	if s := strings.Repeat("<&>", 1000); encodedCut(s, len(s)) != len(s) {
		t.Error("'<&>' counted as escaped")
	}
}

// Whatever Cap keeps fits Max raw and maxEncoded encoded.
func TestTruncateFitsBothCaps(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("<", 200_000),
		strings.Repeat("<", Max*2),
		strings.Repeat("\x00", Max),
		strings.Repeat("\xff\u2028é", Max/3),
		strings.Repeat(`"`, Max+1),
	} {
		out := Cap(s)
		if len(out) > Max || len(encodeResult(t, out))-2 > maxEncoded {
			t.Errorf("%.10q…: %d bytes, %d encoded", s, len(out), len(encodeResult(t, out)))
		}
		if Cap(out) != out {
			t.Errorf("%.10q…: truncate is not idempotent", s)
		}
	}
	if s := strings.Repeat("<", 200_000); Cap(s) != s {
		t.Error("200 KB of '<' was cut")
	}
}
