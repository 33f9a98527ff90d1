// Package bus is what jetloop's processes share over JetStream: connecting
// and authenticating, the streams, consumers and buckets of docs/protocol.md, the
// event store with its optimistic appends, pulling one message at a time,
// heartbeats, cancels and dead letters. It links neither a server nor a
// model SDK, so the tool worker and the public client and worker packages
// can use it.
package bus
