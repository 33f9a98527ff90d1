package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/schemas"
	"github.com/jetloop/jetloop/worker"
)

type node struct {
	Next *node `json:"next"`
}

type inner struct {
	N uint8 `json:"n"`
}

type base struct{ ID string }

// Schema describes the kinds a JSON argument can have, follows json tags
// and refuses what it cannot describe; what it derives is a schema the
// orchestrator accepts.
func TestSchema(t *testing.T) {
	type all struct {
		S       string            `json:"s" jsonschema:"description=a string, with a comma"`
		B       bool              `json:"b,omitempty"`
		I       int64             `json:"i,omitzero"`
		F       float32           `json:"f"`
		P       *string           `json:"p,omitempty"`
		List    []int             `json:"list"`
		Array   [2]bool           `json:"array"`
		Map     map[string]inner  `json:"map"`
		When    time.Time         `json:"when"`
		Raw     json.RawMessage   `json:"raw"`
		Any     any               `json:"any"`
		Named   string            // no tag: its Go name
		Skipped string            `json:"-"`
		hidden  string            //nolint:unused // unexported: not an argument
		Dash    string            `json:"-,"`
		Nested  map[string][]bool `json:"nested,omitempty"`
	}
	got, err := worker.Schema(&all{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"additionalProperties":false,"properties":{` +
		`"-":{"type":"string"},` +
		`"Named":{"type":"string"},` +
		`"any":{},` +
		`"array":{"items":{"type":"boolean"},"type":"array"},` +
		`"b":{"type":"boolean"},` +
		`"f":{"type":"number"},` +
		`"i":{"type":"integer"},` +
		`"list":{"items":{"type":"integer"},"type":"array"},` +
		`"map":{"additionalProperties":{"additionalProperties":false,"properties":{"n":{"minimum":0,"type":"integer"}},"required":["n"],"type":"object"},"type":"object"},` +
		`"nested":{"additionalProperties":{"items":{"type":"boolean"},"type":"array"},"type":"object"},` +
		`"p":{"type":"string"},` +
		`"raw":{},` +
		`"s":{"description":"a string, with a comma","type":"string"},` +
		`"when":{"format":"date-time","type":"string"}},` +
		`"required":["s","f","list","array","map","when","raw","any","Named","-"],"type":"object"}`
	if string(got) != want {
		t.Errorf("schema\n got %s\nwant %s", got, want)
	}
	if err := schemas.CheckParameters(got); err != nil {
		t.Errorf("the derived schema is refused: %v", err)
	}
	if err := schemas.ValidateArgs(got, json.RawMessage(`{"s":"x","f":1,"list":[1],"array":[true,false],"map":{"a":{"n":1}},"when":"2026-01-01T00:00:00Z","raw":null,"any":3,"Named":"","-":""}`)); err != nil {
		t.Errorf("valid arguments refused: %v", err)
	}

	for name, v := range map[string]any{
		"not a struct":     42,
		"nil":              nil,
		"recursive":        node{},
		"int map keys":     struct{ M map[int]string }{},
		"channel":          struct{ C chan int }{},
		"function":         struct{ F func() }{},
		"embedded":         struct{ base }{},
		"complex":          struct{ C complex64 }{},
		"pointer to slice": &[]string{},
	} {
		if s, err := worker.Schema(v); err == nil {
			t.Errorf("%s: derived %s", name, s)
		}
	}
}
