package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/model"
)

// scriptReadTimeout bounds the read of a script file, so that a slow or
// stuck file system holds the shard handling the submission no longer.
const scriptReadTimeout = 2 * time.Second

// scriptReaders bounds the reads that may be stuck at once: a read past its
// deadline is abandoned, not stopped, and keeps its slot until it returns.
const scriptReaders = 8

// ScriptsOff is the reason a submission is refused that would run the
// scripted model without the operator's consent.
const ScriptsOff = "scripts are off: this orchestrator accepts model script (inline or script:PATH) " +
	"in a submission only when started with --allow-scripts (on in jetloop demo and jetloop dev)"

// scriptPolicy is whether submissions may run scripts, and the slots of the
// confined reads of script files. Its zero value refuses them.
type scriptPolicy struct {
	allow bool
	once  sync.Once
	slots chan struct{}
}

// WithAllowScripts lets submissions use the scripted model (off by default):
// model script with an inline script, or model script:PATH with PATH read
// inside the agents directory. A script reads no secret, but it lets anyone
// who may submit choose the model's answers (and so the tool calls the turn
// makes) and makes the orchestrator read files of the agents directory.
//
// An agent whose own model is script:PATH runs without it when the
// submission names no model and no script: the agents file is the
// operator's, and so is the script it names. A fork that keeps such an
// agent's model counts the same; a fork that inherits a script its
// original's submission carried, or an agent whose model is a bare script
// that every submission must supply, needs it.
func WithAllowScripts(allow bool) Option {
	return func(o *Orchestrator) error {
		o.scripts.allow = allow
		return nil
	}
}

// loadScript reads the script file name inside the agents directory. The
// file must be a regular file of at most model.MaxScriptSize bytes that no
// absolute path, ".." or symbolic link reaches outside the directory, and it
// is read within scriptReadTimeout. What it says of a name that is not a
// readable file inside the directory is the same whatever lies outside, so
// a refusal tells nothing about the orchestrator's files. detail says
// whether an invalid script's error may quote it: only for a file that the
// agents file names itself; for a name from a submission it gives the line
// of a syntax error at most, or a submitter would learn the key names of
// any YAML or JSON file that happens to sit in the directory.
func (o *Orchestrator) loadScript(ctx context.Context, name string, detail bool) (*model.Script, error) {
	ref := fmt.Sprintf("script:%q", name)
	if !filepath.IsLocal(name) {
		return nil, &deadLetter{ref + ": the path must be relative to the agents directory and stay inside it"}
	}
	p := &o.scripts
	p.once.Do(func() { p.slots = make(chan struct{}, scriptReaders) })
	timer := time.NewTimer(scriptReadTimeout)
	defer timer.Stop()
	select {
	case p.slots <- struct{}{}:
	case <-timer.C:
		return nil, &deadLetter{ref + ": the agents directory cannot be read now (earlier reads are stuck)"}
	case <-ctx.Done():
		return nil, &retry{ctx.Err()}
	}
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		defer func() { <-p.slots }()
		data, err := readConfined(o.agents.Dir(), name)
		done <- read{data, err}
	}()
	var r read
	select {
	case r = <-done:
	case <-timer.C:
		return nil, &deadLetter{fmt.Sprintf("%s: not read within %s", ref, scriptReadTimeout)}
	case <-ctx.Done():
		return nil, &retry{ctx.Err()}
	}
	if r.err != nil {
		return nil, &deadLetter{ref + ": " + r.err.Error()}
	}
	sc, err := model.ParseScript(r.data)
	if err == nil {
		return sc, nil
	}
	var se *model.ScriptError
	switch {
	case detail:
		return nil, &deadLetter{fmt.Sprintf("%s: %v", ref, err)}
	case errors.As(err, &se) && se.Line > 0:
		return nil, &deadLetter{fmt.Sprintf("%s: not a valid script (YAML syntax error on line %d)", ref, se.Line)}
	default:
		return nil, &deadLetter{ref + ": not a valid script"}
	}
}

// errNoScriptFile stands for every way a name fails to reach a file inside
// the directory: it does not exist, a link leads outside, it may not be
// read. One message for all, so nothing outside can be told apart.
var errNoScriptFile = errors.New("no readable file of that name inside the agents directory")

// readConfined reads name inside dir through an os.Root, which refuses ".."
// and symbolic links that lead out of it. A FIFO, device or directory is
// refused by its mode before it is opened (opening a FIFO for reading waits
// for a writer; a device may do anything when opened), and the open does not
// block either, in case the name was swapped for one in between.
func readConfined(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, errNoScriptFile
	}
	defer root.Close()
	info, err := root.Stat(name)
	if err != nil {
		return nil, errNoScriptFile
	}
	if err := regular(info); err != nil {
		return nil, err
	}
	f, err := root.OpenFile(name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, errNoScriptFile
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, errNoScriptFile
	}
	if err := regular(info); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, model.MaxScriptSize+1))
	if err != nil {
		return nil, errNoScriptFile
	}
	if len(data) > model.MaxScriptSize {
		return nil, errTooLarge
	}
	return data, nil
}

var errTooLarge = fmt.Errorf("larger than %d bytes (1 MiB), the most a script file may be", model.MaxScriptSize)

func regular(info os.FileInfo) error {
	if !info.Mode().IsRegular() {
		return fmt.Errorf("not a regular file but %s", kindOf(info.Mode()))
	}
	if info.Size() > model.MaxScriptSize {
		return errTooLarge
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
