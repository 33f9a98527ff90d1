// Package schemas embeds jetloop's JSON Schemas (draft 2020-12), the single
// source of truth for every message that crosses a process boundary, and
// validates documents against them.
//
// Each schema lives in <name>.schema.json and is known by <name>; schemas refer
// to each other by file name ("common.schema.json#/$defs/message").
package schemas

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed *.schema.json
var files embed.FS

// BaseURL is the $id prefix of every schema.
const BaseURL = "https://jetloop.dev/schemas/"

var (
	once     sync.Once
	compiled map[string]*jsonschema.Schema
	loadErr  error
)

func load() {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	names, err := fs.Glob(files, "*.schema.json")
	if err != nil {
		loadErr = err
		return
	}
	for _, f := range names {
		data, err := files.ReadFile(f)
		if err != nil {
			loadErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			loadErr = fmt.Errorf("schemas: %s: %w", f, err)
			return
		}
		if err := c.AddResource(BaseURL+f, doc); err != nil {
			loadErr = fmt.Errorf("schemas: %s: %w", f, err)
			return
		}
	}
	compiled = make(map[string]*jsonschema.Schema, len(names))
	for _, f := range names {
		s, err := c.Compile(BaseURL + f)
		if err != nil {
			loadErr = fmt.Errorf("schemas: compile %s: %w", f, err)
			return
		}
		compiled[strings.TrimSuffix(f, ".schema.json")] = s
	}
}

// Names lists the embedded schemas, sorted.
func Names() []string {
	once.Do(load)
	names := make([]string, 0, len(compiled))
	for n := range compiled {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Err reports a schema that failed to compile: a build-time mistake that a
// test catches.
func Err() error {
	once.Do(load)
	return loadErr
}

// Validate checks a JSON document against the named schema.
func Validate(name string, data []byte) error {
	once.Do(load)
	if loadErr != nil {
		return loadErr
	}
	s, ok := compiled[name]
	if !ok {
		return fmt.Errorf("schemas: no schema %q", name)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if err := s.Validate(doc); err != nil {
		return &Error{Schema: name, Err: err}
	}
	return nil
}

// ValidateValue checks a decoded document (from yaml or json into any).
func ValidateValue(name string, doc any) error {
	once.Do(load)
	if loadErr != nil {
		return loadErr
	}
	s, ok := compiled[name]
	if !ok {
		return fmt.Errorf("schemas: no schema %q", name)
	}
	if err := s.Validate(doc); err != nil {
		return &Error{Schema: name, Err: err}
	}
	return nil
}

// Error is a document that failed its schema.
type Error struct {
	Schema string
	Err    error
}

func (e *Error) Error() string {
	msg := e.Err.Error()
	if ve, ok := e.Err.(*jsonschema.ValidationError); ok {
		if line := oneLine(ve); line != "" {
			msg = line
		}
	}
	return fmt.Sprintf("schema %s: %s", e.Schema, msg)
}

func (e *Error) Unwrap() error { return e.Err }
