// Package model holds jetloop's model providers behind one interface: the
// scripted model of the contract (deterministic, for tests, demos and
// benchmarks) and, later, the OpenAI-compatible and Anthropic providers.
//
// A provider makes one attempt of one model call. Retries are not its
// business: a retryable *Error goes back to the runner, which turns it into
// a delayed redelivery of the model job, so a rate limit never parks a
// goroutine.
package model
