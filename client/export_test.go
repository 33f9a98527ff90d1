package client

import "github.com/jetloop/jetloop/internal/events"

// ExportFromEnvelope types an envelope, for the tests.
func ExportFromEnvelope(e events.Envelope) (Event, error) { return fromEnvelope(e, nil) }
