//go:build unix

package confined_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jetloop/jetloop/internal/confined"
)

// TestReadFile: only a regular file inside the directory, within the
// limit, is read; a name that misses says the same whatever lies outside.
func TestReadFile(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "ok.txt"), "four")
	write(filepath.Join(dir, "big.txt"), "eleven byte")
	write(filepath.Join(outside, "secret"), "x")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644) == nil

	if data, err := confined.ReadFile(dir, "ok.txt", 10); err != nil || string(data) != "four" {
		t.Errorf("ok.txt: %q, %v", data, err)
	}
	for _, tc := range []struct {
		name string
		is   error
		says string
	}{
		{name: "big.txt", is: confined.ErrTooLarge},
		{name: "missing", is: confined.ErrNoFile},
		{name: "out", is: confined.ErrNoFile},
		{name: "../" + filepath.Base(outside) + "/secret", is: confined.ErrNoFile},
		{name: "sub", says: "a directory"},
		{name: "fifo", says: "a named pipe"},
	} {
		if tc.name == "fifo" && !fifo {
			continue
		}
		_, err := confined.ReadFile(dir, tc.name, 10)
		switch {
		case err == nil:
			t.Errorf("%s was read", tc.name)
		case tc.is != nil && !errors.Is(err, tc.is):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.is)
		case tc.says != "" && !strings.Contains(err.Error(), tc.says):
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.says)
		}
	}
}
