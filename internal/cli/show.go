package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/turnlog"
)

// show prints one turn on one screen: where it stands, what it runs with,
// what it has used, and what it answered or waits for.
func show(ctx context.Context, c *command, args []string) int {
	asJSON := c.flags.Bool("json", false, "print the summary as one JSON object")
	file := c.flags.String("file", "", "read the log from a JSON-lines file (as export writes it)")
	if !c.parse(args) {
		return c.exit
	}
	turn, ok := c.turnOrFile(*file)
	if !ok {
		return c.usageErr("usage: jetloop show [--json] [--file FILE] TURN")
	}
	log, err := c.readLog(ctx, turn, *file)
	if err != nil {
		return c.fail("%v", err)
	}
	st, err := fsm.Fold(log)
	if err != nil {
		return c.fail("the log does not fold: %v", err)
	}
	s := detailed(st, log)
	if *asJSON {
		out, _ := json.MarshalIndent(s, "", "  ")
		fmt.Fprintln(c.stdout, string(out))
		return ExitOK
	}
	printShow(c.stdout, s, time.Now())
	return ExitOK
}

// detailed is a turn's summary with everything show prints.
func detailed(st *fsm.State, log []events.Envelope) Summary {
	s := Summary{Turn: turnlog.Of(st)}
	d := &Detail{Tools: []string{}, Input: []events.Message{}, ModelCalls: st.ModelCalls,
		InputTokens: st.InputTokens, OutputTokens: st.OutputTokens, Metadata: st.Metadata}
	if log[0].Type == events.TurnStarted {
		var ts events.TurnStartedData
		if json.Unmarshal(log[0].Data, &ts) == nil {
			d.Limits, d.History, d.HistoryTurns = ts.Limits, ts.History, ts.HistoryTurns
			if ts.Compaction != nil {
				d.KeepSteps = ts.Compaction.KeepSteps
			}
			d.Tools = append(d.Tools, ts.Tools...)
			d.Input = append(d.Input, ts.Input...)
		}
	}
	if st.Finished != nil {
		d.Output = st.Finished.Output
	}
	s.Detail = d
	return s
}

func printShow(w io.Writer, s Summary, now time.Time) {
	d := s.Detail
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "%-11s %s\n", k, fmt.Sprintf(format, a...)) }
	row("turn", "%s", s.TurnID)
	row("session", "%s", s.SessionID)
	row("status", "%s", statusText(s.Turn))
	if s.Agent != "" {
		row("agent", "%s, model %s", s.Agent, s.Model)
		timeout := "none"
		if d.Limits.TimeoutMs > 0 {
			timeout = (time.Duration(d.Limits.TimeoutMs) * time.Millisecond).String()
		}
		compaction := ""
		if d.KeepSteps > 0 {
			compaction = fmt.Sprintf(", compaction keeps %d steps", d.KeepSteps)
		}
		row("limits", "steps %d, budget %d, doom loop %d, timeout %s%s", deref(d.Limits.Steps), d.Limits.Budget, d.Limits.DoomLoop, timeout, compaction)
		row("tools", "%s", orDash(strings.Join(d.Tools, " ")))
	}
	if s.ForkedFrom != nil {
		row("forked", "from %s at step %d", s.ForkedFrom.TurnID, s.ForkedFrom.Step)
	}
	switch {
	case s.ForkedFrom != nil:
		row("history", "%d message(s): %s's conversation up to step %d", d.History, s.ForkedFrom.TurnID, s.ForkedFrom.Step)
	case d.History > 0:
		row("history", "%d message(s) from earlier turns: %s", d.History, strings.Join(d.HistoryTurns, " "))
	}
	for _, m := range d.Input {
		row("input", "%s: %s", m.Role, clip(m.Content, 100))
	}
	row("used", "steps %d · tool calls %d · model calls %d · tokens %d in / %d out", s.Steps, s.ToolCalls,
		d.ModelCalls, d.InputTokens, d.OutputTokens)
	took := s.Last.Sub(s.Started).Round(time.Millisecond)
	if s.Status == StatusFinished {
		row("time", "started %s (%s ago), took %s", s.Started.Format(time.RFC3339), age(now.Sub(s.Started)), took)
	} else {
		row("time", "started %s (%s ago), last event %s ago", s.Started.Format(time.RFC3339), age(now.Sub(s.Started)), age(now.Sub(s.Last)))
	}
	if wt := s.Waiting; wt != nil {
		if wt.Kind == events.PauseInput {
			row("waits for", "a reply to call %s: %s", wt.CallID, wt.Question)
			row("", "jetloop reply %s %s TEXT", s.TurnID, wt.CallID)
		} else {
			row("waits for", "approval of %s %s (call %s)", wt.Tool, clip(string(wt.Arguments), 60), wt.CallID)
			row("", "jetloop approve|deny %s %s", s.TurnID, wt.CallID)
		}
	}
	if s.Error != "" {
		row("error", "%s", s.Error)
	}
	if d.Output != "" {
		fmt.Fprintf(w, "output\n%s\n", indent(d.Output))
	}
}
