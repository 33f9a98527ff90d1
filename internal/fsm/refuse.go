package fsm

import (
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
)

// refuse says why a call cannot run, or "" when it can: a tool the turn does
// not offer, or arguments that fail the tool's JSON Schema. No job is sent for
// such a call; its error result goes straight back to the model.
func (s *State) refuse(c events.ToolCall) string {
	spec, ok := s.spec(c.Name)
	if !ok {
		return fmt.Sprintf("error: tool %q is not available in this turn; available tools: %s", c.Name, strings.Join(names(s.Tools), ", "))
	}
	if err := schemas.ValidateArgs(spec.Parameters, c.Arguments); err != nil {
		return fmt.Sprintf("error: invalid arguments for %s: %v", c.Name, err)
	}
	switch {
	case spec.Agent == "":
	case spec.Agent == s.Agent:
		return fmt.Sprintf("error: agent %s cannot start itself as a subagent", spec.Agent)
	case s.Depth() >= MaxDepth:
		return fmt.Sprintf("error: subagent %s cannot run: this turn is a subagent at depth %d, the deepest allowed", spec.Agent, s.Depth())
	}
	return ""
}
