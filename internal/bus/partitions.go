package bus

import (
	"hash/fnv"

	"strconv"
	"strings"

	"github.com/jetloop/jetloop/internal/events"

	"github.com/nats-io/nats.go/jetstream"
)

// Partitions is how many parts the orchestrators' inputs are split into. An
// input naming a turn or workflow (every inbox subject but the two
// submissions) is stored by the server under its partition, and each
// partition has one durable consumer that one orchestrator at a time pulls
// from: N orchestrators share the partitions, at most this many do useful
// work.
const Partitions = events.Partitions

// inboxTransform makes the inbox stream store jetloop.inbox.<kind>.<id> as
// jetloop.inbox.<kind>.<id>.<partition of id>: clients and workers publish
// the subjects of docs/protocol.md, the partitions are the server's doing.
var inboxTransform = &jetstream.SubjectTransformConfig{
	Source:      "jetloop.inbox.*.*",
	Destination: "jetloop.inbox.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(" + strconv.Itoa(Partitions) + ",2)}}",
}

// Partition is the partition of a turn or workflow id (events.Partition).
func Partition(id string) int { return events.Partition(id) }

// PartitionConsumer names the durable inbox consumer of partition p.
func PartitionConsumer(p int) string { return InboxConsumer + "_" + strconv.Itoa(p) }

// partitionFilter is what partition p's consumer takes.
func partitionFilter(p int) string { return "jetloop.inbox.*.*." + strconv.Itoa(p) }

// Unpartitioned is an inbox subject as it was published: the partition
// token the server added is cut. A subject whose last token is not its id's
// partition (one published so, not mapped) is returned unchanged, and
// stays an unknown input.
func Unpartitioned(subject string) string {
	rest, ok := strings.CutPrefix(subject, "jetloop.inbox.")
	tokens := strings.Split(rest, ".")
	if !ok || len(tokens) != 3 || strconv.Itoa(Partition(tokens[1])) != tokens[2] {
		return subject
	}
	return subject[:len(subject)-len(tokens[2])-1]
}

// Owner is the orchestrator that owns partition p among the live ones:
// rendezvous hashing, so every orchestrator that sees the same live set
// agrees, and one joining or leaving moves only its own share.
func Owner(p int, live []string) string {
	best, top := "", uint64(0)
	for _, name := range live {
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		_, _ = h.Write([]byte{0, byte(p)})
		if w := mix(h.Sum64()); best == "" || w > top || (w == top && name < best) {
			best, top = name, w
		}
	}
	return best
}

// mix is splitmix64's finalizer: FNV alone spreads names that differ in
// their last byte (orchestrator-1, orchestrator-2) poorly over partitions.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Stored is an inbox subject as the inbox stores it: a turn's or
// workflow's input under its id's partition, a submission as it is.
func Stored(subject string) string {
	rest, ok := strings.CutPrefix(subject, "jetloop.inbox.")
	tokens := strings.Split(rest, ".")
	if !ok || len(tokens) != 2 {
		return subject
	}
	return subject + "." + strconv.Itoa(Partition(tokens[1]))
}
