package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// argSchemas caches compiled tool-argument schemas by their text: compiling
// is pure, and a step's path should not pay for it twice.
var argSchemas sync.Map // string -> *jsonschema.Schema or error

// CheckParameters reports whether a tool's parameters are a JSON Schema that
// compiles.
func CheckParameters(parameters json.RawMessage) error {
	_, err := argSchema(parameters)
	return err
}

// ValidateArgs checks a tool call's arguments: a JSON object that satisfies
// the tool's parameters schema (any object when it has none). A schema that
// does not compile checks nothing: the tool can still refuse.
func ValidateArgs(parameters, args json.RawMessage) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return errors.New("arguments must be a JSON object")
	}
	if len(parameters) == 0 {
		return nil
	}
	sch, err := argSchema(parameters)
	if err != nil {
		return nil
	}
	if err := sch.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			if line := oneLine(ve); line != "" {
				return errors.New(line)
			}
		}
		return err
	}
	return nil
}

func argSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	key := string(raw)
	if v, ok := argSchemas.Load(key); ok {
		if s, ok := v.(*jsonschema.Schema); ok {
			return s, nil
		}
		return nil, v.(error)
	}
	s, err := compileArgs(raw)
	if err != nil {
		argSchemas.Store(key, err)
		return nil, err
	}
	argSchemas.Store(key, s)
	return s, nil
}

func compileArgs(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "mem:///parameters.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	return s, nil
}

// printer renders validation messages; the library needs one.
var printer = message.NewPrinter(language.English)

// oneLine names each failing location with its reason on one line, which
// reads better in a tool result or a dead letter's header than the nested
// tree. Only the leaves carry reasons; inner nodes (a $ref, an allOf) just
// say that something below failed.
func oneLine(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		loc := "/" + strings.Join(e.InstanceLocation, "/")
		parts = append(parts, loc+": "+e.ErrorKind.LocalizedString(printer))
	}
	walk(ve)
	return strings.Join(parts, "; ")
}
