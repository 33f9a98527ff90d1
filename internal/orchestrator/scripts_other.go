//go:build !unix

package orchestrator

// openNonblock is nothing where there are no FIFOs to block on.
const openNonblock = 0
