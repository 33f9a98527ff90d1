//go:build linux

package tools_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/tools"
)

// TestMCPServerThatHangsOnStartLeavesNothingRunning: a server that never
// answers the initialize request fails the start when its context ends, and
// neither it nor a child it started is left running.
func TestMCPServerThatHangsOnStartLeavesNothingRunning(t *testing.T) {
	dir := t.TempDir()
	script := "sleep 1000 & echo $! > " + filepath.Join(dir, "child.pid") + "; echo $$ > " + filepath.Join(dir, "sh.pid") + "; sleep 1000"
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := tools.NewMCP(ctx, testLog(t), []tools.MCPServer{{Name: "hang", Command: []string{"sh", "-c", script}}})
	if err == nil || !strings.Contains(err.Error(), "start MCP server hang") {
		t.Fatalf("err = %v", err)
	}
	waitGone(t, pids(t, dir, "sh.pid", "child.pid"))
}
