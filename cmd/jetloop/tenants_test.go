package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/cli"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
)

// seeds lists the seed files under dir.
func seeds(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".nk") {
			found = append(found, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	return found
}

// TestTenantsAddKeepsSeedsOutOfTheTree: run in a checkout with the shipped
// tenants file (deploy/tenants, named by nothing), jetloop tenants add
// writes the new tenant's seeds under $XDG_CONFIG_HOME/jetloop, not into
// the tree, and records where in the file: jetloop --tenant finds them,
// tenants remove deletes them. --out names another place; a place that
// holds a tenant's seeds already is not written over.
func TestTenantsAddKeepsSeedsOutOfTheTree(t *testing.T) {
	root, xdg, out := t.TempDir(), t.TempDir(), t.TempDir()
	url := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	path, config, err := tenants.Copy("../../deploy", filepath.Join(root, "deploy"), url, filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	if rel, _ := filepath.Rel(root, path); rel != filepath.Join("deploy", "tenants", "tenants.yaml") {
		t.Fatalf("the copy's tenants file is %s", rel)
	}
	srv := testkit.StartConfigAsWritten(t, config)
	before := seeds(t, root)
	env := []string{"JETLOOP_RUN_MAIN=1", "XDG_CONFIG_HOME=" + xdg, "HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "JETLOOP_TENANTS" && k != "NATS_URL" && k != "XDG_CONFIG_HOME" && k != "HOME" {
			env = append(env, kv)
		}
	}
	jetloop := func(want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], args...)
		cmd.Dir, cmd.Env = root, env
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("jetloop %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, b.String())
		}
		return b.String()
	}

	keys := filepath.Join(xdg, "jetloop", "tenants", "c")
	said := jetloop(0, "tenants", "add", "c", "--nats", srv.ClientURL())
	if !strings.Contains(said, filepath.Join(keys, "client.nk")) {
		t.Errorf("tenants add c does not name the seeds' place:\n%s", said)
	}
	for _, r := range tenants.Roles {
		fi, err := os.Stat(filepath.Join(keys, r+".nk"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("c's %s seed: %v %v, want mode 0600", r, fi, err)
		}
	}
	if got := seeds(t, root); !slices.Equal(got, before) {
		t.Errorf("seeds in the tree after tenants add: %v, want only %v", got, before)
	}
	f, err := tenants.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Get("c"); c == nil || c.Keys != keys {
		t.Fatalf("the file's c: %+v, want keys %s", c, keys)
	}
	// c's client, found through the file, submits into c's inbox.
	jetloop(0, "submit", "--tenant", "c", "--nats", srv.ClientURL(), "--no-wait", "hello from c")

	// --out, offline: the seeds go there, the tree stays as it was.
	jetloop(0, "tenants", "add", "d", "--out", out, "--offline")
	if got := seeds(t, out); len(got) != len(tenants.Roles) || filepath.Dir(got[0]) != filepath.Join(out, "d") {
		t.Errorf("seeds under --out: %v", got)
	}
	if got := seeds(t, root); !slices.Equal(got, before) {
		t.Errorf("seeds in the tree after tenants add --out: %v", got)
	}
	// Another deployment's e keeps its seeds.
	other := filepath.Join(xdg, "jetloop", "tenants", "e")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if said := jetloop(cli.ExitFailed, "tenants", "add", "e", "--offline"); !strings.Contains(said, "exists already") {
		t.Errorf("tenants add e over another's seeds:\n%s", said)
	}

	jetloop(0, "tenants", "remove", "c", "--nats", srv.ClientURL())
	if _, err := os.Stat(keys); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("c's seeds after tenants remove: %v", err)
	}
}
