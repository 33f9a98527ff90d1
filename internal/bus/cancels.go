package bus

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// IsCancel reports whether a message on jetloop.cancel.<turn_id> is the
// orchestrators' broadcast: a plain publish with no reply, no header and no
// body. Anything else is ignored. A reader may create a push consumer in
// the streams' account, and the server does not check its deliver subject:
// aimed at a turn's cancel subject, it would stop the turn's running
// calls. Every delivery of a push consumer carries a reply ($JS.ACK.…, or
// $JS.FC.… for flow control) and its idle heartbeats a Status header, so
// none of them passes for a cancel.
func IsCancel(m *nats.Msg) bool {
	return m.Reply == "" && len(m.Header) == 0 && len(m.Data) == 0
}

// Cancels tracks the running calls of each turn, so an abort's broadcast
// on jetloop.cancel.<turn_id> stops them. It also remembers the turns
// cancelled lately: a call whose job was delivered just before the broadcast
// but registered just after it is cancelled as it registers, not run to its
// deadline.
type Cancels struct {
	mu        sync.Mutex
	turns     map[string]map[*int]context.CancelFunc
	cancelled map[string]time.Time
}

// cancelMemory is how long a cancelled turn is remembered: longer than a job
// takes from its delivery to its registration, short enough to stay small.
const cancelMemory = 10 * time.Minute

// NewCancels returns an empty registry.
func NewCancels() *Cancels {
	return &Cancels{turns: map[string]map[*int]context.CancelFunc{}, cancelled: map[string]time.Time{}}
}

// Add registers a running call and returns the function that forgets it. A
// call of a turn cancelled lately is cancelled at once.
func (c *Cancels) Add(turn string, cancel context.CancelFunc) func() {
	key := new(int)
	c.mu.Lock()
	if _, gone := c.cancelled[turn]; gone {
		c.mu.Unlock()
		cancel()
		return func() {}
	}
	if c.turns[turn] == nil {
		c.turns[turn] = map[*int]context.CancelFunc{}
	}
	c.turns[turn][key] = cancel
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.turns[turn], key)
		if len(c.turns[turn]) == 0 {
			delete(c.turns, turn)
		}
		c.mu.Unlock()
	}
}

// Cancel stops every registered call of a turn, and every call of it that
// registers later.
func (c *Cancels) Cancel(turn string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for t, at := range c.cancelled {
		if now.Sub(at) > cancelMemory {
			delete(c.cancelled, t)
		}
	}
	c.cancelled[turn] = now
	for _, f := range c.turns[turn] {
		f()
	}
}
