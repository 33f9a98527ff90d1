package runtime

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// timers arms a turn's deadlines in memory. When one passes it enters the
// inbox as an input like any other, so the machine decides what it means and
// a restarted orchestrator re-arms it from the log.
type timers struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger

	mu    sync.Mutex
	turns map[string]map[string]*time.Timer
}

func newTimers(nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) *timers {
	return &timers{nc: nc, js: js, log: log, turns: map[string]map[string]*time.Timer{}}
}

// set makes the armed timers of a turn those its state waits on.
func (t *timers) set(st *fsm.State) { t.arm(st.TurnID, fsm.Timers(st)) }

// arm makes the armed timers of a turn or workflow exactly ts.
func (t *timers) arm(id string, ts []fsm.Timer) {
	want := map[string]fsm.Timer{}
	for _, tm := range ts {
		want[timerID(tm.Timer)] = tm
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	armed := t.turns[id]
	for id, tm := range armed {
		if _, ok := want[id]; !ok {
			tm.Stop()
			delete(armed, id)
		}
	}
	if len(want) == 0 {
		delete(t.turns, id)
		return
	}
	if armed == nil {
		armed = map[string]*time.Timer{}
		t.turns[id] = armed
	}
	for id, tm := range want {
		if _, ok := armed[id]; ok {
			continue
		}
		armed[id] = time.AfterFunc(time.Until(tm.At), func() { t.fire(id, tm.Timer) })
	}
}

func (t *timers) fire(id string, tm events.Timer) {
	data, err := json.Marshal(tm)
	if err != nil {
		return
	}
	msg := &nats.Msg{Subject: events.TimerSubject(tm.TurnID), Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, id)
	// A timer that cannot reach the inbox fires again a little later: the
	// deadline must not be lost to a short outage.
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		_, err := t.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil || t.nc.IsClosed() {
			return
		}
		t.log.Warn("cannot report a deadline; trying again", "turn", tm.TurnID, "kind", tm.Kind, "err", err)
		time.Sleep(min(time.Duration(attempt)*time.Second, 10*time.Second))
	}
}

// timerID is the Nats-Msg-Id of a deadline's message: one per deadline, so a
// timer armed twice by two processes is reported once.
func timerID(tm events.Timer) string {
	id := "timer:" + tm.TurnID + ":" + string(tm.Kind)
	if tm.CallID != "" {
		id += ":" + tm.CallID
	}
	return id + ":" + strconv.FormatInt(tm.At.UnixNano(), 10)
}

func (t *timers) stopAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for turn, armed := range t.turns {
		for _, tm := range armed {
			tm.Stop()
		}
		delete(t.turns, turn)
	}
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
