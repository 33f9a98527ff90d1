package cli

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/model"
)

// builtin holds the agents demo and dev serve when no agents file is named
// and none is at defaultAgents: General, with every built-in tool and a
// scripted model, so both work in any directory without an API key.
//
//go:embed builtin
var builtin embed.FS

// defaultAgents is where demo and dev look for agents without --agents.
const defaultAgents = "data/AGENTS.md"

const agentsUsage = "AGENTS.md file or directory (default " + defaultAgents + ", else the built-in General agent)"

// loadAgents loads the agents of path, or without one those of
// defaultAgents when it exists, else the built-in agents. Every diagnostic
// is printed on stderr, where a person sees it whatever the log level. dir
// is the directory the agents' script:PATH models resolve in; cleanup
// removes what the built-in agents needed on disk.
func (c *command) loadAgents(path string) (set *agents.Set, dir string, cleanup func(), err error) {
	cleanup = func() {}
	if path == "" {
		path = defaultAgents
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			// script:PATH resolves on disk beside the agents file, so the
			// built-in files are written out for the process's lifetime.
			tmp, err := os.MkdirTemp("", "jetloop-agents-")
			if err != nil {
				return nil, "", cleanup, err
			}
			cleanup = func() { os.RemoveAll(tmp) }
			sub, _ := fs.Sub(builtin, "builtin")
			if err := os.CopyFS(tmp, sub); err != nil {
				cleanup()
				return nil, "", func() {}, err
			}
			path = filepath.Join(tmp, "AGENTS.md")
			fmt.Fprintf(c.stderr, "jetloop %s: no --agents and no %s here: serving the built-in General agent (a scripted model)\n", c.name, defaultAgents)
		}
	}
	set, diags, err := agents.Load(path)
	for _, d := range diags {
		fmt.Fprintf(c.stderr, "jetloop %s: %s\n", c.name, d)
	}
	if err != nil {
		cleanup()
		return nil, "", func() {}, err
	}
	dir = path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	return set, dir, cleanup, nil
}

// tryHint is the submit command that dev suggests, for the agents it
// serves: the agent named only when there are several (General when it is
// one of them), and a scripted model when the agent's own cannot answer a
// plain submission (it needs an API key the environment lacks, or it is
// the bare script model, which needs a script): the demo script beside the
// agents, else fallback, a one-answer script dev writes.
func tryHint(set *agents.Set, dir, fallback string, getenv func(string) string) string {
	names := set.Names()
	args := []string{"submit", "--watch"}
	name := names[0]
	if a, ok := set.Get("General"); ok {
		name = a.Name
	}
	if len(names) > 1 {
		args = append(args, "--agent", name)
	}
	a, _ := set.Get(name)
	if a.Model == "script" || !modelReady(a.Model, getenv) {
		if fi, err := os.Stat(filepath.Join(dir, "scripts", "demo.yaml")); err == nil && fi.Mode().IsRegular() {
			args = append(args, "--model", "script:scripts/demo.yaml")
		} else if fallback != "" {
			args = append(args, "--script", fallback)
		}
	}
	return strings.Join(args, " ") + " 'hello'"
}

// modelReady reports whether a turn of an agent with this model can call
// it: a script, or a provider the environment configures.
func modelReady(m string, getenv func(string) string) bool {
	provider, _, err := model.Spec(m)
	if err != nil {
		return false
	}
	ps, err := model.Providers(getenv)
	if err != nil {
		return false
	}
	p, ok := ps[provider]
	return ok && (provider == "script" || model.Configured(p))
}
