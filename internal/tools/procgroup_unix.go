//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd as the leader of a new process group. Its children
// join the group, so killGroup reaches a shell's `sleep 100 &` or the node
// process behind an npx, and a Ctrl-C meant for the worker does not reach a
// command the worker is still draining calls from.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills every process left in cmd's group. Without processes left
// the group is gone and the kill finds nothing.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
