package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jetloop/jetloop/schemas"
	"gopkg.in/yaml.v3"
)

// Script is the scripted model of CONTRACT.md: one response per model call,
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

// ParseScript reads a script from JSON or YAML and checks it against the
// script schema.
func ParseScript(data []byte) (*Script, error) {
	doc := bytes.TrimSpace(data)
	if len(doc) == 0 {
		return nil, fmt.Errorf("script: empty")
	}
	if !json.Valid(doc) {
		// YAML goes through JSON so that one schema and one decoder judge
		// both forms alike.
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, fmt.Errorf("script: %w", err)
		}
		var err error
		if doc, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("script: %w", err)
		}
	}
	if err := schemas.Validate("script", doc); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	var s Script
	if err := json.Unmarshal(doc, &s); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return &s, nil
}

// LoadScript reads a script file.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
