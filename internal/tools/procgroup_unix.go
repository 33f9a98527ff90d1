//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd as the leader of a new process group and makes its
// context's cancellation kill the whole group, not only the leader: a shell
// that started `sleep 100 &` must not leave the sleep behind.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		killGroup(cmd)
		return nil
	}
}

// killGroup kills every process left in cmd's group. Without processes left
// the group is gone and the kill finds nothing.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
