package fsm

import (
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// Every turn event type has its handler, and no handler is for a type the
// protocol does not have: a type added to events without one would be an
// unknown event to every fold.
func TestEveryEventTypeEvolves(t *testing.T) {
	for _, typ := range events.Types {
		if _, ok := evolvers[typ]; !ok {
			t.Errorf("no handler for %s", typ)
		}
	}
	if len(evolvers) != len(events.Types) {
		t.Errorf("%d handlers for %d event types", len(evolvers), len(events.Types))
	}
}
