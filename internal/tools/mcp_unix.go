//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// ownGroup starts an MCP server in a process group of its own, so that a
// Ctrl-C meant for the worker does not kill the server under calls the
// worker is still draining: the worker stops its servers itself.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills what is left of a stopped server's process group: the
// children of a server started through npx or sh -c.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
