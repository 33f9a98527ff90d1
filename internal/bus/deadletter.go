package bus

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetter keeps a message that cannot be handled, with the reason in the
// Jetloop-Error header and its subject in Jetloop-Subject, where an operator
// can find, fix and re-send it. Its id is the message's place in its stream,
// so a dead letter retried after a crash is kept once. A payload too big to
// go with the headers is cut, and Jetloop-Truncated says its full size: a
// dead letter that could never be written would be retried for ever.
func DeadLetter(ctx context.Context, js jetstream.JetStream, msg Letter, kind, reason string) error {
	dm := &nats.Msg{Subject: events.DeadSubject(kind), Data: msg.Data(), Header: nats.Header{}}
	dm.Header.Set(events.HeaderError, Truncate(reason, maxReason))
	// The subject as published, without the inbox partition the server
	// added: `jetloop dead retry` publishes it again.
	dm.Header.Set("Jetloop-Subject", Unpartitioned(msg.Subject()))
	id := "dead:" + msg.Subject()
	if md, err := msg.Metadata(); err == nil {
		id = events.DeadID(md.Stream, md.Sequence.Stream)
	}
	if room := int(js.Conn().MaxPayload()) - maxReason - len(msg.Subject()) - len(id) - 512; len(dm.Data) > room {
		dm.Header.Set("Jetloop-Truncated", strconv.Itoa(len(dm.Data)))
		dm.Data = dm.Data[:max(room, 0)]
	}
	if _, err := js.PublishMsg(ctx, dm, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("bus: dead letter: %w", err)
	}
	return nil
}

// Letter is what DeadLetter keeps of a message: a jetstream.Msg, or one
// read back from its stream.
type Letter interface {
	Subject() string
	Data() []byte
	Metadata() (*jetstream.MsgMetadata, error)
}

// maxReason bounds a dead letter's reason: it goes in a header.
const maxReason = 4 << 10

// Truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
