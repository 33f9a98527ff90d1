package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultProtect names the directories the file tools refuse by default, at
// any depth under the root: a repository's .git (a hook written there runs
// on the user's next push) and .jetloop, where an orchestrator's embedded
// server keeps its streams.
var DefaultProtect = []string{".git", ".jetloop"}

// ParseProtect reads a --protect list: directory names separated by commas.
// An empty list protects nothing. A name must be one path element, so that
// it means the same at every depth.
func ParseProtect(list string) ([]string, error) {
	var names []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			return nil, fmt.Errorf("tools: protect %q: give a directory name, not a path", name)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// BuiltinOption configures the built-in tools.
type BuiltinOption func(*files) error

// WithProtect replaces DefaultProtect: the file tools refuse every path with
// an element named like one of names (compared case-sensitively on Linux,
// without case elsewhere, where file systems mostly ignore it). No names
// protect nothing.
func WithProtect(names ...string) BuiltinOption {
	return func(f *files) error {
		checked, err := ParseProtect(strings.Join(names, ","))
		if err != nil {
			return err
		}
		if len(checked) != len(names) {
			return fmt.Errorf("tools: protect %q: empty or repeated names", names)
		}
		f.protect = checked
		return nil
	}
}

// isProtected reports whether name is one of the protected names.
func (f files) isProtected(name string) bool {
	return slices.ContainsFunc(f.protect, func(p string) bool { return sameName(p, name) })
}

// ProtectedError refuses a path inside a protected directory.
type ProtectedError struct {
	Path    string   // as the call gave it
	Dir     string   // the protected name on its way
	Protect []string // every protected name, for the way out
}

func (e *ProtectedError) Error() string {
	return fmt.Sprintf("%s is protected: the tool worker refuses paths inside %s (its --protect list is %s); "+
		"to allow them, restart it with a --protect list without %s",
		e.Path, e.Dir, strings.Join(e.Protect, ","), e.Dir)
}

// checkProtected refuses p when an element of it, or of the path it leads to
// once the symlinks on its way are followed, is protected: a repository may
// hold a symlink hooks -> .git/hooks, and a .git of a nested repository is
// as dangerous as the top one. It returns the resolved path, which is the
// one to open.
func (f files) checkProtected(p string) (string, error) {
	real, err := f.resolve(p)
	if err != nil {
		return "", err
	}
	for _, q := range []string{p, real} {
		for el := range strings.SplitSeq(filepath.ToSlash(q), "/") {
			if f.isProtected(el) {
				return "", &ProtectedError{Path: filepath.ToSlash(p), Dir: el, Protect: f.protect}
			}
		}
	}
	return real, nil
}

// maxLinks bounds the symlinks resolve follows, as the kernel does (ELOOP).
const maxLinks = 40

// errOutside is what resolve says of a path that leaves the root, as os.Root
// would refuse it.
var errOutside = errors.New("path escapes from the root")

// resolve follows the symlinks of p, a cleaned path relative to the root, as
// os.Root does, and returns the path without symlinks it leads to. The part
// of p that does not exist yet is kept as given. Opening the result still
// goes through os.Root, which refuses anything leading out: resolve only
// lets the protection see where a path really goes.
func (f files) resolve(p string) (string, error) {
	todo := strings.Split(filepath.ToSlash(p), "/")
	var done []string
	links, missing := 0, false
	for len(todo) > 0 {
		el := todo[0]
		todo = todo[1:]
		switch el {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", fmt.Errorf("%s: %w", filepath.ToSlash(p), errOutside)
			}
			done = done[:len(done)-1]
			continue
		}
		done = append(done, el)
		if missing {
			continue
		}
		cur := filepath.Join(done...)
		info, err := f.root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			missing = true
			continue
		}
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", filepath.ToSlash(p))
		}
		target, err := f.root.Readlink(cur)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) || filepath.VolumeName(target) != "" {
			return "", fmt.Errorf("%s: %w", filepath.ToSlash(p), errOutside)
		}
		done = done[:len(done)-1]
		todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return filepath.Join(done...), nil
}

// HardLinkError refuses a file with more than one hard link: another name
// of it may live outside the root, and a write through one name would
// change what every other name shows.
type HardLinkError struct {
	Path  string
	Links uint64
}

func (e *HardLinkError) Error() string {
	return fmt.Sprintf("%s has %d hard links: a file with more than one is refused, as one of its other names may be outside the root", e.Path, e.Links)
}

// checkLinks refuses a regular file with more than one hard link.
func checkLinks(p string, info fs.FileInfo) error {
	if !info.Mode().IsRegular() {
		return nil
	}
	if n, ok := hardLinks(info); ok && n > 1 {
		return &HardLinkError{Path: filepath.ToSlash(p), Links: n}
	}
	return nil
}

// storeDepth bounds how deep under the root CheckRoot looks for a server's
// store: enough for ./.jetloop/jetstream and nats.conf's
// ./.jetloop/nats/jetstream one level further down, and not a walk of a
// whole home directory.
const storeDepth = 4

// StoreError refuses a root that holds a JetStream server's store outside
// every protected directory: the file tools could read or rewrite the
// streams of jetloop, forging events or results.
type StoreError struct {
	Root  string // the worker's root
	Store string // the store's jetstream directory
	// Protect is the protection in force, for the flag that would fix it.
	Protect []string
	// Above is set when the root is itself inside the store, where no
	// --protect helps.
	Above bool
}

func (e *StoreError) Error() string {
	if e.Above {
		return fmt.Sprintf("tools: root %s is inside the JetStream store %s: the file tools could rewrite jetloop's streams; choose another --root", e.Root, e.Store)
	}
	rel, err := filepath.Rel(e.Root, e.Store)
	if err != nil {
		rel = e.Store
	}
	first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	return fmt.Sprintf("tools: root %s holds the JetStream store %s, which the file tools could read and rewrite: "+
		"protect it (--protect %s) or choose a --root that does not contain it",
		e.Root, e.Store, strings.Join(append(slices.Clip(e.Protect), first), ","))
}

// CheckRoot refuses a root that holds the store of a JetStream server with
// jetloop's streams (a directory jetstream/<account>/streams/JETLOOP_*) less
// than storeDepth levels down and not inside a directory named in protect,
// or that lies inside such a store. Symlinks are not followed: the file tools
// refuse those that lead out of the root, and those that stay inside lead to
// what the walk sees anyway.
func CheckRoot(root string, protect []string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("tools: root %s: %w", root, err)
	}
	for dir := abs; ; {
		if filepath.Base(dir) == "jetstream" && isStore(dir) {
			return &StoreError{Root: abs, Store: dir, Above: true}
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	f := files{protect: protect}
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if dir == abs {
				return fmt.Errorf("tools: root %s: %w", root, err)
			}
			return nil // not readable by the worker either
		}
		for _, e := range entries {
			if !e.IsDir() || f.isProtected(e.Name()) {
				continue
			}
			sub := filepath.Join(dir, e.Name())
			if e.Name() == "jetstream" && isStore(sub) {
				return &StoreError{Root: abs, Store: sub, Protect: protect}
			}
			if depth < storeDepth {
				if err := walk(sub, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(abs, 1)
}

// isStore reports whether dir is laid out as a nats-server's JetStream
// store holding jetloop's streams: <dir>/<account>/streams/<stream>, the
// account $G without accounts, and the key-value and object buckets stored
// as the streams KV_<bucket> and OBJ_<bucket>.
func isStore(dir string) bool {
	accounts, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, a := range accounts {
		if !a.IsDir() {
			continue
		}
		streams, err := os.ReadDir(filepath.Join(dir, a.Name(), "streams"))
		if err != nil {
			continue
		}
		for _, s := range streams {
			name := strings.TrimPrefix(strings.TrimPrefix(s.Name(), "KV_"), "OBJ_")
			if s.IsDir() && strings.HasPrefix(name, "JETLOOP_") {
				return true
			}
		}
	}
	return false
}
