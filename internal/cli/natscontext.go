package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/tenants"
)

// natsContext is what jetloop reads of a context of the nats CLI
// (~/.config/nats/context/NAME.json), so that one `nats context select`
// serves both tools.
type natsContext struct {
	name      string
	URL       string `json:"url"`
	User      string `json:"user"`
	Password  string `json:"password"`
	Creds     string `json:"creds"`
	NKey      string `json:"nkey"`
	CA        string `json:"ca"`
	APIPrefix string `json:"jetstream_api_prefix"`
}

// natsConfigDir is where the nats CLI keeps its contexts.
func natsConfigDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// loadContext reads the context name, or, when name is empty, the one
// `nats context select` chose (context.txt); it returns nil when none is
// selected.
func loadContext(name string) (*natsContext, error) {
	dir, err := natsConfigDir()
	if err != nil {
		return nil, err
	}
	explicit := name != ""
	if !explicit {
		data, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if name = strings.TrimSpace(string(data)); name == "" {
			return nil, nil
		}
	}
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("nats context %q: not a context name", name)
	}
	path := filepath.Join(dir, "context", name+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("nats context %q: no %s (nats context ls lists them)", name, path)
		}
		return nil, fmt.Errorf("nats context %q: %w", name, err)
	}
	ctx := &natsContext{name: name}
	if err := json.Unmarshal(data, ctx); err != nil {
		return nil, fmt.Errorf("nats context %q: %s: %w", name, path, err)
	}
	return ctx, nil
}

// resolveServer settles the server and, where no flag names them, the
// credentials, in this order: --nats, NATS_URL, --context (or
// NATS_CONTEXT), the tenants file's server (for --tenant and the tenants
// command), the nats CLI's selected context, nats://127.0.0.1:4222. A
// context's credentials apply only with its URL, and only when no flag or
// variable names others.
func (c *command) resolveServer() error {
	if c.resolved {
		return nil
	}
	c.resolved = true
	if c.url == "" {
		c.url = os.Getenv("NATS_URL")
	}
	if c.url != "" {
		return nil
	}
	name := c.contextName
	if name == "" {
		name = os.Getenv("NATS_CONTEXT")
	}
	if name != "" {
		if err := c.useContext(name); err != nil {
			return err
		}
		if c.url == "" {
			c.url = bus.DefaultURL // a context without a URL means the nats CLI's default too
		}
		return nil
	}
	if c.tenant != "" || c.name == "tenants" {
		f, err := tenants.Load(c.tenantsPath())
		if err == nil && f.Server != "" {
			c.url = f.Server
			return nil
		}
	}
	if err := c.useContext(""); err != nil {
		return err
	}
	if c.url == "" {
		c.url = bus.DefaultURL
	}
	return nil
}

func (c *command) useContext(name string) error {
	nctx, err := loadContext(name)
	if err != nil || nctx == nil {
		return err
	}
	c.url = nctx.URL
	a := &c.auth
	if c.tenant == "" && a.Creds == "" && a.User == "" && a.Password == "" && a.PasswordFile == "" && os.Getenv("NATS_PASSWORD") == "" {
		a.User, a.Password, a.Creds = nctx.User, nctx.Password, nctx.Creds
		if a.Creds == "" {
			a.Creds = nctx.NKey
		}
	}
	if a.CA == "" {
		a.CA = nctx.CA
	}
	if a.APIPrefix == "" {
		a.APIPrefix = nctx.APIPrefix
	}
	return nil
}
