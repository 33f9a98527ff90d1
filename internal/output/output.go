// Package output caps what a tool returns, for the worker that enforces the
// cap and the built-in tools that cut their own output to fit it.
package output

import (
	"fmt"
	"unicode/utf8"
)

// Max bounds a result's output: a model cannot use more, and a result
// must fit in one NATS message.
const Max = 256 << 10

// maxEncoded bounds an output once written as a JSON string. Text
// takes about its own size, but a control character or a byte that is not
// UTF-8 takes six (\u001b, \ufffd): Max bytes of a binary file would
// make a result larger than a NATS message (1 MiB by default), which no
// retry could ever publish.
const maxEncoded = 2 * Max

// Cap cuts output to at most Max bytes, and to at most
// maxEncoded bytes once encoded as JSON, the note included, and says
// how much it dropped. Keeping the note inside the caps makes Cap
// idempotent: the worker applies it again to every result a tool returns.
func Cap(s string) string {
	// What fits is kept whole, a note of an earlier cut included: the
	// room kept for the note is taken only from what is cut.
	if len(s) <= Max && encodedCut(s, maxEncoded) == len(s) {
		return s
	}
	cut := min(encodedCut(s, maxEncoded-NoteRoom), CutAt(s, Max-NoteRoom))
	return s[:cut] + Note(int64(len(s)-cut))
}

// encodedCut returns the length of the longest prefix of s, cut between
// characters, that encoding/json writes in at most limit bytes (HTML
// escaping off).
func encodedCut(s string, limit int) int {
	size := 0
	for i := 0; i < len(s); {
		r, width := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && width == 1, r == '\u2028', r == '\u2029':
			size += 6
		case r == '"', r == '\\', r == '\n', r == '\r', r == '\t', r == '\b', r == '\f':
			size += 2
		case r < 0x20:
			size += 6
		default:
			size += width
		}
		if size > limit {
			return i
		}
		i += width
	}
	return len(s)
}

// NoteRoom is kept free under Max for the truncation note and a
// tool's own last line (an exit status).
const NoteRoom = 256

// Note is the explicit marker of a cut output, of dropped bytes.
func Note(dropped int64) string {
	return fmt.Sprintf("\n… [output truncated: %d more bytes]", dropped)
}

// CutAt returns n, or less so as not to split a UTF-8 sequence.
func CutAt(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !validStart(s[n]) {
		n--
	}
	return n
}

func validStart(b byte) bool { return b&0xC0 != 0x80 }
