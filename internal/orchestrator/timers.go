package orchestrator

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/machine"
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

	// stopped ends with stopAll: a deadline still trying to reach the
	// inbox then gives up (the next owner re-arms it from the log).
	stopped context.Context
	stop    context.CancelFunc

	mu    sync.Mutex
	turns map[string]map[string]*time.Timer
}

func newTimers(nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) *timers {
	stopped, stop := context.WithCancel(context.Background())
	return &timers{nc: nc, js: js, log: log, stopped: stopped, stop: stop, turns: map[string]map[string]*time.Timer{}}
}

// set makes the armed timers of a turn those its state waits on.
func (t *timers) set(st *fsm.State) { t.arm(st.TurnID, fsm.Timers(st)) }

// arm makes the armed timers of a turn or workflow exactly ts.
func (t *timers) arm(id string, ts []machine.Timer) {
	want := map[string]machine.Timer{}
	for _, tm := range ts {
		want[events.TimerID(tm.Timer)] = tm
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
	_ = backoff.Policy{First: time.Second, Max: 10 * time.Second}.Do(t.stopped, func(int) error {
		ctx, cancel := context.WithTimeout(t.stopped, defaultIOTimeout)
		_, err := t.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil || t.nc.IsClosed() {
			return backoff.Permanent(err)
		}
		t.log.Warn("cannot report a deadline; trying again", "turn", tm.TurnID, "kind", tm.Kind, "err", err)
		return err
	})
}

// timerID is the Nats-Msg-Id of a deadline's message: one per deadline, so a
// timer armed twice by two processes is reported once.

func (t *timers) stopAll() {
	t.stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	for turn, armed := range t.turns {
		for _, tm := range armed {
			tm.Stop()
		}
		delete(t.turns, turn)
	}
}
