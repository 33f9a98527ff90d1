package fsm

import (
	"bytes"
	"encoding/json"

	"github.com/jetloop/jetloop/internal/events"
)

// plan is what a step does with the calls a model asked for: which run, and
// whether the doom loop or the budget cut the rest off. It is derived from the
// state and the model's answer alone, so Evolve and Decide agree on it.
type plan struct {
	run    []events.ToolCall
	doomed string // name of the call that would have repeated doom_loop times
	cut    bool   // calls beyond the budget were dropped
	runSig string // doom-loop run after the calls that run
	runLen int
}

func (s *State) plan(d events.ModelCompletedData) plan {
	p := plan{runSig: s.runSig, runLen: s.runLen}
	if d.Error != "" || s.Limits.Steps == 0 {
		return p
	}
	remaining := s.Limits.Budget - s.Spent()
	for _, c := range d.ToolCalls {
		sig := signature(c)
		n := 1
		if sig == p.runSig {
			n = p.runLen + 1
		}
		// Checked before dispatch: the call that would make the
		// doom_loop-th identical call in a row never runs.
		if n >= s.Limits.DoomLoop {
			p.doomed = c.Name
			break
		}
		if len(p.run) >= remaining {
			p.cut = true
			break
		}
		p.runSig, p.runLen = sig, n
		p.run = append(p.run, c)
	}
	return p
}

// signature identifies a call for the doom loop: its name and the canonical
// JSON of its arguments, so key order and spacing do not hide a repeat.
func signature(c events.ToolCall) string {
	return c.Name + "\x00" + canonical(c.Arguments)
}

func canonical(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return string(raw)
	}
	return string(b)
}
