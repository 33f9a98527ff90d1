//go:build !linux

package tools

import "strings"

// sameName compares directory names without case: the file systems of
// macOS and Windows mostly ignore it, so .GIT opens .git there.
func sameName(a, b string) bool { return strings.EqualFold(a, b) }
