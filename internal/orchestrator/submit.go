package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/schemas"
)

// starter is what a submission is checked and resolved against: the
// agents, the tools the live workers serve, the model providers, the
// default clocks, and the logs of the turns it names (its parent, its
// workflow, the turn it forks, its session's history).
type starter struct {
	agents    *agents.Set
	tools     *toolCatalog
	providers map[string]model.Provider
	store     *logstore.Store
	history   *historyCache
	admit     admitter
	// clock and workflowClock are the timeouts of turns whose agent, and
	// workflows whose submission, set none.
	clock, workflowClock time.Duration
}

// submit starts a turn, or records why it cannot start: the submission goes
// to the dead-letter stream and, when its turn id is usable and new, the turn
// gets a log of one turn.finished (rejected).
func (s *shard) submit(ctx context.Context, log *slog.Logger, data []byte, redelivered bool) error {
	var sub events.Submit
	verr := schemas.Validate("submit", data)
	if verr == nil {
		if err := json.Unmarshal(data, &sub); err != nil {
			verr = err
		}
	}
	if verr != nil {
		// Salvage the turn id, if any, so the rejection is visible in the
		// turn's own log too.
		var id struct {
			TurnID    string `json:"turn_id"`
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(data, &id)
		return s.reject(ctx, log, id.TurnID, id.SessionID, verr.Error(), redelivered)
	}
	log = log.With("turn", sub.TurnID)
	if sub.Parent != nil || strings.HasPrefix(sub.TurnID, fsm.ChildPrefix) {
		return s.startChild(ctx, log, &sub, data, redelivered)
	}
	// What a start reads (the agent's history, the turn's log) does not
	// depend on whether a task's workflow started it: they are read
	// together, a round trip each, at once.
	r := s.starter.readStart(ctx, &sub, !s.cache.Contains(sub.TurnID))
	defer r.wait()
	if sub.Workflow != nil {
		if err := s.starter.startedTask(ctx, &sub); err != nil {
			var d *deadLetter
			if errors.As(err, &d) {
				return s.reject(ctx, log, sub.TurnID, sub.SessionID, d.reason, redelivered)
			}
			return err
		}
		// A task's turn that cannot start still ends its task.
		err := s.start(ctx, log, &sub, data, r, redelivered)
		var d *deadLetter
		if errors.As(err, &d) {
			if nerr := s.eff.notifyTask(ctx, sub.Workflow, sub.TurnID, events.TurnFinishedData{
				StopReason: events.StopRejected, Error: d.reason}); nerr != nil {
				return &retry{err: nerr}
			}
		}
		return err
	}
	return s.start(ctx, log, &sub, data, r, redelivered)
}

// startChild starts a subagent's turn, or rejects a submission that is not
// the one its parent's call made. Whatever becomes of the parent's own
// submission — started, refused, or found squatted by a client's earlier
// one — the parent's call hears of the child's end once there is one.
func (s *shard) startChild(ctx context.Context, log *slog.Logger, sub *events.Submit, data []byte, redelivered bool) error {
	genuine, err := s.starter.checkChild(ctx, sub)
	if err == nil {
		r := s.starter.readStart(ctx, sub, !s.cache.Contains(sub.TurnID))
		err = s.start(ctx, log, sub, data, r, redelivered)
		r.wait()
	} else if d := (*deadLetter)(nil); errors.As(err, &d) {
		err = s.reject(ctx, log, sub.TurnID, sub.SessionID, d.reason, redelivered)
	}
	if !genuine {
		return err
	}
	var r *retry
	if errors.As(err, &r) || errors.Is(err, errCrashed) {
		return err
	}
	if nerr := s.eff.notifyParent(ctx, sub.Parent, sub.TurnID, sub.Agent); nerr != nil {
		return &retry{err: nerr}
	}
	var d *deadLetter
	if errors.As(err, &d) && strings.HasSuffix(d.reason, "already exists") {
		// A turn of the child's id that is not the child (a client's
		// submission before the call): the call fails with an error
		// result saying so, read from that turn's rejection.
		log.Warn("a subagent's turn id was taken before its call", "parent", sub.Parent.TurnID, "call", sub.Parent.CallID)
		return nil
	}
	return err
}

// clockOf is the timeout a turn of agent a starts with, before its
// submission tightens it.
func (sr *starter) clockOf(a *agents.Agent) time.Duration {
	if a.Timeout > 0 {
		return a.Timeout
	}
	return sr.clock
}

// startReads is what starting a turn reads from the server, read in
// goroutines of its own while the shard checks the rest: the Start, with
// the session's history, and the turn's log, unless the shard has it.
type startReads struct {
	wg sync.WaitGroup
	// sub is the submission as resolve completed it (its session).
	sub   events.Submit
	start fsm.Start
	err   error
	log   *entry[*fsm.State]
	lerr  error
}

func (sr *starter) readStart(ctx context.Context, sub *events.Submit, readLog bool) *startReads {
	r := &startReads{sub: *sub}
	turn := sub.TurnID
	r.wg.Go(func() { r.start, r.err = sr.resolve(ctx, &r.sub) })
	if readLog {
		r.wg.Go(func() { r.log, r.lerr = sr.loadEntry(ctx, turn) })
	}
	return r
}

// loadEntry folds a turn from its log, history included. It touches no
// shard's state, so a read ahead of an input's decision runs it too.
func (sr *starter) loadEntry(ctx context.Context, turn string) (*entry[*fsm.State], error) {
	st, seq, err := sr.store.Load(ctx, turn)
	if errors.Is(err, logstore.ErrIsWorkflow) {
		return nil, &deadLetter{fmt.Sprintf("%q is a workflow, not a turn", turn)}
	}
	if err != nil {
		return nil, &retry{err: err}
	}
	if st.Exists() && !st.Done() {
		if err := sr.history.fill(ctx, st); err != nil {
			return nil, &retry{err: err}
		}
	}
	return &entry[*fsm.State]{state: st, seq: seq}, nil
}

// wait waits for the reads; it may be called more than once.
func (r *startReads) wait() { r.wg.Wait() }

// start starts the turn of a valid submission, or rejects it.
func (s *shard) start(ctx context.Context, log *slog.Logger, sub *events.Submit, data []byte, r *startReads, redelivered bool) error {
	digest := digest(data)
	r.wait()
	*sub = r.sub
	start, err := r.start, r.err
	if err != nil {
		var d *deadLetter
		if !errors.As(err, &d) {
			return err
		}
		return s.reject(ctx, log, sub.TurnID, sub.SessionID, d.reason, redelivered)
	}
	start.Digest = digest
	if sub.Parent == nil && sub.Workflow == nil {
		reason, settle, err := s.admit.refuse(ctx, sub.TurnID)
		if err != nil {
			return err
		}
		if reason != "" {
			return s.reject(ctx, log, sub.TurnID, sub.SessionID, reason, redelivered)
		}
		defer settle() // the turn's index entry is written in apply, below
	}
	if r.log != nil || r.lerr != nil {
		s.preloaded.Put(sub.TurnID, &preloaded{turn: sub.TurnID, e: r.log, err: r.lerr})
		defer s.preloaded.Delete(sub.TurnID)
	}
	err = s.apply(ctx, log, sub.TurnID, start, redelivered)
	if errors.Is(err, fsm.ErrTurnExists) && sub.Parent == nil {
		// (A subagent's id taken by a rejected submission stays taken:
		// its parent's call fails, saying so, rather than have a child
		// whose id a client chose the moment of.)
		cleared, cerr := s.clearRejected(ctx, log, sub.TurnID)
		if cerr != nil {
			return &retry{err: cerr}
		}
		if cleared {
			err = s.apply(ctx, log, sub.TurnID, start, redelivered)
		}
	}
	if errors.Is(err, fsm.ErrTurnExists) {
		// The machine lets the very submission that started the turn
		// through (it changes nothing); this one differs.
		return &deadLetter{fmt.Sprintf("turn %q already exists", sub.TurnID)}
	}
	if d := (*deadLetter)(nil); errors.As(err, &d) {
		// A turn that could not start (its start cannot be stored): its
		// log says so, like any rejected submission's.
		return s.reject(ctx, log, sub.TurnID, sub.SessionID, d.reason, redelivered)
	}
	return err
}

// clearRejected removes the log of a turn that was only ever rejected (one
// turn.finished, rejected, and nothing else), so that a valid submission of
// that turn, such as a dead letter fixed and re-sent, starts it. Such a turn
// never started: no step ran, no session history names it, nothing else
// refers to its log. It reports whether it removed one.
func (s *shard) clearRejected(ctx context.Context, log *slog.Logger, turn string) (bool, error) {
	last, seq, ok, err := s.store.Last(ctx, turn)
	if err != nil || !ok {
		return false, err
	}
	if last.Seq != 1 || last.Type != events.TurnFinished {
		return false, nil
	}
	var fin events.TurnFinishedData
	if err := json.Unmarshal(last.Data, &fin); err != nil || fin.StopReason != events.StopRejected {
		return false, nil
	}
	// The purge removes the rejection and nothing after it: were the log to
	// have moved on meanwhile, the start's expected sequence would fail.
	if err := s.store.PurgeThrough(ctx, last.SessionID, turn, seq); err != nil {
		return false, fmt.Errorf("orchestrator: clear the rejection of %s: %w", turn, err)
	}
	s.cache.Delete(turn)
	log.Info("a valid submission of a rejected turn replaces its rejection", "was", fin.Error)
	return true, nil
}

func (s *shard) reject(ctx context.Context, log *slog.Logger, turn, session, reason string, redelivered bool) error {
	if !events.ValidID(turn) {
		return &deadLetter{reason}
	}
	if session == "" || !events.ValidID(session) {
		session = turn
	}
	err := s.apply(ctx, log, turn, fsm.Reject{TurnID: turn, SessionID: session, Reason: reason}, redelivered)
	if err != nil && !errors.Is(err, fsm.ErrTurnExists) {
		return err
	}
	return &deadLetter{reason}
}

// digest identifies a submission by its content, whatever its key order.
func digest(data []byte) string { return events.SubmitDigest(data) }

// resolve turns a submission into the machine's Start: the agent, its model
// and script, the effective limits, the tools offered now, the history.
func (sr *starter) resolve(ctx context.Context, sub *events.Submit) (fsm.Start, error) {
	if sub.ForkedFrom != nil {
		return sr.resolveFork(ctx, sub)
	}
	if sub.SessionID == "" {
		sub.SessionID = sub.TurnID
	}
	a, err := sr.agent(sub.Agent)
	if err != nil {
		return fsm.Start{}, err
	}
	modelName := sub.Model
	if modelName == "" {
		modelName = a.Model
	}
	ownModel := sub.Model == "" && len(sub.Script) == 0
	script, err := sr.script(ctx, modelName, sub.Script, ownModel)
	if err != nil {
		return fsm.Start{}, err
	}
	limits := fsm.EffectiveLimits(a.Steps, a.Budget, sr.clockOf(a), a.DoomLoop, sub.Limits)
	tools, err := sr.offered(a)
	if err != nil {
		return fsm.Start{}, err
	}
	history, turns, err := sr.history.session(ctx, sub.SessionID, sub.TurnID)
	if err != nil {
		return fsm.Start{}, &retry{err: err}
	}
	if w := sub.Workflow; w != nil && w.KeepTasks > 0 {
		turns = keptTasks(turns, w)
		if history, err = sr.history.taskMessages(ctx, turns, w); err != nil {
			return fsm.Start{}, &retry{err: err}
		}
	}
	input := sub.Input
	if input == nil {
		input = []events.Message{}
	}
	return fsm.Start{
		TurnID: sub.TurnID, SessionID: sub.SessionID, Input: input, History: history,
		Setup: fsm.Setup{Agent: a.Name, Model: modelName, System: a.Prompt,
			Limits: limits, Tools: tools, Approval: a.Approval, FinalTools: a.FinalTools,
			HistoryTurns: turns, Script: script, Metadata: sub.Metadata,
			KeepSteps: a.KeepSteps, Summarizer: a.Summarizer, OverTokens: a.OverTokens, Workflow: sub.Workflow, Parent: sub.Parent},
	}, nil
}

// keptTasks is the history of a workflow's task under keep_tasks N: the
// first task's turn and the last N-1 tasks' before this one (the seed's
// compactor, applied to whole tasks, so a call is never split from its
// result); turns of the session that are no task of this workflow stay.
// One note stands for the tasks left out (taskMessages).
func keptTasks(turns []string, w *events.WorkflowRef) []string {
	var out []string
	for _, t := range turns {
		task, ok := taskOf(t, w.WorkflowID)
		if !ok || task == 1 || task > w.Task-w.KeepTasks {
			out = append(out, t)
		}
	}
	return out
}

// taskOf reads the task number of a task's turn id <workflow_id>-<i>.
func taskOf(turn, workflow string) (int, bool) {
	rest, ok := strings.CutPrefix(turn, workflow+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n > 0
}

// resolveFork turns a forked submission into the machine's Start. The fork's
// history is the original turn's conversation up to the fork's step: what
// preceded the original, its input, and its steps 1..N, each model answer
// with the results of the calls it ran. The submission's input, if any,
// follows as this turn's new messages. Unless the submission says otherwise
// the fork runs in the original's session with the original's agent, and
// with the original's model and script when it keeps the agent; its limits
// are its agent's, counted afresh.
func (sr *starter) resolveFork(ctx context.Context, sub *events.Submit) (fsm.Start, error) {
	point, history, err := sr.history.fork(ctx, *sub.ForkedFrom, 0)
	if err != nil {
		var fe *fsm.ForkError
		if errors.As(err, &fe) {
			return fsm.Start{}, &deadLetter{fmt.Sprintf("cannot fork turn %q from step %d: %s", fe.Turn, fe.Step, fe.Reason)}
		}
		return fsm.Start{}, &retry{err: err}
	}
	if sub.SessionID == "" {
		sub.SessionID = point.SessionID
	}
	name := sub.Agent
	if name == "" {
		name = point.Agent
	}
	a, err := sr.agent(name)
	if err != nil {
		return fsm.Start{}, err
	}
	modelName, inline := sub.Model, sub.Script
	if modelName == "" {
		modelName = a.Model
		if sub.Agent == "" {
			modelName = point.Model
			if len(inline) == 0 && modelName == "script" {
				inline = point.Script
			}
		}
	}
	// The original's model is the agent's own only when the agents file
	// still names it and no script of a submission comes along with it.
	ownModel := sub.Model == "" && len(inline) == 0 && modelName == a.Model
	script, err := sr.script(ctx, modelName, inline, ownModel)
	if err != nil {
		return fsm.Start{}, err
	}
	// A fork that keeps everything of the original's, its script included,
	// goes on with the responses the original would have had after the
	// fork's step; a new agent, model or script starts its script afresh.
	scriptIndex := 0
	if sub.Agent == "" && sub.Model == "" && len(sub.Script) == 0 {
		scriptIndex = point.ScriptIndex
	}
	input := sub.Input
	if input == nil {
		input = []events.Message{}
	}
	tools, err := sr.offered(a)
	if err != nil {
		return fsm.Start{}, err
	}
	return fsm.Start{
		TurnID: sub.TurnID, SessionID: sub.SessionID, Input: input, History: history,
		Setup: fsm.Setup{Agent: a.Name, Model: modelName, System: a.Prompt,
			Limits: fsm.EffectiveLimits(a.Steps, a.Budget, sr.clockOf(a), a.DoomLoop, sub.Limits),
			Tools:  tools, Approval: a.Approval, FinalTools: a.FinalTools,
			Script: script, Metadata: sub.Metadata, KeepSteps: a.KeepSteps, ScriptIndex: scriptIndex,
			Summarizer: a.Summarizer, OverTokens: a.OverTokens,
			ForkedFrom: &events.ForkedFrom{TurnID: sub.ForkedFrom.TurnID, Step: sub.ForkedFrom.Step}},
	}, nil
}

func (sr *starter) agent(name string) (*agents.Agent, error) {
	if name == "" {
		names := sr.agents.Names()
		if len(names) != 1 {
			return nil, &deadLetter{"the submission names no agent"}
		}
		name = names[0]
	}
	a, ok := sr.agents.Get(name)
	if !ok {
		return nil, &deadLetter{fmt.Sprintf("unknown agent %q (known: %v)", name, sr.agents.Names())}
	}
	return a, nil
}

// script checks the model a turn names and returns the script a scripted
// turn runs, kept in its log so the turn never needs its submission again.
// ownModel says the model is the agent's own, named by the agents file
// alone: its script runs even where submissions may not run scripts (see
// WithAllowScripts).
func (sr *starter) script(ctx context.Context, modelName string, inline json.RawMessage, ownModel bool) (json.RawMessage, error) {
	if modelName == "" {
		return nil, &deadLetter{"no model: the agent names none and the submission none"}
	}
	provider, name, err := model.Spec(modelName)
	if err != nil {
		return nil, &deadLetter{err.Error()}
	}
	if provider != "script" {
		if _, ok := sr.providers[provider]; !ok {
			return nil, &deadLetter{fmt.Sprintf("model %q: provider %q is not configured", modelName, provider)}
		}
		if len(inline) > 0 {
			return nil, &deadLetter{"a script is only allowed with model script"}
		}
		return nil, nil
	}
	// A bare script comes from a submission whoever names the model.
	if !sr.admit.allowsScripts() && (!ownModel || name == "") {
		return nil, &deadLetter{ScriptsOff}
	}
	var sc *model.Script
	switch {
	case name != "":
		sc, err = sr.admit.loadScript(ctx, name, ownModel)
		if err != nil {
			return nil, err
		}
	case len(inline) > 0:
		if sc, err = model.ParseScript(inline); err != nil {
			return nil, &deadLetter{err.Error()}
		}
	default:
		return nil, &deadLetter{"model script needs a script"}
	}
	return events.Marshal(sc) // as submitted: json.Marshal would grow every < six-fold
}

// offered lists the tools an agent may call that some worker serves now,
// with ask_user where the agent allows it. While the catalog shows no
// worker's tool and may only not have heard from the workers yet
// (toolCatalog.settling), a start whose agent calls workers' tools is held
// back for that long rather than offered none of them.
func (sr *starter) offered(a *agents.Agent) ([]events.ToolSpec, error) {
	if wait := sr.tools.settling(time.Now()); wait > 0 && sr.callsWorkers(a) {
		return nil, &retry{err: fmt.Errorf("orchestrator: no worker's tool in the registry yet, %s after this process began to watch it: held back %s at most",
			time.Since(sr.tools.started).Round(time.Millisecond), wait.Round(time.Millisecond)), hold: wait}
	}
	// An agent tool is served by the orchestrator: no worker's tool of the
	// same name is offered beside it.
	out := sr.subagentSpecs(a)
	for _, t := range sr.tools.live() {
		if t.Name != fsm.AskUser && a.AllowsTool(t.Name) && !slices.Contains(a.Subagents, t.Name) {
			out = append(out, t)
		}
	}
	if a.AllowsTool(fsm.AskUser) {
		out = append(out, fsm.AskUserSpec)
	}
	slices.SortFunc(out, func(x, y events.ToolSpec) int {
		switch {
		case x.Name < y.Name:
			return -1
		case x.Name > y.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// callsWorkers reports whether a may call a tool a worker serves: any, or
// one it names that is neither ask_user nor an agent.
func (sr *starter) callsWorkers(a *agents.Agent) bool {
	if a.Tools == nil {
		return true
	}
	return slices.ContainsFunc(a.Tools, func(t string) bool { return t != fsm.AskUser && !slices.Contains(a.Subagents, t) })
}
