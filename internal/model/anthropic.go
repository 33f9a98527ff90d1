package model

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/jetloop/jetloop/internal/events"
)

// Anthropic calls the Anthropic Messages API through the official SDK,
// streaming. The SDK does not retry: retries are redeliveries of the model
// job.
type Anthropic struct {
	client anthropic.Client
	cfg    config
}

// NewAnthropic makes an Anthropic provider. Without WithBaseURL it talks to
// Anthropic. It reads no environment variable itself: Providers does.
func NewAnthropic(opts ...Option) (*Anthropic, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.maxTokens == 0 {
		cfg.maxTokens = DefaultAnthropicMaxTokens
	}
	o := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithAPIKey(cfg.apiKey), option.WithMaxRetries(0)}
	if cfg.baseURL != "" {
		o = append(o, option.WithBaseURL(cfg.baseURL))
	}
	if cfg.client != nil {
		o = append(o, option.WithHTTPClient(cfg.client))
	}
	return &Anthropic{client: anthropic.NewClient(o...), cfg: cfg}, nil
}

// Call makes one attempt of a call, streaming its text through emit. Its
// error shows no key: see WithSecrets.
func (p *Anthropic) Call(ctx context.Context, req Request, emit func(string)) (Response, error) {
	resp, err := p.call(ctx, req, emit)
	return resp, p.cfg.scrub.error(err)
}

func (p *Anthropic) call(ctx context.Context, req Request, emit func(string)) (Response, error) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	var res *http.Response
	stream := p.client.Messages.NewStreaming(cctx, anthropicParams(req, p.cfg.maxTokens), option.WithResponseInto(&res))
	defer stream.Close()

	var (
		msg     anthropic.Message
		stopped bool
		// inputs are the tool_use inputs as streamed, by block index: the
		// SDK's accumulator turns an input that is not JSON into {}, and a
		// call must never run with arguments its model did not write.
		inputs = map[int64]*strings.Builder{}
	)
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return Response{}, &Error{Kind: Unavailable, Message: "anthropic: a malformed stream: " + err.Error()}
		}
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				inputs[ev.Index] = new(strings.Builder)
			}
		case "content_block_delta":
			switch {
			case ev.Delta.Type == "text_delta" && ev.Delta.Text != "":
				emit(ev.Delta.Text)
			case ev.Delta.Type == "input_json_delta" && inputs[ev.Index] != nil:
				inputs[ev.Index].WriteString(ev.Delta.PartialJSON)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return Response{}, anthropicFailure(ctx, p.cfg, res, err)
	}
	if !stopped || msg.StopReason == "" {
		// Without message_stop the answer may be cut short: never take a
		// truncated answer for a whole one.
		return Response{}, &Error{Kind: Unavailable, Message: "anthropic: the stream ended before the answer was finished"}
	}

	var resp Response
	var calls []int
	for i, b := range msg.Content {
		switch b.Type {
		case "text":
			resp.Text += b.Text
		case "tool_use":
			calls = append(calls, i)
		}
	}
	resp.FinishReason = finishReason(string(msg.StopReason), len(calls))
	for _, i := range calls {
		b := msg.Content[i]
		input := ""
		if in := inputs[int64(i)]; in != nil && in.Len() > 0 {
			input = in.String()
		} else if len(b.Input) > 0 {
			input = string(b.Input) // given whole at the block's start
		}
		args, err := arguments(input, b.Name, resp.FinishReason)
		if err != nil {
			return Response{}, err
		}
		resp.ToolCalls = append(resp.ToolCalls, events.ToolCall{CallID: b.ID, Name: b.Name, Arguments: args})
	}
	callIDs(req, resp.ToolCalls)
	u := msg.Usage
	// input_tokens leaves out what the prompt cache wrote or read; jetloop
	// counts the whole prompt, as OpenAI's prompt_tokens does.
	resp.Usage = events.Usage{InputTokens: int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens),
		OutputTokens: int(u.OutputTokens)}
	return resp, nil
}

// anthropicFailure classifies a failed attempt, including an error event
// inside a stream that began well (status 200): its type says what happened.
func anthropicFailure(ctx context.Context, cfg config, res *http.Response, err error) error {
	var ae *anthropic.Error
	if ctx.Err() == nil && errors.As(err, &ae) && ae.StatusCode < 400 {
		msg := "anthropic: " + string(ae.Type()) + ": " + ae.RawJSON()
		switch ae.Type() {
		case "rate_limit_error":
			return &Error{Kind: RateLimited, Message: msg}
		case "overloaded_error", "timeout_error":
			return &Error{Kind: Unavailable, Message: msg}
		case "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large":
			return &Error{Kind: BadRequest, Message: msg}
		default:
			return &Error{Kind: ServerError, Message: msg}
		}
	}
	return failure(ctx, "anthropic", cfg.timeout, res, err)
}

// anthropicParams is the Messages request of a call: the system prompt, the
// conversation with tool results grouped into user messages, the tools
// offered (none on a summary call, whose instruction is the last user
// message) and max_tokens.
func anthropicParams(req Request, maxTokens int64) anthropic.MessageNewParams {
	var msgs []anthropic.MessageParam
	// add appends blocks to the conversation, joining them to the last
	// message when it has the same role: the API wants one user message for
	// all the results of a step, results before any text.
	add := func(role anthropic.MessageParamRole, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case events.RoleUser:
			add(anthropic.MessageParamRoleUser, textBlocks(m.Content)...)
		case events.RoleAssistant:
			blocks := textBlocks(m.Content)
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.CallID, c.Arguments, c.Name))
			}
			add(anthropic.MessageParamRoleAssistant, blocks...)
		case events.RoleTool:
			r := anthropic.ToolResultBlockParam{ToolUseID: m.CallID, IsError: anthropic.Bool(m.IsError)}
			if strings.TrimSpace(m.Content) != "" {
				// The API refuses a blank text block; a result without
				// content is allowed.
				r.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
			}
			add(anthropic.MessageParamRoleUser, anthropic.ContentBlockParamUnion{OfToolResult: &r})
		}
	}
	params := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: maxTokens}
	if strings.TrimSpace(req.System) != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	if req.Kind == events.ModelSummary {
		add(anthropic.MessageParamRoleUser, textBlocks(req.Instruction)...)
	} else {
		for _, t := range req.Tools {
			schema := schemaMap(t.Parameters)
			in := anthropic.ToolInputSchemaParam{Properties: schema["properties"], ExtraFields: map[string]any{}}
			if req, ok := schema["required"].([]any); ok {
				for _, r := range req {
					if s, ok := r.(string); ok {
						in.Required = append(in.Required, s)
					}
				}
			}
			for k, v := range schema {
				if k != "type" && k != "properties" && k != "required" {
					in.ExtraFields[k] = v
				}
			}
			tool := anthropic.ToolParam{Name: t.Name, InputSchema: in}
			if t.Description != "" {
				tool.Description = anthropic.String(t.Description)
			}
			params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
		}
	}
	params.Messages = msgs
	return params
}

// textBlocks is a text as content blocks: none for a text that is empty or
// only whitespace, which the API refuses ("text content blocks must contain
// non-whitespace text") with a final 400. Such texts occur: a model's "\n\n"
// before its tool calls, a blank tool output.
func textBlocks(text string) []anthropic.ContentBlockParamUnion {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	return []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(text)}
}
