package model

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// MaxAttempts is how many times a retryable model error is tried in all.
const MaxAttempts = 3

// Request is one attempt of one model call.
type Request struct {
	TurnID string
	Step   int
	Kind   events.ModelKind
	// Model is the provider's own model name ("gpt-4.1-mini"), empty for
	// the scripted model.
	Model       string
	System      string
	Messages    []events.Message
	Tools       []events.ToolSpec
	Instruction string
	// Script and ScriptIndex drive the scripted model: attempt n of this
	// call answers with response ScriptIndex+n-1.
	Script      *Script
	ScriptIndex int
	Attempt     int
}

// Response is a model's complete answer.
type Response struct {
	Text         string
	ToolCalls    []events.ToolCall
	FinishReason string
	Usage        events.Usage
}

// Provider makes model calls. Call streams text through emit as it arrives
// and returns the whole answer; a failure is an *Error when the provider can
// tell whether a retry may help.
type Provider interface {
	Call(ctx context.Context, req Request, emit func(delta string)) (Response, error)
}

// ErrorKind classifies a failed model call.
type ErrorKind string

// Error kinds. Only BadRequest is final: the same request fails again.
const (
	RateLimited ErrorKind = "rate_limited"
	ServerError ErrorKind = "server_error"
	Unavailable ErrorKind = "unavailable"
	BadRequest  ErrorKind = "bad_request"
)

// Error is a failed model call.
type Error struct {
	Kind    ErrorKind
	Message string
	// RetryAfter is the wait the provider asked for, 0 when it named none.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("model: %s: %s", e.Kind, e.Message) }

// Retryable reports whether another attempt may succeed.
func (e *Error) Retryable() bool { return e.Kind != BadRequest }

// ErrUnknownModel is a model name no provider serves.
var ErrUnknownModel = errors.New("unknown model")

// validProvider is what a provider's name may be: it is the prefix of a
// model name and a label of metrics, so nothing that needs escaping.
var validProvider = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Spec splits a model name into its provider and the provider's own name:
// "script" and "script:PATH" (a script file, relative to the agents file),
// or "PROVIDER/NAME" ("openai/gpt-4.1-mini", "anthropic/claude-sonnet-4-5",
// or any other provider an orchestrator was given). It checks only the
// syntax: whether PROVIDER is configured is for the caller to ask of its
// providers.
func Spec(model string) (provider, name string, err error) {
	if model == "script" {
		return "script", "", nil
	}
	if path, ok := strings.CutPrefix(model, "script:"); ok {
		if path == "" {
			return "", "", fmt.Errorf("model %q: %w: script: needs a file path", model, ErrUnknownModel)
		}
		return "script", path, nil
	}
	provider, name, ok := strings.Cut(model, "/")
	switch {
	case !ok || name == "":
		return "", "", fmt.Errorf("model %q: %w: want script, script:PATH or PROVIDER/NAME such as openai/gpt-4.1-mini", model, ErrUnknownModel)
	case !validProvider.MatchString(provider):
		return "", "", fmt.Errorf("model %q: %w: the provider %q is not 1 to 64 characters of [A-Za-z0-9_-]", model, ErrUnknownModel, provider)
	case provider == "script":
		// Callers take provider "script" with a name for a script file:
		// "script//etc/passwd" must not become one by another spelling.
		return "", "", fmt.Errorf("model %q: %w: a script file is named script:PATH", model, ErrUnknownModel)
	}
	return provider, name, nil
}
