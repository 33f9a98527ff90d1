//go:build unix

package confined

import "syscall"

// Nonblock keeps the open of a FIFO from waiting for its other end: an
// open flag for os.Root.OpenFile.
const Nonblock = syscall.O_NONBLOCK
