package schemas_test

import (
	"testing"

	"github.com/jetloop/jetloop/schemas"
)

// TestTimeoutHasACeiling: limits.timeout_ms is milliseconds that become a
// time.Duration (nanoseconds in an int64): 1e18 of them overflow it, so the
// schema stops at 30 days, in a submission as in turn.started.
func TestTimeoutHasACeiling(t *testing.T) {
	for _, tc := range []struct {
		timeout string
		ok      bool
	}{
		{"1", true},
		{"600000", true},
		{"2592000000", true},
		{"2592000001", false},
		{"1e18", false},
		{"1000000000000000000", false},
		{"9223372036854775807", false},
		{"0", false},
		{"-1", false},
	} {
		doc := `{"turn_id": "t1", "input": [{"role": "user", "content": "hi"}], "limits": {"timeout_ms": ` + tc.timeout + `}}`
		if err := schemas.Validate("submit", []byte(doc)); (err == nil) != tc.ok {
			t.Errorf("submit with timeout_ms %s: %v, want valid %v", tc.timeout, err, tc.ok)
		}
	}
	for timeout, ok := range map[string]bool{"600000": true, "1e18": false} {
		started := `{"agent": "A", "model": "script", "input": [], "history": 0, "tools": [],
			"limits": {"steps": 1, "budget": 1, "doom_loop": 3, "timeout_ms": ` + timeout + `}}`
		if err := schemas.Validate("event.turn.started", []byte(started)); (err == nil) != ok {
			t.Errorf("turn.started with timeout_ms %s: %v, want valid %v", timeout, err, ok)
		}
	}
}
