package bus

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestDeltaOf: only a plain publish of this turn's delta shape is a delta;
// a push consumer's delivery (reply, header) or an event is not.
func TestDeltaOf(t *testing.T) {
	good := `{"turn_id":"t1","step":1,"delta":"hi"}`
	for _, c := range []struct {
		what string
		m    *nats.Msg
		ok   bool
	}{
		{"the orchestrators' delta", &nats.Msg{Data: []byte(good)}, true},
		{"with a reply", &nats.Msg{Data: []byte(good), Reply: "$JS.ACK.JETLOOP_EVENTS.x.1.1.1.1.0"}, false},
		{"with a header", &nats.Msg{Data: []byte(good), Header: nats.Header{"Status": []string{"100"}}}, false},
		{"another turn's", &nats.Msg{Data: []byte(`{"turn_id":"t2","step":1,"delta":"hi"}`)}, false},
		{"an event", &nats.Msg{Data: []byte(`{"id":"e1","turn_id":"t1","seq":1,"type":"turn.started","data":{}}`)}, false},
		{"two values", &nats.Msg{Data: []byte(good + good)}, false},
		{"not JSON", &nats.Msg{Data: []byte(`hi`)}, false},
	} {
		if _, ok := DeltaOf(c.m, "t1"); ok != c.ok {
			t.Errorf("%s: %v, want %v", c.what, ok, c.ok)
		}
	}
}
