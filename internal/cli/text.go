package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/fsm"
)

// The short forms the commands' tables print, as the trace does.

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// clip makes one line of s, cut to n runes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

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
