package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// top is one screen of what runs now: the turns running and paused, the
// rates of steps, tool calls and finished turns, each tool's latency, and the
// dead letters, redrawn every interval from the events stream.
type top struct {
	cl     *client.Client
	dead   jetstream.Stream
	window time.Duration
	// turns is every turn's summary by its id; dirty are those with events
	// since the last screen.
	turns map[string]client.Turn
	dirty map[string]bool
	// In the window: when steps started and turns finished, and each
	// tool's calls.
	steps, finished []time.Time
	tools           map[string][]toolSample
	deadLetters     uint64
}

type toolSample struct {
	at       time.Time
	duration time.Duration
	isError  bool
}

func topCmd(ctx context.Context, c *command, args []string) int {
	interval := c.flags.Duration("interval", time.Second, "time between screens")
	window := c.flags.Duration("window", time.Minute, "rates and latencies cover this much of the recent past")
	rows := c.flags.Int("rows", 20, "running and paused turns shown at most")
	once := c.flags.Bool("once", false, "print one screen and exit")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 0 || *interval <= 0 || *window <= 0 || *rows < 1 {
		return c.usageErr("usage: jetloop top [--interval D] [--window D] [--rows N] [--once]")
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := &top{window: *window, dirty: map[string]bool{}, tools: map[string][]toolSample{}}
	if t.cl, err = c.sdk(nc); err != nil {
		return c.fail("%v", err)
	}
	if t.dead, err = js.Stream(cctx, events.StreamDead); err != nil {
		return c.fail("%s: %v", events.StreamDead, err)
	}
	// Follow from the start of the window, then list: an event in between
	// is counted once and its turn read again, never missed.
	feed, err := t.cl.OpenFeed(cctx, client.FeedFilter{Since: time.Now().Add(-*window)})
	if err != nil {
		return c.fail("%v", err)
	}
	defer feed.Close()
	caughtUp := feed.CaughtUp()
	msgs, errs := feed.Chan(ctx)
	all, err := t.cl.Turns(cctx, client.TurnFilter{})
	if err != nil {
		return c.fail("%v", err)
	}
	t.turns = make(map[string]client.Turn, len(all))
	for _, s := range all {
		t.turns[s.TurnID] = s
	}
	tty := !*once && c.color()
	if tty {
		fmt.Fprint(c.stdout, "\x1b[?25l") // no cursor blinking over the table
		defer fmt.Fprint(c.stdout, "\x1b[?25h")
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return interrupted(ctx)
		case err := <-errs:
			return c.fail("%v", err)
		case m := <-msgs:
			t.add(m.Record)
			if !caughtUp && m.CaughtUp {
				caughtUp = true
			}
			if !*once || !caughtUp {
				continue
			}
		case <-tick.C:
			if *once && !caughtUp {
				continue
			}
		}
		// Each screen's reads get a deadline of their own: top runs for as
		// long as it is left to, past cctx's minute.
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		err := t.refresh(rctx)
		rcancel()
		switch {
		case ctx.Err() != nil:
			return interrupted(ctx) // stopped while it read: quietly, as in the select
		case err != nil:
			return c.fail("%v", err)
		}
		if tty {
			fmt.Fprint(c.stdout, "\x1b[H\x1b[2J")
		}
		t.screen(c.stdout, time.Now(), *rows, tty)
		if *once {
			return ExitOK
		}
		if !tty {
			fmt.Fprintln(c.stdout)
		}
	}
}

// add takes one event into the counts and marks its turn to be read again.
func (t *top) add(e client.Record) {
	t.dirty[e.TurnID] = true
	t.count(e)
}

// count takes one event into the counts.
func (t *top) count(e events.Envelope) {
	switch e.Type {
	case events.StepStarted:
		t.steps = append(t.steps, e.Time)
	case events.TurnFinished:
		t.finished = append(t.finished, e.Time)
	case events.ToolCompleted:
		var d events.ToolCompletedData
		if json.Unmarshal(e.Data, &d) == nil {
			t.tools[d.Name] = append(t.tools[d.Name], toolSample{at: e.Time,
				duration: time.Duration(d.DurationMs) * time.Millisecond, isError: d.IsError})
		}
	}
}

// refresh reads again the turns that had events, drops what left the
// window and counts the dead letters.
func (t *top) refresh(ctx context.Context) error {
	for id := range t.dirty {
		s, err := t.cl.Turn(ctx, id)
		switch {
		case errors.Is(err, client.ErrTurnNotFound):
			delete(t.turns, id)
		case err != nil:
			return err
		case s.TurnID != "": // a workflow's log is not a turn
			t.turns[id] = s
		}
		delete(t.dirty, id)
	}
	from := time.Now().Add(-t.window)
	recent := func(at time.Time) bool { return !at.Before(from) }
	t.steps = keepFrom(t.steps, recent)
	t.finished = keepFrom(t.finished, recent)
	for name, ss := range t.tools {
		ss = slices.DeleteFunc(ss, func(s toolSample) bool { return !recent(s.at) })
		if len(ss) == 0 {
			delete(t.tools, name)
		} else {
			t.tools[name] = ss
		}
	}
	info, err := t.dead.Info(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", events.StreamDead, err)
	}
	t.deadLetters = info.State.Msgs
	return nil
}

func keepFrom(ts []time.Time, keep func(time.Time) bool) []time.Time {
	return slices.DeleteFunc(ts, func(at time.Time) bool { return !keep(at) })
}

// screen writes one screen.
func (t *top) screen(w io.Writer, now time.Time, rows int, color bool) {
	bold := func(s string) string {
		if color {
			return "\x1b[1m" + s + "\x1b[0m"
		}
		return s
	}
	var live []client.Turn
	byStatus := map[client.Status]int{}
	byReason := map[events.StopReason]int{}
	for _, s := range t.turns {
		byStatus[s.Status]++
		if s.Status == StatusFinished {
			byReason[s.StopReason]++
		} else {
			live = append(live, s)
		}
	}
	fmt.Fprintf(w, "%s  %s  window %s\n", bold("jetloop top"), now.Format(time.TimeOnly), t.window)
	var reasons []string
	for r, n := range byReason {
		reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
	}
	sort.Strings(reasons)
	fmt.Fprintf(w, "turns   running %d · paused %d · finished %d", byStatus[StatusRunning], byStatus[StatusPaused], byStatus[StatusFinished])
	if len(reasons) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(reasons, ", "))
	}
	calls := 0
	for _, ss := range t.tools {
		calls += len(ss)
	}
	secs := t.window.Seconds()
	fmt.Fprintf(w, "\nrates   %.2f steps/s · %.2f tool calls/s · %.2f turns finished/s\n",
		float64(len(t.steps))/secs, float64(calls)/secs, float64(len(t.finished))/secs)
	fmt.Fprintf(w, "dead    %d dead letters (jetloop dead)\n\n", t.deadLetters)

	slices.SortFunc(live, func(a, b client.Turn) int { // newest first
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(a.TurnID, b.TurnID)
	})
	fmt.Fprintln(w, bold("RUNNING AND PAUSED"))
	if len(live) == 0 {
		fmt.Fprintln(w, "none")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TURN\tAGENT\tSTATUS\tSTEPS\tTOOLS\tAGE\tLAST EVENT")
		for i, s := range live {
			if i == rows {
				fmt.Fprintf(tw, "… %d more\t\t\t\t\t\t\n", len(live)-rows)
				break
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s ago\n", s.TurnID, orDash(s.Agent), statusText(s), s.Steps, s.ToolCalls,
				age(now.Sub(s.Started)), age(now.Sub(s.Last)))
		}
		_ = tw.Flush()
	}

	fmt.Fprintf(w, "\n%s\n", bold("TOOLS (last "+t.window.String()+")"))
	if len(t.tools) == 0 {
		fmt.Fprintln(w, "no calls")
		return
	}
	names := make([]string, 0, len(t.tools))
	for n := range t.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCALLS\tERRORS\tP50\tP95\tMAX")
	for _, n := range names {
		ss := t.tools[n]
		ds := make([]time.Duration, len(ss))
		errs := 0
		for i, s := range ss {
			ds[i] = s.duration
			if s.isError {
				errs++
			}
		}
		slices.Sort(ds)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", n, len(ss), errs, latency(quantile(ds, 0.5)), latency(quantile(ds, 0.95)),
			latency(ds[len(ds)-1]))
	}
	_ = tw.Flush()
}

// latency is a worker's time as it reports it: whole milliseconds.
func latency(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.Round(10 * time.Millisecond).String()
}

// quantile is the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
