package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// headerSubject names the subject a dead letter was first sent to.
const headerSubject = "Jetloop-Subject"

// Letter is one dead letter as `jetloop dead --json` prints it.
type Letter struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Subject string    `json:"subject"` // where it was first sent
	Kind    string    `json:"kind"`    // submit, control, result, model, timer, job
	Turn    string    `json:"turn_id,omitempty"`
	Reason  string    `json:"reason"`
}

func letterOf(m *jetstream.RawStreamMsg) Letter {
	l := Letter{Seq: m.Sequence, Time: m.Time.UTC(), Subject: m.Header.Get(headerSubject),
		Kind: strings.TrimPrefix(m.Subject, "jetloop.dead."), Reason: m.Header.Get(events.HeaderError)}
	var p struct {
		TurnID string `json:"turn_id"`
	}
	if json.Unmarshal(m.Data, &p) == nil && events.ValidID(p.TurnID) {
		l.Turn = p.TurnID
	} else if _, turn, ok := events.InboxKind(l.Subject); ok && events.ValidID(turn) {
		l.Turn = turn
	}
	return l
}

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
	letters, err := listLetters(cctx, stream)
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

// listLetters reads the dead letters in order, one direct get of the next
// message at a time, skipping the gaps retries leave.
func listLetters(ctx context.Context, stream jetstream.Stream) ([]Letter, error) {
	var out []Letter
	for next := uint64(1); ; {
		m, err := stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject("jetloop.dead.>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		out = append(out, letterOf(m))
		next = m.Sequence + 1
	}
}

func showLetter(w io.Writer, m *jetstream.RawStreamMsg) {
	l := letterOf(m)
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

// retrySchemas are the inputs a dead letter may be re-sent as: the kinds a
// client may send, each with the schema a re-sent payload must pass, so a
// payload still broken is refused here rather than becoming a new dead
// letter. Anything else a retry would send (a tool result, a model answer,
// a job, an event) would act for a worker, a model or the orchestrator.
var retrySchemas = map[string]string{
	"submit": "submit", "workflow": "workflow_submit", "control": "control",
}

// retryTarget is where dead letter m may be re-sent: the inbox subject it
// was taken from, which its Jetloop-Subject header names. It is believed
// only on a letter the trusted side wrote and only when it agrees with the
// letter's kind: a tool worker publishes jetloop.dead.job with headers of
// its choosing (docs/protocol.md, "Dead letters").
func retryTarget(m *jetstream.RawStreamMsg, fixed bool) (subject, kind string, err error) {
	kind = strings.TrimPrefix(m.Subject, "jetloop.dead.")
	if kind == "job" {
		return "", "", fmt.Errorf("dead letter %d is a tool worker's (%s): what it says of where it goes is the worker's word, so it is not re-sent", m.Sequence, m.Subject)
	}
	if _, ok := retrySchemas[kind]; !ok {
		return "", "", fmt.Errorf("dead letter %d is a %s input: only what a client may send (submit, workflow, control) is re-sent", m.Sequence, kind)
	}
	subject = m.Header.Get(headerSubject)
	if subject == "" {
		return "", "", fmt.Errorf("dead letter %d does not say where it was sent (no %s header)", m.Sequence, headerSubject)
	}
	got, turn, ok := events.InboxKind(subject)
	if !ok || got != kind || (kind == "control" && !events.ValidID(turn)) {
		return "", "", fmt.Errorf("dead letter %d of kind %s was not taken from %q: it is not re-sent", m.Sequence, kind, subject)
	}
	if m.Header.Get("Jetloop-Truncated") != "" && !fixed {
		return "", "", fmt.Errorf("dead letter %d keeps only part of its payload (%s bytes): pass the whole message with --file", m.Sequence, m.Header.Get("Jetloop-Truncated"))
	}
	return subject, kind, nil
}

// retryLetter re-sends a dead letter, or the fixed payload in file, as
// resendLetter does, and says what became of it.
func (c *command) retryLetter(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, seq uint64, file string) int {
	var fixed []byte
	if file != "" {
		var err error
		if fixed, err = os.ReadFile(file); err != nil {
			return c.fail("%v", err)
		}
	}
	r, err := resendLetter(ctx, js, stream, seq, fixed)
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

// Resent is what became of a dead letter sent again: where it went, and
// whether it could be removed from the dead stream.
type Resent struct {
	Seq       uint64 `json:"seq"`
	Subject   string `json:"subject"`
	Kind      string `json:"kind"`              // of the subject: submit, control, result…
	Turn      string `json:"turn_id,omitempty"` // of a submission
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	// DeleteErr says why the letter is still listed: only admin may
	// delete a message of the dead stream.
	DeleteErr error `json:"-"`
}

// resendLetter re-sends a dead letter, or the fixed payload when it is not
// nil, to the subject it was taken from (retryTarget), and deletes it from the dead
// stream once the publish is acknowledged. Its Nats-Msg-Id names the dead
// letter, so running it again after a failure between the two does not send
// it twice.
func resendLetter(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, seq uint64, fixed []byte) (Resent, error) {
	m, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return Resent{}, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	subject, kind, err := retryTarget(m, fixed != nil)
	if err != nil {
		return Resent{}, err
	}
	data := m.Data
	if fixed != nil {
		data = fixed
	}
	if err := schemas.Validate(retrySchemas[kind], data); err != nil {
		return Resent{}, fmt.Errorf("dead letter %d would fail again: %w (fix it and pass --file)", seq, err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	for k, vs := range m.Header {
		if strings.HasPrefix(k, "Jetloop-") || strings.HasPrefix(k, "Nats-") {
			continue // the reason and routing of the failure, not of the message
		}
		msg.Header[k] = vs
	}
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(events.RetryID(seq)))
	if err != nil {
		return Resent{}, fmt.Errorf("re-send dead letter %d to %s: %w", seq, subject, err)
	}
	r := Resent{Seq: seq, Subject: subject, Kind: kind, Stream: ack.Stream, StreamSeq: ack.Sequence}
	if kind == "submit" {
		r.Turn = letterOf(m).Turn
		if fixed != nil {
			var p struct {
				TurnID string `json:"turn_id"`
			}
			_ = json.Unmarshal(data, &p)
			r.Turn = p.TurnID
		}
	}
	// Only admin may delete a message of the dead stream: a denied delete
	// gets no answer, so it is not given the whole command's time.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r.DeleteErr = stream.DeleteMsg(dctx, seq)
	return r, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
