package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/lru"
	"github.com/jetloop/jetloop/internal/workflow"
)

// historyCache keeps the transcripts of finished turns, which never change,
// so the turns of a long session do not fold their predecessors again and
// again.
type historyCache struct {
	store *logstore.Store
	size  int

	mu          sync.Mutex
	transcripts *lru.Cache[string, []events.Message]
	// ended are the finished turns seen, by id: a turn's end never changes,
	// so a session's next turn reads only the logs of turns not seen ended
	// (a workflow's task k would otherwise read k-1 logs, n²/2 in all).
	ended *lru.Cache[string, ended]
}

// ended is where a finished turn's log ends, and whether it was only
// rejected (which is never remembered: a valid submission replaces it). A
// workflow's log in the session is remembered too, as no turn's: it never
// becomes one, and a workflow's every task would otherwise read it again.
type ended struct {
	seq uint64
	// at is the time of the log's turn.finished: a session's turns may be
	// in different streams (events.Layout), whose sequences do not compare.
	at       time.Time
	rejected bool
	workflow bool
}

// maxEnded bounds the ended turns remembered; past it, the one asked for
// least recently is forgotten (and read again if asked).
const maxEnded = 100_000

func newHistoryCache(store *logstore.Store, size int) *historyCache {
	return &historyCache{store: store, size: size, transcripts: lru.New[string, []events.Message](size), ended: lru.New[string, ended](maxEnded)}
}

// end reads whether a turn finished, from memory when it was seen finished
// (or seen to be a workflow's log, which is no turn's and never finishes as one).
func (h *historyCache) end(ctx context.Context, turn string) (ended, bool, error) {
	h.mu.Lock()
	e, ok := h.ended.Get(turn)
	h.mu.Unlock()
	if ok {
		return e, !e.workflow, nil
	}
	last, seq, ok, err := h.store.Last(ctx, turn)
	if err == nil && ok && last.Type.Workflow() {
		h.remember(turn, ended{workflow: true})
		return ended{workflow: true}, false, nil
	}
	if err != nil || !ok || last.Type != events.TurnFinished {
		return ended{}, false, err
	}
	e = ended{seq: seq, at: last.Time, rejected: last.Step == 0 && last.Seq == 1}
	if e.rejected {
		// A valid submission of a rejected turn replaces its log: not
		// final.
		return e, true, nil
	}
	h.remember(turn, e)
	return e, true, nil
}

// remember keeps where a finished turn's log ends.
func (h *historyCache) remember(turn string, e ended) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended.Put(turn, e)
}

// finished remembers a turn that finished here: where its log ends and its
// transcript, so the session's next turn reads neither back (a read of a
// finished turn's log is one direct get per event, on the next turn's
// start).
func (h *historyCache) finished(turn string, seq uint64, at time.Time, msgs []events.Message) {
	h.remember(turn, ended{seq: seq, at: at})
	h.keep(turn, msgs)
}

// session returns the conversation of a session's finished turns, oldest
// first, and their ids. Rejected turns said nothing; unfinished turns are not
// history yet.
func (h *historyCache) session(ctx context.Context, session, except string) ([]events.Message, []string, error) {
	subjects, err := h.store.Subjects(ctx, h.store.Layout().SessionFilter(session))
	if err != nil {
		return nil, nil, err
	}
	type done struct {
		turn string
		end  ended
	}
	var turns []done
	for subj := range subjects {
		turn := bus.TurnOf(subj)
		if turn == except {
			continue
		}
		e, finished, err := h.end(ctx, turn)
		if err != nil {
			return nil, nil, err
		}
		if !finished || e.rejected {
			continue // unfinished, or rejected: a log of one turn.finished
		}
		turns = append(turns, done{turn, e})
	}
	// A turn's place in the session is when it finished: by the time its
	// log says, then, for turns of one stream, by where their logs end.
	slices.SortFunc(turns, func(a, b done) int {
		return cmp.Or(a.end.at.Compare(b.end.at), cmp.Compare(a.end.seq, b.end.seq), strings.Compare(a.turn, b.turn))
	})
	ids := make([]string, len(turns))
	for i, t := range turns {
		ids[i] = t.turn
	}
	msgs, err := h.messages(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	return msgs, ids, nil
}

// fill gives a folded state the history its turn.started names.
func (h *historyCache) fill(ctx context.Context, st *fsm.State) error {
	if len(st.HistoryTurns) == 0 && st.ForkedFrom == nil {
		return nil
	}
	msgs, err := h.before(ctx, st, 0)
	if err != nil {
		return err
	}
	if len(msgs) != st.HistoryLen {
		return fmt.Errorf("orchestrator: turn %s: history of %d messages rebuilt as %d", st.TurnID, st.HistoryLen, len(msgs))
	}
	st.History = msgs
	return nil
}

func (h *historyCache) messages(ctx context.Context, turns []string) ([]events.Message, error) {
	return h.taskMessages(ctx, turns, nil)
}

// taskMessages is the conversation of turns and, for a workflow's task
// under keep_tasks, the note that stands for the tasks left out: after the
// first task's turn, before the next task's that is kept. It is computed
// from the task's number alone, so a turn's history rebuilt after a
// restart is the one its turn.started counted.
func (h *historyCache) taskMessages(ctx context.Context, turns []string, w *events.WorkflowRef) ([]events.Message, error) {
	var out []events.Message
	dropped := 0
	if w != nil {
		dropped = workflow.DroppedTasks(w.Task, w.KeepTasks)
	}
	note := func() {
		if dropped > 0 {
			out = append(out, events.Message{Role: events.RoleUser, Content: fmt.Sprintf(workflow.TaskCompactionNote, dropped)})
			dropped = 0
		}
	}
	for _, t := range turns {
		if w != nil {
			if task, ok := taskOf(t, w.WorkflowID); ok && task > 1 {
				note()
			}
		}
		msgs, err := h.transcript(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	note()
	return out, nil
}

func (h *historyCache) transcript(ctx context.Context, turn string) ([]events.Message, error) {
	h.mu.Lock()
	msgs, ok := h.transcripts.Get(turn)
	h.mu.Unlock()
	if ok {
		return msgs, nil
	}
	st, _, err := h.store.Load(ctx, turn)
	if err != nil {
		return nil, err
	}
	if !st.Done() {
		return nil, fmt.Errorf("orchestrator: history turn %s is not finished", turn)
	}
	msgs = st.Transcript()
	h.keep(turn, msgs)
	return msgs, nil
}

func (h *historyCache) keep(key string, msgs []events.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.transcripts.Put(key, msgs)
}

// maxForkDepth bounds a chain of forks of forks. Each names a turn that
// existed before it, so a chain cannot loop; the bound only guards against a
// log edited by hand.
const maxForkDepth = 64

// before returns the conversation that precedes a turn's own messages: the
// session turns its turn.started names and, for a fork, the conversation of
// the turn it was forked from up to the fork's step.
func (h *historyCache) before(ctx context.Context, st *fsm.State, depth int) ([]events.Message, error) {
	msgs, err := h.taskMessages(ctx, st.HistoryTurns, st.Workflow)
	if err != nil {
		return nil, err
	}
	if st.ForkedFrom == nil {
		return msgs, nil
	}
	if depth >= maxForkDepth {
		return nil, fmt.Errorf("orchestrator: turn %s: forks nested deeper than %d", st.TurnID, maxForkDepth)
	}
	prefix, ok := h.cached(forkKey(*st.ForkedFrom))
	if !ok {
		if _, prefix, err = h.fork(ctx, *st.ForkedFrom, depth+1); err != nil {
			return nil, err
		}
	}
	return append(slices.Clip(msgs), prefix...), nil
}

func forkKey(ff events.ForkedFrom) string {
	// Turn ids never hold '@', so this never names a finished turn.
	return fmt.Sprintf("%s@%d", ff.TurnID, ff.Step)
}

func (h *historyCache) cached(key string) ([]events.Message, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	msgs, ok := h.transcripts.Get(key)
	return msgs, ok
}

// fork returns the state of a turn at the point a fork from one of its steps
// starts, and the fork's whole history: what preceded that turn, its input
// and its steps up to the fork's step. The prefix of a step once checked
// never changes, so it is cached like a finished turn's transcript. An error
// that is the sender's (no such turn, a step never checked) is an
// *fsm.ForkError.
func (h *historyCache) fork(ctx context.Context, ff events.ForkedFrom, depth int) (*fsm.State, []events.Message, error) {
	log, _, err := h.store.Read(ctx, ff.TurnID)
	if err != nil {
		return nil, nil, err
	}
	if len(log) == 0 {
		return nil, nil, &fsm.ForkError{Turn: ff.TurnID, Step: ff.Step, Reason: "no such turn"}
	}
	point, err := fsm.ForkPoint(log, ff.Step)
	if err != nil {
		return nil, nil, err
	}
	key := forkKey(ff)
	if msgs, ok := h.cached(key); ok {
		return point, msgs, nil
	}
	prior, err := h.before(ctx, point, depth)
	if err != nil {
		return nil, nil, err
	}
	if len(prior) != point.HistoryLen {
		return nil, nil, fmt.Errorf("orchestrator: turn %s: history of %d messages rebuilt as %d", ff.TurnID, point.HistoryLen, len(prior))
	}
	msgs := append(slices.Clip(prior), point.Messages...)
	h.keep(key, msgs)
	return point, msgs, nil
}
