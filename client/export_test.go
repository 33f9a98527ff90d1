package client

import "github.com/jetloop/jetloop/internal/events"

// ExportFromEnvelope types an envelope, for the tests.
func ExportFromEnvelope(e events.Envelope) (Event, error) { return fromEnvelope(e, nil) }

// ExportSubmission is what Send publishes for r, for the tests.
func ExportSubmission(r TurnRequest) events.Submit { return r.submit() }

// ExportWorkflowSubmission is what RunWorkflow publishes for w, for the tests.
func ExportWorkflowSubmission(w Workflow) events.WorkflowSubmit { return w.submit() }
