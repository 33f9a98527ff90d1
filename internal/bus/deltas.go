package bus

import (
	"bytes"
	"encoding/json"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
)

// DeltaOf is the streamed model text a message on jetloop.stream.<turn>
// carries, and false for anything that is not the orchestrators' delta of
// that turn. A reader may create a push consumer in the streams' account
// and aim it at a turn's delta subject (the server does not check a deliver
// subject): its deliveries carry a reply ($JS.ACK.…, $JS.FC.…) or a Status
// header, and the events they carry are not deltas. The orchestrators
// publish a delta plainly, as exactly {"turn_id","step","delta"}.
func DeltaOf(m *nats.Msg, turn string) (events.Delta, bool) {
	var d events.Delta
	if m.Reply != "" || len(m.Header) != 0 {
		return d, false
	}
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if dec.Decode(&d) != nil || dec.More() || d.TurnID != turn {
		return events.Delta{}, false
	}
	return d, true
}
