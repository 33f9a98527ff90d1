//go:build !unix

package tools

import "io/fs"

// hardLinks cannot tell where a FileInfo does not carry the link count.
func hardLinks(fs.FileInfo) (uint64, bool) { return 0, false }
