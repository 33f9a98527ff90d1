// Package events holds jetloop's wire vocabulary: the event envelope and the
// data of each event type, the messages that enter the inbox and the jobs
// queues, the subjects they travel on, and their codec. Every shape here has a
// JSON Schema in schemas/, which is the source of truth; a test proves the two
// agree.
package events
