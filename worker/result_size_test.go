package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tools"
)

// angles is a tool whose output is 200 KB of '<': an HTML-escaping encoder
// would write each as \u003c, six times its size and past a message.
type angles struct{}

func (angles) Spec() events.ToolSpec { return events.ToolSpec{Name: "angles", Description: "Angles."} }

func (angles) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{Output: strings.Repeat("<", 200_000)}, nil
}

// An output under the cap reaches the turn whole, whatever its characters:
// results are encoded without HTML escaping, so 200 KB of '<' stays 200 KB
// on the wire and is neither cut nor refused by the server.
func TestResultsAreNotHTMLEscaped(t *testing.T) {
	e := newEnv(t)
	e.worker([]tools.Tool{angles{}})
	e.job(job("t1", "angles", `{}`))
	r := e.result("t1")
	if r.IsError || r.Output != strings.Repeat("<", 200_000) {
		t.Errorf("result of %d bytes, is_error %v, ending %q", len(r.Output), r.IsError, r.Output[max(len(r.Output)-80, 0):])
	}
}
