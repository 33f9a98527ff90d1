package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// members is this orchestrator's view of the live ones: a key each in KV
// JETLOOP_ORCHESTRATORS, refreshed three times per TTL, so one that dies
// disappears within the TTL and every other sees it go (the bucket leaves a
// marker when a key expires). Which partitions an orchestrator owns follows
// from the live set alone (bus.Owner), so all agree without talking.
type members struct {
	kv    jetstream.KeyValue
	log   *slog.Logger
	name  string
	nonce string // tells this process from another running under its name

	// found are the orchestrators whose keys join found, this process's
	// predecessor (a key under its name) and the dead it deleted included:
	// the owners of the partitions before this process.
	found []string

	mu      sync.Mutex
	live    map[string]bool
	twin    error         // set when another process runs under this name
	changed chan struct{} // one pending wake-up of serve
}

type memberRecord struct {
	Nonce   string    `json:"nonce"`
	Started time.Time `json:"started"`
	// Where the process runs: an orchestrator restarted on the same machine
	// sees at once that the one before it is gone (its pid is), rather
	// than wait for its key to expire.
	Host  string `json:"host,omitempty"`
	PIDNS string `json:"pid_ns,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// here is where this process runs, as memberRecord says it.
var here = func() memberRecord {
	host, _ := os.Hostname()
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return memberRecord{Host: host, PIDNS: ns, PID: os.Getpid()}
}()

// gone reports whether r is a process of this machine that no longer runs.
func (r memberRecord) gone() bool {
	if r.Host == "" || r.Host != here.Host || r.PIDNS != here.PIDNS || r.PID <= 0 || r.PID == here.PID {
		return false
	}
	p, err := os.FindProcess(r.PID)
	return err != nil || p.Signal(syscall.Signal(0)) != nil
}

func newMembers(kv jetstream.KeyValue, log *slog.Logger, name string) *members {
	return &members{kv: kv, log: log, name: name, nonce: uuid.NewString(), live: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// join reads the live set as it stands, then writes this orchestrator's
// key; the watch it begins lasts as long as life. A key under this name left by
// a process that died is taken over: it is this process's predecessor, not
// another orchestrator. So is one of a process of this machine that no
// longer runs.
func (m *members) join(ctx, life context.Context) (jetstream.KeyWatcher, error) {
	// The bucket is read before this process writes its key: a key under
	// this name then is its predecessor's, dead less than a TTL ago. The
	// others have not seen it go, and the partitions it owned come to this
	// process orphaned.
	w, err := m.kv.WatchAll(life)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: watch %s: %w", bus.BucketOrchestrators, err)
	}
	m.found = nil
	for e := range w.Updates() {
		if e == nil {
			break // the live set as it stands
		}
		m.update(e)
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		m.found = append(m.found, e.Key())
		var r memberRecord
		if e.Key() != m.name && json.Unmarshal(e.Value(), &r) == nil && r.gone() {
			m.log.Info("an orchestrator of this machine is gone; its partitions are taken over now", "orchestrator", e.Key(), "pid", r.PID)
			_ = m.kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision()))
			m.mu.Lock()
			delete(m.live, e.Key())
			m.mu.Unlock()
		}
	}
	if err := m.beat(ctx); err != nil {
		// A full store, say: the others do not see this one until a
		// refresh is written, and serving goes on meanwhile.
		m.log.Warn("cannot write this orchestrator's liveness key; trying again", "err", err)
	}
	return w, nil
}

func (m *members) beat(ctx context.Context) error {
	r := here
	r.Nonce, r.Started = m.nonce, time.Now().UTC()
	data, _ := json.Marshal(r)
	if _, err := m.kv.Put(ctx, m.name, data); err != nil {
		return fmt.Errorf("orchestrator: liveness key %s: %w", m.name, err)
	}
	return nil
}

// update applies one change of the bucket.
func (m *members) update(e jetstream.KeyValueEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	before := len(m.live)
	alive := e.Operation() == jetstream.KeyValuePut
	if e.Key() == m.name {
		var r memberRecord
		// A put under this name by another process after this one's own:
		// two orchestrators think they are one, and both would pull the
		// same partitions.
		if alive && json.Unmarshal(e.Value(), &r) == nil && r.Nonce != m.nonce && m.twin == nil && m.live[m.name] {
			m.twin = fmt.Errorf("orchestrator: another orchestrator runs as %q; give each its own --name", m.name)
		}
		if alive && r.Nonce == m.nonce {
			m.live[m.name] = true
		}
		return
	}
	was := m.live[e.Key()]
	if alive {
		m.live[e.Key()] = true
	} else {
		delete(m.live, e.Key())
	}
	if was != alive || len(m.live) != before {
		m.log.Info("orchestrators changed", "orchestrator", e.Key(), "alive", alive)
		select {
		case m.changed <- struct{}{}:
		default:
		}
	}
}

// run keeps the key fresh and the live set current until ctx ends; then
// the key is deleted, so the others take the partitions over at once. A
// watch that stops (the server restarted, the store is full) is begun
// again, and the live set read afresh.
func (m *members) run(ctx context.Context, w jetstream.KeyWatcher) error {
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	tick := time.NewTicker(bus.OrchestratorsTTL / 3)
	defer tick.Stop()
	var updates <-chan jetstream.KeyValueEntry = w.Updates()
	listed := time.Now()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = m.kv.Delete(dctx, m.name)
			return nil
		case <-tick.C:
			bctx, cancel := context.WithTimeout(ctx, bus.OrchestratorsTTL/3)
			if err := m.beat(bctx); err != nil && ctx.Err() == nil {
				m.log.Warn("cannot refresh this orchestrator's liveness key", "err", err)
			}
			cancel()
			if updates == nil {
				w, updates = m.rewatch(ctx)
			} else if time.Since(listed) > bus.OrchestratorsTTL {
				// A watch can stall without closing while a node fails
				// over, and miss an expiry: the keys are listed too, on
				// every tick until a listing succeeds. (With the beat's
				// deadline, spent by a beat waiting for a new leader, a
				// listing failed, and was tried again a TTL later only:
				// a dead orchestrator's turns then waited ~9 s.)
				lctx, cancel := context.WithTimeout(ctx, bus.OrchestratorsTTL/3)
				if m.reconcile(lctx) {
					listed = time.Now()
				}
				cancel()
			}
		case e, ok := <-updates:
			switch {
			case !ok:
				m.log.Warn("the watch of the live orchestrators stopped; watching again")
				_ = w.Stop()
				w, updates = nil, nil
			case e != nil:
				m.update(e)
			}
		}
		if err := m.err(); err != nil {
			return err
		}
	}
}

// rewatch begins the watch again and replaces the live set by what it
// reads first; nil when it cannot yet (the next tick tries again).
func (m *members) rewatch(ctx context.Context) (jetstream.KeyWatcher, <-chan jetstream.KeyValueEntry) {
	w, err := m.kv.WatchAll(ctx)
	if err != nil {
		return nil, nil
	}
	fresh := map[string]bool{}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if e.Key() == m.name {
			m.update(e) // this process's own key: the twin check
		}
		if e.Operation() == jetstream.KeyValuePut {
			fresh[e.Key()] = true
		}
	}
	m.mu.Lock()
	m.live = fresh
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
	return w, w.Updates()
}

// reconcile replaces the live set by the bucket's keys when they differ,
// and reports whether it could list them.
func (m *members) reconcile(ctx context.Context) bool {
	keys, err := m.kv.ListKeys(ctx)
	if err != nil {
		return false
	}
	fresh := map[string]bool{}
	for k := range keys.Keys() {
		fresh[k] = true
	}
	if ctx.Err() != nil { // cut short: a partial list is no live set
		return false
	}
	m.mu.Lock()
	delete(fresh, m.name) // this one's own entry is the twin check's
	if m.live[m.name] {
		fresh[m.name] = true
	}
	same := maps.Equal(fresh, m.live)
	if !same {
		m.live = fresh
	}
	m.mu.Unlock()
	if !same {
		m.log.Info("orchestrators changed", "live", len(fresh), "found", "listing the keys")
		select {
		case m.changed <- struct{}{}:
		default:
		}
	}
	return true
}

func (m *members) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.twin
}

// names are the live orchestrators, this one always among them.
func (m *members) names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []string{m.name}
	for n := range m.live {
		if n != m.name {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// alone reports whether no other orchestrator is alive.
func (m *members) alone() bool { return len(m.names()) == 1 }

// owned lists the partitions this orchestrator owns among live.
func (m *members) owned(live []string) []int {
	var ps []int
	for p := range bus.Partitions {
		if bus.Owner(p, live) == m.name {
			ps = append(ps, p)
		}
	}
	return ps
}
