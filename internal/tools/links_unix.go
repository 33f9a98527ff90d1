//go:build unix

package tools

import (
	"io/fs"
	"syscall"
)

// hardLinks returns how many hard links a file has, when the system says.
func hardLinks(info fs.FileInfo) (uint64, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}
