package fsm

import (
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
)

// Fold replays a whole log into a fresh state.
func Fold(log []events.Envelope) (*State, error) { return machine.Fold(New(""), log, Evolve) }
