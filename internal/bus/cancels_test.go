package bus_test

import (
	"testing"

	"github.com/jetloop/jetloop/internal/bus"
)

func TestCancelsStopRunningAndLaterCallsOfTheTurn(t *testing.T) {
	c := bus.NewCancels()
	var running, other, late int
	forget := c.Add("t1", func() { running++ })
	c.Add("t2", func() { other++ })
	c.Cancel("t1")
	// A call whose job was delivered before the broadcast but registers
	// after it is cancelled as it registers.
	c.Add("t1", func() { late++ })
	forget()
	c.Cancel("t1")
	if running != 1 || late != 1 || other != 0 {
		t.Fatalf("cancelled: running %d, late %d, other turn %d", running, late, other)
	}
}
