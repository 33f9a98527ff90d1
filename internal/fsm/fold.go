package fsm

import "github.com/jetloop/jetloop/internal/events"

// Fold replays a whole log into a fresh state.
func Fold(log []events.Envelope) (*State, error) {
	s := New("")
	for _, e := range log {
		if err := Evolve(s, e); err != nil {
			return nil, err
		}
	}
	return s, nil
}
