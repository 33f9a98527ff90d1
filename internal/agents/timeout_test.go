package agents

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/schemas"
)

// TestTimeoutCeiling: a timeout past MaxTimeout does not load, with an
// error that names the file and the line; MaxTimeout itself does.
func TestTimeoutCeiling(t *testing.T) {
	for timeout, wantErr := range map[string]bool{"100000h": true, "721h": true, "2562047h": true, "720h": false, "10m": false} {
		dir := write(t, map[string]string{"AGENTS.md": "---\nname: A\nmodel: script\ntimeout: " + timeout + "\n---\nA.\n"})
		path := filepath.Join(dir, "AGENTS.md")
		set, diags, err := Load(path)
		if !wantErr {
			if err != nil {
				t.Errorf("timeout %s: %v", timeout, err)
				continue
			}
			if a, _ := set.Get("A"); a.Timeout > MaxTimeout || a.Timeout <= 0 {
				t.Errorf("timeout %s: read as %s", timeout, a.Timeout)
			}
			continue
		}
		want := path + ":4: error: timeout: \"" + timeout + "\" is longer than the ceiling"
		if err == nil || len(diags) != 1 || !strings.HasPrefix(diags[0].String(), want) {
			t.Errorf("timeout %s: err %v, diagnostics %q, want %q…", timeout, err, strs(diags), want)
		}
	}
}

// TestTimeoutCeilingIsTheSchemas: the ceiling is the schema's maximum of
// limits.timeout_ms, so every agent's timeout fits turn.started's limits.
func TestTimeoutCeilingIsTheSchemas(t *testing.T) {
	ms := MaxTimeout / time.Millisecond
	for n, ok := range map[int64]bool{int64(ms): true, int64(ms) + 1: false} {
		doc, _ := json.Marshal(map[string]any{"turn_id": "t", "limits": map[string]any{"timeout_ms": n}})
		if err := schemas.Validate("submit", doc); (err == nil) != ok {
			t.Errorf("timeout_ms %d: %v", n, err)
		}
	}
}
