package tools

import (
	"fmt"
	"syscall"
)

// hideEnviron makes the worker process non-dumpable, so that a shell
// command, which runs as the same user, cannot read the worker's own
// environment (its API keys, a NATS_URL with a password) from
// /proc/<worker>/environ, where `cat /proc/$PPID/environ` finds it. A user
// with CAP_SYS_PTRACE (root) still can.
func hideEnviron() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("tools: hide the worker's environment from shell commands: %w", errno)
	}
	return nil
}
