package worker

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// schemaOf reads Handle's params: a schema as JSON or a map, or a Go struct
// to derive one from.
func schemaOf(params any) (json.RawMessage, error) {
	switch p := params.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return p, nil
	case []byte:
		return json.RawMessage(p), nil
	case string:
		return json.RawMessage(p), nil
	case map[string]any:
		data, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("parameters: %w", err)
		}
		return data, nil
	}
	return Schema(params)
}

// Schema derives the JSON Schema of a tool's arguments from a Go struct (or
// a pointer to one), as HandleFunc does: an object whose properties are the
// struct's exported fields, named by their json tags. A field is required
// unless its json tag says omitempty or omitzero; no other property is
// allowed. A field's description is its `jsonschema:"description=…"` or
// `description:"…"` tag. Strings, booleans, integers, floats, slices,
// arrays, maps with string keys, nested structs, pointers, time.Time and
// json.RawMessage are understood; other kinds are an error.
func Schema(v any) (json.RawMessage, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("parameters: want a struct, got %v", reflect.TypeOf(v))
	}
	s, err := schemaFor(t, map[reflect.Type]bool{})
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	return json.Marshal(s)
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
)

// schemaFor is the schema of one Go type; seen guards against a struct that
// contains itself, which a schema without $ref cannot describe.
func schemaFor(t reflect.Type, seen map[reflect.Type]bool) (map[string]any, error) {
	if t == rawMessage {
		return map[string]any{}, nil // any JSON value
	}
	if t.PkgPath() == "time" && t.Name() == "Time" {
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaFor(t.Elem(), seen)
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		s := map[string]any{"type": "integer"}
		if t.Kind() >= reflect.Uint {
			s["minimum"] = 0
		}
		return s, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := schemaFor(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key %s: only string keys are JSON objects", t.Key())
		}
		values, err := schemaFor(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": values}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Struct:
		if seen[t] {
			return nil, fmt.Errorf("type %s contains itself", t)
		}
		seen[t] = true
		defer delete(seen, t)
		return structSchema(t, seen)
	}
	return nil, fmt.Errorf("type %s has no JSON Schema", t)
}

func structSchema(t reflect.Type, seen map[reflect.Type]bool) (map[string]any, error) {
	props := map[string]any{}
	required := []string{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && tag != "-" {
			// encoding/json would promote its fields, exported or not.
			return nil, fmt.Errorf("embedded field %s: embedding is not supported, name the field", f.Name)
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s, err := schemaFor(f.Type, seen)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.Name, err)
		}
		if d := description(f.Tag); d != "" {
			s["description"] = d
		}
		props[name] = s
		if !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") {
			required = append(required, name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required,
		"additionalProperties": false}, nil
}

// description reads `description:"…"`, or the description of
// `jsonschema:"description=…"` (which runs to the end of the tag: a
// description may hold commas).
func description(tag reflect.StructTag) string {
	if d, ok := tag.Lookup("description"); ok {
		return d
	}
	_, d, _ := strings.Cut(tag.Get("jsonschema"), "description=")
	return d
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}
