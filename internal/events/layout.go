package events

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Partitions is how many parts the turns and workflows are split into, by
// their id (Partition): the orchestrators' inputs, and the events streams
// of a partitioned layout.
const Partitions = 16

// Partition is the partition of a turn or workflow id: the FNV-1a hash the
// server's partition() subject mapping takes, so that the inbox's own
// transform and this function agree.
func Partition(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % Partitions)
}

// Layout is how the logs are laid out in streams (docs/protocol.md,
// "Where a log is stored"). With one stream, every log is in
// JETLOOP_EVENTS under jetloop.events.<session_id>.<turn_id>. With
// Streams = P > 1, the logs are in P streams JETLOOP_EVENTS_<k>, a log
// under jetloop.events.<p>.<session_id>.<turn_id>, where p is its turn's
// partition and k = p mod P: each stream holds a fixed set of the
// partitions the orchestrators own, so that on a cluster the streams'
// leaders, and their synced appends, spread over the nodes. The turn id
// is the last token either way.
type Layout struct {
	// Streams is how many streams hold the logs: 1 (or 0), 2, 4, 8 or 16,
	// so that every stream holds as many partitions.
	Streams int
}

// OneStream is the layout of a deployment provisioned without a choice.
var OneStream = Layout{Streams: 1}

// Check says whether l is a layout jetloop knows.
func (l Layout) Check() error {
	switch l.Streams {
	case 0, 1, 2, 4, 8, 16:
		return nil
	}
	return fmt.Errorf("events: %d events streams: the logs go in 1, 2, 4, 8 or 16 (a divisor of the %d partitions)", l.Streams, Partitions)
}

// Partitioned reports whether the logs are in more than one stream.
func (l Layout) Partitioned() bool { return l.Streams > 1 }

// Names are the layout's streams.
func (l Layout) Names() []string {
	if !l.Partitioned() {
		return []string{StreamEvents}
	}
	names := make([]string, l.Streams)
	for k := range names {
		names[k] = PartitionedStream(k)
	}
	return names
}

// PartitionedStream names the k-th stream of a partitioned layout.
func PartitionedStream(k int) string { return StreamEvents + "_" + strconv.Itoa(k) }

// Stream is the stream that holds the log of id.
func (l Layout) Stream(id string) string {
	if !l.Partitioned() {
		return StreamEvents
	}
	return PartitionedStream(Partition(id) % l.Streams)
}

// StreamSubjects are the subjects the k-th stream of l takes.
func (l Layout) StreamSubjects(k int) []string {
	if !l.Partitioned() {
		return []string{"jetloop.events.>"}
	}
	var out []string
	for p := k; p < Partitions; p += l.Streams {
		out = append(out, "jetloop.events."+strconv.Itoa(p)+".*.*")
	}
	return out
}

// LayoutOf is the layout whose k-th stream takes subjects, the way a
// reader learns it from the first stream that exists; ok is false for
// subjects no layout gives.
func LayoutOf(k int, subjects []string) (Layout, bool) {
	for _, l := range []Layout{OneStream, {2}, {4}, {8}, {16}} {
		if k >= max(l.Streams, 1) {
			continue
		}
		if strings.Join(l.StreamSubjects(k), " ") == strings.Join(subjects, " ") {
			return l, true
		}
	}
	return Layout{}, false
}

// Subject is the subject of a turn's log.
func (l Layout) Subject(session, turn string) string {
	if !l.Partitioned() {
		return EventsSubject(session, turn)
	}
	return "jetloop.events." + strconv.Itoa(Partition(turn)) + "." + session + "." + turn
}

// TurnFilter matches a turn's log without knowing its session.
func (l Layout) TurnFilter(turn string) string {
	if !l.Partitioned() {
		return TurnEventsFilter(turn)
	}
	return "jetloop.events." + strconv.Itoa(Partition(turn)) + ".*." + turn
}

// SessionFilter matches the logs of every turn of a session: in every
// stream of a partitioned layout, each holding some of them.
func (l Layout) SessionFilter(session string) string {
	if !l.Partitioned() {
		return SessionEventsFilter(session)
	}
	return "jetloop.events.*." + session + ".*"
}

// AllFilter matches every log.
func (l Layout) AllFilter() string {
	if !l.Partitioned() {
		return "jetloop.events.*.*"
	}
	return "jetloop.events.*.*.*"
}
