package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"

	"github.com/jetloop/jetloop/schemas"
	"gopkg.in/yaml.v3"
)

// MaxScriptSize is the largest script file read (docs/protocol.md: at most 1 MiB).
const MaxScriptSize = 1 << 20

// Script is the scripted model of docs/protocol.md: one response per model call,
// in order. The same fields serve inline JSON and YAML files, so a Script
// encodes back to a document ParseScript accepts.
type Script struct {
	Responses  []ScriptResponse `json:"responses"`
	RepeatLast bool             `json:"repeat_last,omitempty"`
	Summary    string           `json:"summary,omitempty"`
}

// ScriptResponse answers one model call.
type ScriptResponse struct {
	Text      string       `json:"text,omitempty"`
	ToolCalls []ScriptCall `json:"tool_calls,omitempty"`
	// DelayMs is the time before the answer; the text is streamed over it.
	DelayMs int `json:"delay_ms,omitempty"`
	// Error fails the call like a provider would: rate_limited and
	// server_error are retried, bad_request is final.
	Error ErrorKind `json:"error,omitempty"`
}

// ScriptCall is one tool call of a scripted response.
type ScriptCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ScriptError is a document that is not a valid script. Its message tells
// what is wrong in detail, which may quote the document; Line alone (the
// line of a YAML syntax error, 0 when there is none) says where without
// quoting anything, for documents whose content must not be shown.
type ScriptError struct {
	Line int
	Err  error
}

func (e *ScriptError) Error() string { return "script: " + e.Err.Error() }

func (e *ScriptError) Unwrap() error { return e.Err }

// yamlLine finds the line in yaml.v3's syntax errors, which carry it only in
// their text ("yaml: line 3: did not find expected key").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+):`)

// ParseScript reads a script from JSON or YAML and checks it against the
// script schema. Its errors are *ScriptError.
func ParseScript(data []byte) (*Script, error) {
	doc := bytes.TrimSpace(data)
	if len(doc) == 0 {
		return nil, &ScriptError{Err: errors.New("empty")}
	}
	if !json.Valid(doc) {
		// YAML goes through JSON so that one schema and one decoder judge
		// both forms alike.
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			se := &ScriptError{Err: err}
			if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
				se.Line, _ = strconv.Atoi(m[1])
			}
			return nil, se
		}
		var err error
		if doc, err = json.Marshal(v); err != nil {
			return nil, &ScriptError{Err: err}
		}
	}
	if err := schemas.Validate("script", doc); err != nil {
		return nil, &ScriptError{Err: err}
	}
	var s Script
	if err := json.Unmarshal(doc, &s); err != nil {
		return nil, &ScriptError{Err: err}
	}
	return &s, nil
}

// LoadScript reads a script file of the caller's own, such as one named on
// the command line; it reads at most MaxScriptSize bytes of it. Files that a
// less trusted party names are read by the orchestrator, confined to the
// agents directory.
func LoadScript(path string) (*Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxScriptSize+1))
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	if len(data) > MaxScriptSize {
		return nil, fmt.Errorf("script: %s is larger than %d bytes", path, MaxScriptSize)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
