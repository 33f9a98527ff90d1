package confined

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNoFile stands for every way a name fails to reach a file inside the
// directory: it does not exist, a link leads outside, it may not be read.
// One error for all, so nothing outside can be told apart.
var ErrNoFile = errors.New("confined: no readable file of that name inside the directory")

// ErrTooLarge is a file of more bytes than the read allows.
var ErrTooLarge = errors.New("confined: file too large")

// ReadFile reads name inside dir through an os.Root, which refuses ".."
// and symbolic links that lead out of it, if it is a regular file of at
// most limit bytes. A FIFO, device or directory is refused by its mode
// before it is opened (opening a FIFO for reading waits for a writer; a
// device may do anything when opened), and the open does not block either,
// in case the name was swapped for one in between.
func ReadFile(dir, name string, limit int64) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, ErrNoFile
	}
	defer root.Close()
	info, err := root.Stat(name)
	if err != nil {
		return nil, ErrNoFile
	}
	if err := regular(info, limit); err != nil {
		return nil, err
	}
	f, err := root.OpenFile(name, os.O_RDONLY|Nonblock, 0)
	if err != nil {
		return nil, ErrNoFile
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, ErrNoFile
	}
	if err := regular(info, limit); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, ErrNoFile
	}
	if int64(len(data)) > limit {
		return nil, ErrTooLarge
	}
	return data, nil
}

func regular(info os.FileInfo, limit int64) error {
	if !info.Mode().IsRegular() {
		return fmt.Errorf("not a regular file but %s", kindOf(info.Mode()))
	}
	if info.Size() > limit {
		return ErrTooLarge
	}
	return nil
}

func kindOf(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}
