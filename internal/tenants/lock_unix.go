//go:build unix

package tenants

import (
	"os"
	"path/filepath"
	"syscall"
)

// Lock takes the lock of the tenants file at path, waiting for another
// holder to let it go (it calls waiting once first, when it has to wait),
// and returns its release. `jetloop tenants add|remove|render` hold it from
// reading the file to writing it and the accounts rendered from it: two run
// at once would each write the file they read, and one tenant's entry — its
// keys already handed out — would be lost. The lock is an flock(2) on a file
// beside it (.<name>.lock), so it goes with its holder's process, crash
// included.
func Lock(path string, waiting func()) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath(path), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, err
		}
		if waiting != nil {
			waiting()
		}
		for {
			if err = syscall.Flock(fd, syscall.LOCK_EX); err != syscall.EINTR {
				break
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() {
		_ = syscall.Flock(fd, syscall.LOCK_UN)
		f.Close()
	}, nil
}
