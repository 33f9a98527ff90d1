package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/deadletter"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// dead lists, shows and re-sends dead letters: the inputs and jobs that could
// not be handled, kept in JETLOOP_DEAD with the reason.
func dead(ctx context.Context, c *command, args []string) int {
	asJSON := c.flags.Bool("json", false, "print one JSON object per dead letter")
	file := c.flags.String("file", "", "retry: send this payload (the fixed message) instead of the original")
	// Flags may come before the subcommand, after it, or after its
	// argument: `dead retry SEQ --file FIXED.json` reads naturally.
	if !c.parse(args) {
		return c.exit
	}
	rest := c.flags.Args()
	sub := "list"
	if len(rest) > 0 {
		sub, rest = rest[0], rest[1:]
	}
	var seq uint64
	switch {
	case sub == "list" && len(rest) == 0:
	case (sub == "show" || sub == "retry") && len(rest) == 1:
		n, err := strconv.ParseUint(rest[0], 10, 64)
		if err != nil || n == 0 {
			return c.usageErr("not a sequence number: %q", rest[0])
		}
		seq = n
	default:
		return c.usageErr("usage: jetloop dead [--json] | dead show SEQ | dead retry [--file FIXED.json] SEQ")
	}
	if *file != "" && sub != "retry" {
		return c.usageErr("--file goes with retry")
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := js.Stream(cctx, events.StreamDead)
	if err != nil {
		return c.fail("%s: %v", events.StreamDead, err)
	}
	switch sub {
	case "show":
		m, err := stream.GetMsg(cctx, seq)
		if err != nil {
			return c.fail("dead letter %d: %v", seq, err)
		}
		showLetter(c.stdout, m)
		return ExitOK
	case "retry":
		return c.retryLetter(cctx, js, stream, seq, *file)
	}
	letters, err := deadletter.List(cctx, stream)
	if err != nil {
		return c.fail("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		for _, l := range letters {
			if err := enc.Encode(l); err != nil {
				return c.fail("%v", err)
			}
		}
		return ExitOK
	}
	if len(letters) == 0 {
		fmt.Fprintln(c.stdout, "no dead letters")
		return ExitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tSUBJECT\tTURN\tREASON")
	for _, l := range letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", l.Seq, l.Time.Format(time.DateTime), l.Kind, l.Subject,
			orDash(l.Turn), clip(l.Reason, 90))
	}
	_ = tw.Flush()
	return ExitOK
}

func showLetter(w io.Writer, m *jetstream.RawStreamMsg) {
	l := deadletter.Of(m)
	fmt.Fprintf(w, "dead letter %d  %s  on %s\n", l.Seq, l.Time.Format(time.RFC3339Nano), m.Subject)
	keys := make([]string, 0, len(m.Header))
	for k := range m.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range m.Header.Values(k) {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	fmt.Fprintln(w)
	var pretty bytes.Buffer
	if json.Indent(&pretty, m.Data, "", "  ") == nil {
		fmt.Fprintln(w, pretty.String())
		return
	}
	fmt.Fprintln(w, string(m.Data))
}

// retryLetter re-sends a dead letter, or the fixed payload in file, as
// deadletter.Resend does, and says what became of it.
func (c *command) retryLetter(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, seq uint64, file string) int {
	var fixed []byte
	if file != "" {
		var err error
		if fixed, err = os.ReadFile(file); err != nil {
			return c.fail("%v", err)
		}
	}
	r, err := deadletter.Resend(ctx, js, stream, seq, fixed)
	if err != nil {
		return c.fail("%v", err)
	}
	if r.DeleteErr != nil {
		return c.fail("dead letter %d was re-sent (%s seq %d) but is still listed (removing it takes the admin user): %v",
			seq, r.Stream, r.StreamSeq, r.DeleteErr)
	}
	fmt.Fprintf(c.stdout, "re-sent dead letter %d to %s (%s seq %d)\n", seq, r.Subject, r.Stream, r.StreamSeq)
	if r.Kind == "submit" && r.Turn != "" {
		fmt.Fprintf(c.stdout, "follow it with: jetloop watch %s\n", r.Turn)
	}
	return ExitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
