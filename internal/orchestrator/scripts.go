package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/confined"
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
		o.admit.scripts.allow = allow
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
func (a *admission) loadScript(ctx context.Context, name string, detail bool) (*model.Script, error) {
	ref := fmt.Sprintf("script:%q", name)
	if !filepath.IsLocal(name) {
		return nil, &deadLetter{ref + ": the path must be relative to the agents directory and stay inside it"}
	}
	p := &a.scripts
	p.once.Do(func() { p.slots = make(chan struct{}, scriptReaders) })
	timer := time.NewTimer(scriptReadTimeout)
	defer timer.Stop()
	select {
	case p.slots <- struct{}{}:
	case <-timer.C:
		return nil, &deadLetter{ref + ": the agents directory cannot be read now (earlier reads are stuck)"}
	case <-ctx.Done():
		return nil, &retry{err: ctx.Err()}
	}
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		defer func() { <-p.slots }()
		data, err := confined.ReadFile(a.agentsDir, name, model.MaxScriptSize)
		done <- read{data, err}
	}()
	var r read
	select {
	case r = <-done:
	case <-timer.C:
		return nil, &deadLetter{fmt.Sprintf("%s: not read within %s", ref, scriptReadTimeout)}
	case <-ctx.Done():
		return nil, &retry{err: ctx.Err()}
	}
	switch {
	case errors.Is(r.err, confined.ErrNoFile):
		// One message for every way a name misses, so nothing outside
		// the directory can be told apart.
		return nil, &deadLetter{ref + ": no readable file of that name inside the agents directory"}
	case errors.Is(r.err, confined.ErrTooLarge):
		return nil, &deadLetter{fmt.Sprintf("%s: larger than %d bytes (1 MiB), the most a script file may be", ref, model.MaxScriptSize)}
	case r.err != nil:
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
