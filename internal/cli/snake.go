package cli

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"
)

// snakeJSON is v as the JSON jetloop writes everywhere else: a struct's
// fields in snake_case (a json tag's name where it has one), map keys and
// values as they are. replay --at prints the machine's state through it,
// whose Go type has no tags of its own.
func snakeJSON(v any) any { return snakeValue(reflect.ValueOf(v)) }

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func snakeValue(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if v.Type().Implements(marshalerType) || v.Type().Implements(textMarshalerType) {
		return v.Interface() // its own encoding (time.Time, json.RawMessage)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return snakeValue(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name := snakeCase(f.Name)
			if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == "-" {
				continue
			} else if tag != "" {
				name = tag
			}
			out[name] = snakeValue(v.Field(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			out[fmt.Sprint(it.Key().Interface())] = snakeValue(it.Value())
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && (v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8) {
			return v.Interface()
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = snakeValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

// snakeCase is a Go name in snake_case: TurnID is turn_id, LastTime
// last_time.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 &&
			(unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) || (i+1 < len(r) && unicode.IsLower(r[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
