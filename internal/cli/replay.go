package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/workflow"
)

// readLog reads a turn's log from the server, or from a JSON-lines file
// (as export writes it) when file is set; every event is checked against its
// schema.
func (c *command) readLog(ctx context.Context, turn, file string) ([]events.Envelope, error) {
	if file != "" {
		return readLogFile(file)
	}
	logs, err := c.readLogs(ctx, turn)
	if err != nil {
		return nil, err
	}
	if len(logs[turn]) == 0 {
		return nil, fmt.Errorf("no turn %q", turn)
	}
	return logs[turn], nil
}

// readLogs reads the logs of turns from the server over one connection,
// every event checked against its schema; a turn without a log is left out.
func (c *command) readLogs(ctx context.Context, turns ...string) (map[string][]events.Envelope, error) {
	nc, _, err := c.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	cl, err := c.sdk(nc)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]events.Envelope, len(turns))
	for _, turn := range turns {
		log, err := cl.Log(ctx, turn)
		if errors.Is(err, client.ErrTurnNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[turn] = log
	}
	return out, nil
}

// readChildren reads the logs of the turns the log's subagent calls ran, and
// of theirs, by turn id; a child not started yet has none.
func (c *command) readChildren(ctx context.Context, log []events.Envelope) (map[string][]events.Envelope, error) {
	out := map[string][]events.Envelope{}
	for level, next := 0, timeline.ChildTurns(log); len(next) > 0 && level < fsm.MaxDepth; level++ {
		logs, err := c.readLogs(ctx, next...)
		if err != nil {
			return nil, err
		}
		next = nil
		for id, l := range logs {
			out[id] = l
			next = append(next, timeline.ChildTurns(l)...)
		}
	}
	return out, nil
}

func readLogFile(path string) ([]events.Envelope, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var log []events.Envelope
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		e, _, err := events.Decode(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		log = append(log, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(log) == 0 {
		return nil, fmt.Errorf("%s: no events", path)
	}
	return log, nil
}

// replay prints a recorded turn through today's machine: a trace like watch
// prints, one JSON row per event, or the machine's state at a step. A log the
// machine cannot fold, or that breaks the log's invariants
// (docs/protocol.md), exits 1.
// turnOrFile takes the one argument of a command that reads a turn's log
// from the server, or none when the log comes from file.
func (c *command) turnOrFile(file string) (turn string, ok bool) {
	switch {
	case c.flags.NArg() == 1 && events.ValidID(c.flags.Arg(0)):
		return c.flags.Arg(0), true
	case c.flags.NArg() == 0 && file != "":
		return "", true
	}
	return "", false
}

func replay(ctx context.Context, c *command, args []string) int {
	file := c.flags.String("file", "", "read the log from a JSON-lines file (as export writes it)")
	asJSON := c.flags.Bool("json", false, "print one JSON object per event")
	at := c.flags.Int("at", -1, "print the machine's state after the last event of this step")
	verify := c.flags.Bool("verify", false, "re-derive every decision with today's machine; exit 1 at the first difference")
	html := c.flags.String("html", "", "write the turn (or the workflow, its tasks as bands) as a self-contained HTML timeline to this file")
	if !c.parse(args) {
		return c.exit
	}
	turn, ok := c.turnOrFile(*file)
	if !ok {
		return c.usageErr("usage: jetloop replay [--json | --at STEP | --verify | --html FILE] [--file FILE] TURN")
	}
	log, err := c.readLog(ctx, turn, *file)
	if err != nil {
		return c.fail("%v", err)
	}
	if len(log) > 0 && log[0].Type.Workflow() {
		if *html != "" {
			var turns map[string][]events.Envelope
			if *file != "" {
				log, turns = splitWorkflowFile(log)
			}
			return c.workflowTimeline(ctx, *html, log, turns, *file == "")
		}
		return c.replayWorkflow(ctx, log, *file == "", *verify, *asJSON, *at)
	}
	if *html != "" {
		var children map[string][]events.Envelope
		if *file != "" {
			log, children = splitWorkflowFile(log)
		} else if children, err = c.readChildren(ctx, log); err != nil {
			return c.fail("%v", err)
		}
		return c.timeline(*html, log, children)
	}
	if *verify {
		n, err := fsm.Verify(log)
		if err != nil {
			fmt.Fprintf(c.stdout, "diverged after %d decisions: %v\n", n, err)
			return ExitStopped
		}
		fmt.Fprintf(c.stdout, "verified: %d events, %d decisions re-derived by today's machine\n", len(log), n)
		return ExitOK
	}
	if *at >= 0 {
		var upTo []events.Envelope
		for _, e := range log {
			if e.Step <= *at {
				upTo = append(upTo, e)
			}
		}
		st, err := fsm.Fold(upTo)
		if err != nil {
			fmt.Fprintf(c.stderr, "jetloop replay: the log does not fold: %v\n", err)
			return ExitStopped
		}
		out, _ := json.MarshalIndent(snakeJSON(st), "", "  ")
		fmt.Fprintln(c.stdout, string(out))
		return ExitOK
	}
	var err2 error
	if *asJSON {
		err2 = printRows(c.stdout, log)
	} else {
		t := timeline.NewTrace(c.stdout, c.color())
		for _, e := range log {
			if err2 = t.Event(e); err2 != nil {
				err2 = fmt.Errorf("seq %d (%s): %w", e.Seq, e.Type, err2)
				break
			}
		}
	}
	if err2 == nil {
		err2 = events.CheckLog(log)
	}
	if err2 != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: the log does not replay: %v\n", err2)
		return ExitStopped
	}
	return ExitOK
}

func printRows(w io.Writer, log []events.Envelope) error {
	rows, err := timeline.FoldRows(log)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for _, row := range rows {
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return nil
}

// export prints a turn's events exactly, one JSON object per line: a log
// to attach to a bug report and replay anywhere with replay --file.
func export(ctx context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 1 || !events.ValidID(c.flags.Arg(0)) {
		return c.usageErr("usage: jetloop export TURN")
	}
	log, err := c.readLog(ctx, c.flags.Arg(0), "")
	if err != nil {
		return c.fail("%v", err)
	}
	enc := json.NewEncoder(c.stdout)
	for _, e := range log {
		if err := enc.Encode(e); err != nil {
			return c.fail("%v", err)
		}
	}
	return ExitOK
}

// replayWorkflow prints, folds or verifies a workflow's log. With tasks,
// --verify also verifies the log of every task's turn.
func (c *command) replayWorkflow(ctx context.Context, log []events.Envelope, tasks, verify, asJSON bool, at int) int {
	if verify {
		n, err := workflow.Verify(log)
		if err == nil {
			err = events.CheckLog(log)
		}
		if err != nil {
			fmt.Fprintf(c.stdout, "diverged after %d decisions: %v\n", n, err)
			return ExitStopped
		}
		turns := 0
		if tasks {
			for _, e := range log {
				if e.Type != events.TaskStarted {
					continue
				}
				var d events.TaskStartedData
				_ = json.Unmarshal(e.Data, &d)
				tlog, err := c.readLog(ctx, d.TurnID, "")
				if err == nil {
					_, err = fsm.Verify(tlog)
				}
				if err != nil {
					fmt.Fprintf(c.stdout, "task %d (turn %s) diverged: %v\n", d.Task, d.TurnID, err)
					return ExitStopped
				}
				turns++
			}
		}
		fmt.Fprintf(c.stdout, "verified: %d events, %d gate decisions re-derived by today's machine, %d task turns verified\n", len(log), n, turns)
		return ExitOK
	}
	if at >= 0 {
		var upTo []events.Envelope
		for _, e := range log {
			if e.Step <= at {
				upTo = append(upTo, e)
			}
		}
		st, err := workflow.Fold(upTo)
		if err != nil {
			fmt.Fprintf(c.stderr, "jetloop replay: the log does not fold: %v\n", err)
			return ExitStopped
		}
		out, _ := json.MarshalIndent(snakeJSON(st), "", "  ")
		fmt.Fprintln(c.stdout, string(out))
		return ExitOK
	}
	st := workflow.New("")
	enc := json.NewEncoder(c.stdout)
	for _, e := range log {
		from := st.Phase
		if err := workflow.Evolve(st, e); err != nil {
			fmt.Fprintf(c.stderr, "jetloop replay: the log does not replay: seq %d (%s): %v\n", e.Seq, e.Type, err)
			return ExitStopped
		}
		if asJSON {
			_ = enc.Encode(map[string]any{"seq": e.Seq, "task": e.Step, "from": from, "to": st.Phase, "type": e.Type,
				"time": e.Time, "detail": timeline.WorkflowDetail(e)})
			continue
		}
		fmt.Fprintf(c.stdout, "%4d task %-3d %-12s → %-12s %-22s %s\n", e.Seq, e.Step, from, st.Phase, e.Type, timeline.WorkflowDetail(e))
	}
	if err := events.CheckLog(log); err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: the log does not replay: %v\n", err)
		return ExitStopped
	}
	return ExitOK
}
