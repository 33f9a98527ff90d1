package model_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/model/modeltest"
)

// BenchmarkProviders measures one streamed call of each remote provider
// against a local server: an answer of 500 words of text and two tool calls
// (about 600 events), so the cost of the SDK, the assembly and the loopback
// HTTP round trip shows apart from any real model.
//
//	go test -run '^$' -bench Providers -benchtime 200x ./internal/model
func BenchmarkProviders(b *testing.B) {
	a := modeltest.Answer{Text: strings.Repeat("word ", 500), Input: 1000, Output: 600, Calls: []modeltest.Call{
		{ID: "call_bench_000000000000001", Name: "read_file", Arguments: `{"path":"internal/model/openai.go","offset":10}`},
		{ID: "call_bench_000000000000002", Name: "list_dir", Arguments: `{"path":"."}`}}}
	req := model.Request{TurnID: "bench", Step: 1, Kind: events.ModelStep, Model: "m", Attempt: 1,
		Messages: []events.Message{{Role: events.RoleUser, Content: "go"}}, Tools: []events.ToolSpec{readFile, listDir}}
	for _, name := range []string{"openai", "anthropic"} {
		body := modeltest.OpenAIStream(a)
		if name == "anthropic" {
			body = modeltest.AnthropicStream(a)
		}
		b.Run(fmt.Sprintf("%s/%dKiB", name, len(body)>>10), func(b *testing.B) {
			srv := modeltest.New(b, func(modeltest.Request, int) modeltest.Reply { return modeltest.Stream(body) })
			var p model.Provider
			var err error
			if name == "openai" {
				p, err = model.NewOpenAI(model.WithBaseURL(srv.URL + "/v1"))
			} else {
				p, err = model.NewAnthropic(model.WithBaseURL(srv.URL))
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := p.Call(context.Background(), req, func(string) {})
				if err != nil || len(resp.ToolCalls) != 2 {
					b.Fatalf("%+v %v", resp, err)
				}
			}
		})
	}
}
