package cli

import (
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/timeline"
)

// The short forms the commands' tables print, as the trace does.

var (
	indent = timeline.Indent
	clip   = timeline.Clip
)

// deref is a step cap, the default when none is set.
func deref(p *int) int {
	if p == nil {
		return fsm.MaxSteps
	}
	return *p
}

func since(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("+%dms", d.Milliseconds())
	}
	return fmt.Sprintf("+%.1fs", d.Seconds())
}
