//go:build !unix

package tenants

// Lock is a no-op where flock(2) is not: run one `jetloop tenants`
// command at a time there.
func Lock(path string, waiting func()) (release func(), err error) { return func() {}, nil }
