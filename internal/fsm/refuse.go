package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// refuse says why a call cannot run, or "" when it can: a tool the turn does
// not offer, or arguments that fail the tool's JSON Schema. No job is sent for
// such a call; its error result goes straight back to the model.
func (s *State) refuse(c events.ToolCall) string {
	spec, ok := s.spec(c.Name)
	if !ok {
		return fmt.Sprintf("error: tool %q is not available in this turn; available tools: %s", c.Name, strings.Join(names(s.Tools), ", "))
	}
	if err := validateArgs(spec, c.Arguments); err != nil {
		return fmt.Sprintf("error: invalid arguments for %s: %v", c.Name, err)
	}
	return ""
}

// compiled caches tool schemas by their text: compiling is pure, and a
// step's path should not pay for it twice.
var compiled sync.Map // string -> *jsonschema.Schema, or error

func validateArgs(spec events.ToolSpec, args json.RawMessage) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return fmt.Errorf("arguments must be a JSON object")
	}
	if len(spec.Parameters) == 0 {
		return nil
	}
	key := string(spec.Parameters)
	v, ok := compiled.Load(key)
	if !ok {
		v = compile(spec.Parameters)
		compiled.Store(key, v)
	}
	sch, ok := v.(*jsonschema.Schema)
	if !ok {
		// A worker that advertises a broken schema gets its calls
		// unchecked rather than refused: the worker can still say no.
		return nil
	}
	if err := sch.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if ok := asValidation(err, &ve); ok {
			return fmt.Errorf("%s", oneLine(ve))
		}
		return err
	}
	return nil
}

func compile(raw json.RawMessage) any {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "mem:///tool.json"
	if err := c.AddResource(url, doc); err != nil {
		return err
	}
	sch, err := c.Compile(url)
	if err != nil {
		return err
	}
	return sch
}

func asValidation(err error, target **jsonschema.ValidationError) bool {
	ve, ok := err.(*jsonschema.ValidationError)
	if ok {
		*target = ve
	}
	return ok
}

func oneLine(ve *jsonschema.ValidationError) string {
	var parts []string
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == nil {
			continue
		}
		loc := u.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		parts = append(parts, loc+": "+u.Error.String())
	}
	if len(parts) == 0 {
		return ve.Error()
	}
	return strings.Join(parts, "; ")
}
