//go:build !unix

package confined

// Nonblock is nothing where there are no FIFOs to block on.
const Nonblock = 0
