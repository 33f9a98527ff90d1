package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Turn statuses, as turns --status takes them.
const (
	StatusRunning  = client.StatusRunning
	StatusPaused   = client.StatusPaused
	StatusFinished = client.StatusFinished
)

// Summary is a turn at a glance, as `turns --json` and `show --json` print
// it.
type Summary struct {
	client.Turn

	// Only show fills these.
	Detail *Detail `json:"detail,omitempty"`
}

// Detail is what show adds to a summary.
type Detail struct {
	Limits       events.Limits     `json:"limits"`
	KeepSteps    int               `json:"keep_steps,omitempty"` // compaction; 0 sends everything
	Tools        []string          `json:"tools"`
	History      int               `json:"history"`
	HistoryTurns []string          `json:"history_turns,omitempty"`
	Input        []events.Message  `json:"input"`
	ModelCalls   int               `json:"model_calls"`
	InputTokens  int               `json:"input_tokens"`
	OutputTokens int               `json:"output_tokens"`
	Output       string            `json:"output,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// statusText is a summary's status in a table cell.
func statusText(s client.Turn) string {
	switch s.Status {
	case StatusFinished:
		return "finished: " + string(s.StopReason)
	case StatusPaused:
		if s.Waiting == nil {
			return string(StatusPaused)
		}
		if s.Waiting.Kind == events.PauseInput {
			return fmt.Sprintf("paused: asks %q", clip(s.Waiting.Question, 40))
		}
		return fmt.Sprintf("paused: approve %s %s", s.Waiting.Tool, clip(string(s.Waiting.Arguments), 30))
	}
	return string(s.Status)
}

// turns lists turns with their status, newest first.
func turns(ctx context.Context, c *command, args []string) int {
	session := c.flags.String("session", "", "only the turns of this session")
	status := c.flags.String("status", "", "only turns that are running, paused or finished, or that stopped with this stop reason")
	agent := c.flags.String("agent", "", "only the turns of this agent")
	asJSON := c.flags.Bool("json", false, "print one JSON object per turn")
	sinceFlag := c.flags.String("since", "", "only turns started since then: a duration back from now (90m, 24h) or a time (2026-11-28T09:00:00Z)")
	limit := c.flags.Int("limit", 0, "at most this many turns, the newest (0: all)")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 0 {
		return c.usageErr("usage: jetloop turns [--session S] [--status S] [--agent A] [--since D] [--limit N] [--json]")
	}
	var cutoff time.Time
	if *sinceFlag != "" {
		var err error
		if cutoff, err = parseSince(*sinceFlag, time.Now()); err != nil {
			return c.usageErr("--since: %v", err)
		}
	}
	if *limit < 0 {
		return c.usageErr("--limit: %d is negative", *limit)
	}
	if *session != "" && !events.ValidID(*session) {
		return c.usageErr("invalid session id %q", *session)
	}
	if *status != "" && !validStatus(*status) {
		return c.usageErr("--status: want running, paused, finished or a stop reason, got %q", *status)
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := c.sdk(nc)
	if err != nil {
		return c.fail("%v", err)
	}
	// Filtered here, not by the client: a rejected turn's agent is known
	// only once rejectedAgents has read it.
	all, err := cl.Turns(cctx, client.TurnFilter{SessionID: *session})
	if err != nil {
		return c.fail("%v", err)
	}
	rejectedAgents(cctx, js, all)
	var shown []client.Turn
	for _, s := range all {
		if (*status == "" || string(s.Status) == *status || string(s.StopReason) == *status) && (*agent == "" || s.Agent == *agent) &&
			!s.Started.Before(cutoff) {
			shown = append(shown, s)
		}
	}
	if *limit > 0 && len(shown) > *limit {
		shown = shown[:*limit] // the list is newest first
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		for _, s := range shown {
			if err := enc.Encode(s); err != nil {
				return c.fail("%v", err)
			}
		}
		return ExitOK
	}
	if len(shown) == 0 {
		fmt.Fprintln(c.stdout, "no turns")
		return ExitOK
	}
	printTurns(c.stdout, shown, time.Now())
	return ExitOK
}

func printTurns(w io.Writer, list []client.Turn, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tSESSION\tAGENT\tSTATUS\tSTEPS\tTOOLS\tAGE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.TurnID, sessionText(s), orDash(s.Agent), statusText(s),
			s.Steps, s.ToolCalls, age(now.Sub(s.Started)))
	}
	_ = tw.Flush()
}

// sessionText shows a session only when it is not the turn's own.
func sessionText(s client.Turn) string {
	if s.SessionID == s.TurnID {
		return "-"
	}
	return s.SessionID
}

func validStatus(s string) bool {
	switch client.Status(s) {
	case StatusRunning, StatusPaused, StatusFinished:
		return true
	}
	return slices.Contains([]events.StopReason{events.StopCompleted, events.StopStepCap, events.StopBudget,
		events.StopDoomLoop, events.StopTimeout, events.StopAborted, events.StopSynthesisDone, events.StopError,
		events.StopRejected}, events.StopReason(s))
}

// rejectedAgents fills in the agent of rejected turns, whose logs hold only
// their turn.finished: it is the agent their submission named, kept with it
// as a dead letter. What cannot be read stays unsaid.
func rejectedAgents(ctx context.Context, js jetstream.JetStream, list []client.Turn) {
	want := map[string]int{}
	for i, s := range list {
		if s.StopReason == events.StopRejected && s.Agent == "" {
			want[s.TurnID] = i
		}
	}
	if len(want) == 0 {
		return
	}
	stream, err := js.Stream(ctx, events.StreamDead)
	if err != nil {
		return
	}
	for next := uint64(1); len(want) > 0; {
		m, err := stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(events.DeadSubject("submit")))
		if err != nil {
			return
		}
		var sub events.Submit
		if json.Unmarshal(m.Data, &sub) == nil && sub.Agent != "" {
			if i, ok := want[sub.TurnID]; ok {
				list[i].Agent = sub.Agent
				delete(want, sub.TurnID)
			}
		}
		next = m.Sequence + 1
	}
}

// parseSince reads --since: a duration back from now, or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%s is negative", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (90m, 24h) nor a time (2026-11-28T09:00:00Z, 2026-11-28)", s)
}

// age is a duration rounded the way a person reads it.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
