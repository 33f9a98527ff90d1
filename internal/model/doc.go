// Package model holds jetloop's model providers behind one interface: the
// scripted model (docs/protocol.md, "Scripted model": deterministic, for
// tests, demos and benchmarks), OpenAI-compatible chat completions (OpenAI,
// vLLM, Ollama, llama.cpp, OpenRouter) and the Anthropic Messages API, both
// streaming through their official SDKs. Providers builds them from the
// environment.
//
// A provider makes one attempt of one model call. Retries are not its
// business: the SDKs' own retries are off, and a retryable *Error goes back
// to the runner, which turns it into a delayed redelivery of the model job,
// so a rate limit never parks a goroutine. An answer is returned only when
// its stream finished: a stream cut off mid-way is an Unavailable error,
// never a short answer.
//
// Every provider passes the same conformance suite (conformance_test.go),
// run against the local servers of package modeltest, which replay the
// providers' server-sent-event streams from testdata byte for byte.
package model
