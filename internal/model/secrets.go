package model

import (
	"cmp"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// redacted stands where a secret was.
const redacted = "[redacted]"

// credentials are secrets a server may echo that jetloop was never told
// about: a bearer token, the value of a key header or parameter, a key in
// the shape OpenAI and Anthropic issue. The header names come first so that
// "Authorization: Bearer …" goes whole, scheme and token.
var credentials = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b((?:proxy-)?authorization|x-api-key|x-goog-api-key|api[-_]?key|access[-_]token)(["']?\s*[:=]\s*["']?)(?:(?:bearer|basic)\s+)?[^\s"',;}\]]+`),
	regexp.MustCompile(`(?i)\b(bearer)(\s+)[^\s"',;}\]]+`),
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`),
}

// scrubber takes secrets out of the text of a failed call before it leaves
// a provider. That text becomes model.completed's error, turn.finished's
// error (both readable by every client) and log lines, and a server or a
// proxy may well repeat what it was sent: a key in a 401, the headers of the
// request in a 400.
type scrubber struct {
	secrets *strings.Replacer // nil without secrets
}

// newScrubber makes a scrubber that hides secrets, each in the spellings a
// server may echo it in (as sent, escaped in JSON, escaped in a URL), and
// every credential it recognises by its shape.
func newScrubber(secrets ...string) *scrubber {
	seen := map[string]bool{}
	var all []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			all = append(all, s)
		}
	}
	for _, s := range secrets {
		s = strings.TrimSpace(s)
		if s == "" || s == noKey {
			continue
		}
		add(s)
		if q, err := json.Marshal(s); err == nil {
			j := string(q[1 : len(q)-1]) // Marshal escapes <, > and & too
			add(j)
			add(strings.ReplaceAll(j, "/", `\/`)) // as PHP and others write it
		}
		add(url.QueryEscape(s))
		add(url.PathEscape(s))
	}
	// Longest first: strings.Replacer tries its old strings in the order
	// given, and a secret that holds another must go whole.
	slices.SortFunc(all, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	sc := &scrubber{}
	if len(all) > 0 {
		pairs := make([]string, 0, 2*len(all))
		for _, s := range all {
			pairs = append(pairs, s, redacted)
		}
		sc.secrets = strings.NewReplacer(pairs...)
	}
	return sc
}

// text is s without secrets.
func (sc *scrubber) text(s string) string {
	if sc.secrets != nil {
		s = sc.secrets.Replace(s)
	}
	for i, re := range credentials {
		if i == len(credentials)-1 {
			s = re.ReplaceAllLiteralString(s, redacted)
			continue
		}
		s = re.ReplaceAllString(s, "${1}${2}"+redacted)
	}
	return s
}

// error is err without secrets. An *Error keeps its kind and wait; any
// other error whose text holds no secret is returned as it is, so that the
// caller's context.Canceled is still itself.
func (sc *scrubber) error(err error) error {
	if err == nil {
		return nil
	}
	if me, ok := err.(*Error); ok {
		c := *me
		c.Message = sc.text(me.Message)
		return &c
	}
	if text := err.Error(); sc.text(text) != text {
		return &scrubbed{text: sc.text(text)}
	}
	return err
}

// scrubbed is an error whose text had a secret in it: only the text is
// kept, as anything it wrapped would show the secret again.
type scrubbed struct{ text string }

func (e *scrubbed) Error() string { return e.text }
