package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAI calls any OpenAI-compatible chat completions endpoint (OpenAI,
// vLLM, Ollama, llama.cpp's server, OpenRouter) through the official SDK,
// streaming. The SDK does not retry: retries are redeliveries of the model
// job.
type OpenAI struct {
	client openai.Client
	cfg    config
}

// NewOpenAI makes an OpenAI-compatible provider. Without WithBaseURL it
// talks to OpenAI.
func NewOpenAI(opts ...Option) (*OpenAI, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	o := []option.RequestOption{option.WithAPIKey(cfg.apiKey), option.WithMaxRetries(0)}
	if cfg.baseURL != "" {
		o = append(o, option.WithBaseURL(cfg.baseURL))
	}
	if cfg.client != nil {
		o = append(o, option.WithHTTPClient(cfg.client))
	}
	return &OpenAI{client: openai.NewClient(o...), cfg: cfg}, nil
}

// Call makes one attempt of a call, streaming its text through emit. Its
// error shows no key: see WithSecrets.
func (p *OpenAI) Call(ctx context.Context, req Request, emit func(string)) (Response, error) {
	resp, err := p.call(ctx, req, emit)
	return resp, p.cfg.scrub.error(err)
}

func (p *OpenAI) call(ctx context.Context, req Request, emit func(string)) (Response, error) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	var res *http.Response
	stream := p.client.Chat.Completions.NewStreaming(cctx, openaiParams(req, p.cfg.maxTokens), option.WithResponseInto(&res))
	defer stream.Close()

	var (
		resp   Response
		text   strings.Builder
		finish string
		// calls are in the order they began; open holds the call each
		// index is assembling.
		calls []*openaiCall
		open  = map[int64]*openaiCall{}
	)
	for stream.Next() {
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			resp.Usage = events.Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens)}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // jetloop asks for one choice
			}
			// A refusal is the model's answer too: the user should read it.
			for _, d := range []string{ch.Delta.Content, ch.Delta.Refusal} {
				if d != "" {
					text.WriteString(d)
					emit(d)
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				c := open[tc.Index]
				// A new id at an index already in use is a new call: some
				// servers send whole calls without an index, all as 0.
				if c == nil || (tc.ID != "" && c.id != "" && tc.ID != c.id) {
					c = &openaiCall{}
					open[tc.Index] = c
					calls = append(calls, c)
				}
				if tc.ID != "" {
					c.id = tc.ID
				}
				if c.name == "" {
					c.name = tc.Function.Name
				}
				c.args += tc.Function.Arguments
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		var se *ssestream.StreamError
		if errors.As(err, &se) && ctx.Err() == nil {
			// The server reported a failure inside a stream it had begun.
			return Response{}, &Error{Kind: ServerError, Message: "openai: " + se.Message}
		}
		return Response{}, failure(ctx, "openai", p.cfg.timeout, res, err)
	}
	if finish == "" {
		// Without a finish reason the answer may be cut short: never take
		// a truncated answer for a whole one.
		return Response{}, &Error{Kind: Unavailable, Message: "openai: the stream ended before the answer was finished"}
	}
	if finish == "error" || finish == "abort" {
		// The server gave up on the answer (OpenRouter, vLLM): what came
		// before is cut short.
		return Response{}, &Error{Kind: ServerError, Message: fmt.Sprintf("openai: the server ended the answer with finish_reason %q", finish)}
	}
	resp.Text = text.String()
	resp.FinishReason = finishReason(finish, len(calls))
	for _, c := range calls {
		args, err := arguments(c.args, c.name, resp.FinishReason)
		if err != nil {
			return Response{}, err
		}
		resp.ToolCalls = append(resp.ToolCalls, events.ToolCall{CallID: c.id, Name: c.name, Arguments: args})
	}
	callIDs(req, resp.ToolCalls)
	return resp, nil
}

// openaiCall is a tool call being assembled from its fragments.
type openaiCall struct {
	id, name string
	args     string
}

// ErrorPrefix marks the content of a tool message whose call failed, for
// providers (OpenAI's chat completions) that have no field for it.
const ErrorPrefix = "error: "

// openaiParams is the chat completions request of a call: the system prompt,
// the conversation, the tools offered (none on a summary call, whose
// instruction is the last user message) and the usage chunk asked for.
func openaiParams(req Request, maxTokens int64) openai.ChatCompletionNewParams {
	var msgs []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		msgs = append(msgs, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case events.RoleUser:
			msgs = append(msgs, openai.UserMessage(m.Content))
		case events.RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.CallID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: c.Name, Arguments: string(c.Arguments)},
					}})
			}
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case events.RoleTool:
			content := m.Content
			if m.IsError {
				content = ErrorPrefix + content
			}
			msgs = append(msgs, openai.ToolMessage(content, m.CallID))
		}
	}
	params := openai.ChatCompletionNewParams{
		Model:         req.Model,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.Kind == events.ModelSummary {
		if req.Instruction != "" {
			msgs = append(msgs, openai.UserMessage(req.Instruction))
		}
	} else {
		for _, t := range req.Tools {
			fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schemaMap(t.Parameters)}
			if t.Description != "" {
				fn.Description = openai.String(t.Description)
			}
			params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
		}
	}
	params.Messages = msgs
	if maxTokens > 0 {
		params.MaxCompletionTokens = openai.Int(maxTokens)
	}
	return params
}
