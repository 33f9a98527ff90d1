package tools

import (
	"bytes"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// splitCases are command lines with the words sh makes of them. None uses
// an expansion, a glob or an operator, so sh itself can be the oracle.
var splitCases = []struct {
	line string
	want []string
}{
	{`npx -y server /tmp`, []string{"npx", "-y", "server", "/tmp"}},
	{"  node \t index.js  ", []string{"node", "index.js"}},
	{`run "C:\temp"`, []string{"run", `C:\temp`}},
	{`run "C:\Program Files\app.exe" "\\server\share"`, []string{"run", `C:\Program Files\app.exe`, `\server\share`}},
	{`run 'C:\temp' C:\\temp C:\temp`, []string{"run", `C:\temp`, `C:\temp`, `C:temp`}},
	{`say "a \"quoted\" word" 'it''s' "x\\y" "\a\b\n"`, []string{"say", `a "quoted" word`, "its", `x\y`, `\a\b\n`}},
	{`"\$HOME" '$HOME' "\` + "`" + `"`, []string{"$HOME", "$HOME", "`"}},
	{`a\ b "" '' c""d`, []string{"a b", "", "", "cd"}},
	{"one\\\ntwo \"three\\\nfour\" 'five\\\nsix'", []string{"onetwo", "threefour", "five\\\nsix"}},
	{`--opt="a b"=c 'x'"y"z`, []string{"--opt=a b=c", "xyz"}},
	{`ünï "cödé"`, []string{"ünï", "cödé"}},
	{``, nil},
}

func TestSplitCommand(t *testing.T) {
	for _, tc := range splitCases {
		got, err := splitCommand(tc.line)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	// To sh a line break ends a command; here it is a blank.
	if got, err := splitCommand("a\nb\n"); err != nil || !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("a line break: %q, %v", got, err)
	}
}

// TestSplitCommandAsSh: the same lines split by sh give the same words.
func TestSplitCommandAsSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to compare with")
	}
	for _, tc := range splitCases {
		// The line is given to sh as the arguments of printf, followed by
		// an empty word that marks the end.
		out, err := exec.Command(sh, "-c", `printf '%s\0' `+tc.line+` ''`).Output()
		if err != nil {
			t.Fatalf("sh on %q: %v", tc.line, err)
		}
		words := strings.Split(string(bytes.TrimSuffix(out, []byte{0, 0})), "\x00")
		if len(out) == 1 { // only the '' sentinel: no words
			words = nil
		}
		got, _ := splitCommand(tc.line)
		if !reflect.DeepEqual(got, words) {
			t.Errorf("%q: splitCommand gives %q, sh gives %q", tc.line, got, words)
		}
	}
}

func TestSplitCommandErrors(t *testing.T) {
	for line, want := range map[string]string{
		`run 'open`:         "unterminated ' quote",
		`run "open`:         `unterminated " quote`,
		`run "a\"`:          `unterminated " quote`,
		`run 'a\'`:          "", // a backslash in single quotes is literal
		`run \`:             "ends with a backslash",
		`run "C:\temp\" x`:  `unterminated " quote`,
		`run "a" 'b' "c\\"`: "",
	} {
		_, err := splitCommand(line)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", line, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: err = %v, want %q", line, err, want)
		}
	}
}

// FuzzSplitCommand: any line splits or fails without panicking, and joining
// the words back, each quoted, splits into the same words.
func FuzzSplitCommand(f *testing.F) {
	for _, tc := range splitCases {
		f.Add(tc.line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		words, err := splitCommand(line)
		if err != nil {
			return
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		again, err := splitCommand(strings.Join(quoted, " "))
		if err != nil || !reflect.DeepEqual(again, words) && !(len(again) == 0 && len(words) == 0) {
			t.Errorf("%q: %q, then %q (%v)", line, words, again, err)
		}
	})
}
