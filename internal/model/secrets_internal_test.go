package model

import (
	"strings"
	"testing"
)

func TestScrubberText(t *testing.T) {
	sc := newScrubber("s3cret/key+with=signs", "no-key", "", "  ")
	for _, tc := range []struct{ in, want string }{
		{"bad key s3cret/key+with=signs!", "bad key [redacted]!"},
		{`{"key":"s3cret\/key+with=signs"}`, `{"key":"[redacted]"}`},
		{"?key=s3cret%2Fkey%2Bwith%3Dsigns&x=1", "?key=[redacted]&x=1"},
		{"Authorization: Bearer abc.def-ghi", "Authorization: [redacted]"},
		{`"authorization": "Basic dXNlcjpwYXNz"`, `"authorization": "[redacted]"`},
		{"x-api-key: sk-whatever-they-sent", "x-api-key: [redacted]"},
		{"X-Api-Key=zzz; next", "X-Api-Key=[redacted]; next"},
		{`{"api_key": "abc123"}`, `{"api_key": "[redacted]"}`},
		{"token was bearer eyJhbGciOi.x.y", "token was bearer [redacted]"},
		{"Incorrect API key provided: sk-proj-AbCdEfGhIjKlMnOpQrSt.", "Incorrect API key provided: [redacted]."},
		{"sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "[redacted]"},
		// What is no secret stays readable: the placeholder key, words.
		{"sent no-key; max_tokens too large", "sent no-key; max_tokens too large"},
		{"model not found", "model not found"},
	} {
		if got := sc.text(tc.in); got != tc.want {
			t.Errorf("text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := sc.text(strings.Repeat("s3cret/key+with=signs", 3)); strings.Contains(got, "s3cret") {
		t.Errorf("repeated secret: %q", got)
	}
}
