package events

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetloop/jetloop/schemas"
)

// ErrUnknownType is an event whose type is not one of Types: the set is
// closed, so such an event is rejected rather than skipped.
var ErrUnknownType = errors.New("events: unknown event type")

// newData makes the data struct of each event type. step.started has no
// data: it decodes into an empty struct, and any field is an error.
var newData = map[Type]func() any{
	TurnStarted:    func() any { return new(TurnStartedData) },
	StepStarted:    func() any { return new(struct{}) },
	ModelCompleted: func() any { return new(ModelCompletedData) },
	ToolRequested:  func() any { return new(ToolRequestedData) },
	ToolCompleted:  func() any { return new(ToolCompletedData) },
	TurnPaused:     func() any { return new(TurnPausedData) },
	TurnResumed:    func() any { return new(TurnResumedData) },
	StepChecked:    func() any { return new(StepCheckedData) },
	TurnSentinel:   func() any { return new(TurnSentinelData) },
	TurnCompacted:  func() any { return new(TurnCompactedData) },
	TurnFinished:   func() any { return new(TurnFinishedData) },

	WorkflowStarted:      func() any { return new(WorkflowStartedData) },
	TaskStarted:          func() any { return new(TaskStartedData) },
	TaskFinished:         func() any { return new(TaskFinishedData) },
	WorkflowCheckpointed: func() any { return new(WorkflowCheckpointedData) },
	WorkflowGated:        func() any { return new(WorkflowGatedData) },
	WorkflowResumed:      func() any { return new(WorkflowResumedData) },
	WorkflowFinished:     func() any { return new(WorkflowFinishedData) },
}

// DataSchema returns the schema name of an event type's data
// ("event.turn.started"), "" for an unknown type.
func DataSchema(t Type) string {
	if !t.Known() {
		return ""
	}
	return "event." + string(t)
}

// NewData returns a new zero value pointer of the type's data struct
// (*TurnStartedData for turn.started, *struct{} for step.started), and false
// for an unknown type.
func NewData(t Type) (any, bool) {
	f, ok := newData[t]
	if !ok {
		return nil, false
	}
	return f(), true
}

// head is what is read of an event before its type is known.
type head struct {
	Type *Type           `json:"type"`
	Data json.RawMessage `json:"data"`
}

// peek reads an event's type and rejects a missing or unknown one by name.
func peek(data []byte) (head, error) {
	var h head
	if err := json.Unmarshal(data, &h); err != nil {
		return h, fmt.Errorf("events: not an event: %w", err)
	}
	if h.Type == nil {
		return h, errors.New("events: event has no type")
	}
	if !h.Type.Known() {
		return h, fmt.Errorf("%w %q", ErrUnknownType, string(*h.Type))
	}
	return h, nil
}

// ValidateEvent checks an encoded envelope against the envelope schema and
// its data against the schema of its type. An unknown type is an error that
// wraps ErrUnknownType and names the type.
func ValidateEvent(data []byte) error {
	h, err := peek(data)
	if err != nil {
		return err
	}
	// The data is checked on its own first, so that its errors name the
	// type's schema rather than the envelope's.
	if h.Data != nil {
		if err := schemas.Validate(DataSchema(*h.Type), h.Data); err != nil {
			return fmt.Errorf("events: %s event: %w", *h.Type, err)
		}
	}
	if err := schemas.Validate("envelope", data); err != nil {
		return fmt.Errorf("events: %s event: %w", *h.Type, err)
	}
	return nil
}

// Decode reads an event: its type first (an unknown type is rejected with an
// error that wraps ErrUnknownType and names it), then the whole event against
// its schemas. It returns the envelope and its typed data, a pointer as
// NewData makes it (*TurnFinishedData for turn.finished).
func Decode(data []byte) (Envelope, any, error) {
	if err := ValidateEvent(data); err != nil {
		return Envelope{}, nil, err
	}
	var e Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return Envelope{}, nil, fmt.Errorf("events: decode envelope: %w", err)
	}
	d, _ := NewData(e.Type)
	if err := json.Unmarshal(e.Data, d); err != nil {
		return Envelope{}, nil, fmt.Errorf("events: decode %s data: %w", e.Type, err)
	}
	return e, d, nil
}
