// Package tenants reads and writes a multi-tenant deployment's tenant list:
// the file (tenants.yaml) that `jetloop tenants add|remove` edits, from
// which the server's accounts are rendered, and that the orchestrator and
// the tool worker read (--tenants) to serve every tenant through a
// connection to its own account.
//
// A tenant is an account set of its own (docs/protocol.md, "Tenants"): its
// streams live in the account JETLOOP_<name>, and its clients, viewers and
// tool workers in CLIENT_<name>, VIEWER_<name> and WORKER_<name>, which
// import from it exactly as the single-tenant layout's accounts import from
// JETLOOP. Subjects, stream names and messages are the same in every
// tenant: a program does not know which tenant it serves but by the
// credentials it connects with.
//
// Users are nkeys: the file holds each role's public key, and the seed of
// each lies beside it in <dir>/<tenant>/<role>.nk, readable by its owner
// only, for --creds.
package tenants

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
	"gopkg.in/yaml.v3"
)

// Roles of a tenant, each a user of its own whose seed is <role>.nk.
const (
	Admin        = "admin"
	Orchestrator = "orchestrator"
	Client       = "client"
	Viewer       = "viewer"
	Toolworker   = "toolworker"
)

// Roles are every role a tenant has a user for, in the order the file
// lists them.
var Roles = []string{Admin, Orchestrator, Client, Viewer, Toolworker}

// DefaultSoftStorage is the share of a tenant's storage above which new
// submissions are refused, when the file does not say: what is left lets
// the turns already running write their ends.
const DefaultSoftStorage = 90

// nameRE is what a tenant's name may be: it becomes part of account names
// (JETLOOP_<name>), of paths and of a metric label.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// toolRE is what a tool's name may be: it is a token of subjects and of a
// consumer's name.
var toolRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// File is a tenants.yaml.
type File struct {
	// System is the public nkey of the system account's user, whose seed
	// is sys.nk beside the file: jetloop tenants reloads the server as it.
	System string `yaml:"system,omitempty"`
	// Server is the URL of the deployment's servers (a comma-separated
	// list for a cluster): jetloop --tenant and jetloop tenants connect
	// there unless --nats or NATS_URL says otherwise.
	Server  string   `yaml:"server,omitempty"`
	Tenants []Tenant `yaml:"tenants"`
}

// Tenant is one tenant: its name, its quotas and its users' public keys.
type Tenant struct {
	Name string `yaml:"name"`
	// Storage is the hard limit of the tenant's JetStream file storage,
	// enforced by the server (the account's max_file). Zero: unlimited.
	Storage Size `yaml:"storage,omitempty"`
	// Memory is the hard limit of its memory storage. Zero: unlimited.
	Memory Size `yaml:"memory,omitempty"`
	// SoftStorage is the percentage of Storage above which the
	// orchestrator refuses new submissions (default 90).
	SoftStorage int `yaml:"soft_storage,omitempty"`
	// InFlight bounds the turns and workflows started and not finished.
	// Zero: unbounded.
	InFlight int `yaml:"in_flight,omitempty"`
	// SubmitRate bounds the submissions accepted per second, with bursts
	// of SubmitBurst (default: the rate, at least 1). Zero: unbounded.
	SubmitRate  float64 `yaml:"submit_rate,omitempty"`
	SubmitBurst int     `yaml:"submit_burst,omitempty"`
	// Tools are tools its worker account serves besides the built-in
	// ones (BuiltinTools).
	Tools []string `yaml:"tools,omitempty"`
	// Users are the public nkeys of the tenant's users, by role.
	Users map[string]string `yaml:"users"`
	// Keys is the directory of the users' seeds (<Keys>/<role>.nk) when
	// they are not beside the file: jetloop tenants add keeps the seeds it
	// makes out of a repository's tree. A relative path is the file's
	// directory's.
	Keys string `yaml:"keys,omitempty"`
}

// Size is a number of bytes, written with an optional unit: 512MiB, 1GiB,
// 10GB, or a plain number.
type Size int64

var units = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1000, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1000 * 1000, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1000 * 1000 * 1000, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1000 * 1000 * 1000 * 1000, "tib": 1 << 40,
}

// ParseSize reads a Size.
func ParseSize(s string) (Size, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	}
	mult, ok := units[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f*float64(mult) > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: not a size", s)
	}
	return Size(f * float64(mult)), nil
}

// String writes s with the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []string{"TiB", "GiB", "MiB", "KiB"} {
		if m := units[strings.ToLower(u)]; s >= Size(m) && int64(s)%m == 0 {
			return strconv.FormatInt(int64(s)/m, 10) + u
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// UnmarshalYAML reads a number or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = v
	return nil
}

// MarshalYAML writes s with its unit.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

// SoftLimit is the storage in bytes above which submissions are refused,
// 0 when storage is unlimited.
func (t *Tenant) SoftLimit() int64 {
	pct := t.SoftStorage
	if pct == 0 {
		pct = DefaultSoftStorage
	}
	return int64(t.Storage) / 100 * int64(pct)
}

// Burst is how many submissions may be accepted at once.
func (t *Tenant) Burst() int {
	if t.SubmitBurst > 0 {
		return t.SubmitBurst
	}
	return max(1, int(math.Ceil(t.SubmitRate)))
}

// Account is the name of the tenant's account of the given kind: JETLOOP
// (its streams), CLIENT, VIEWER or WORKER.
func Account(kind, tenant string) string { return kind + "_" + tenant }

// Validate reports what is wrong with t.
func (t *Tenant) Validate() error {
	if err := t.ValidateSettings(); err != nil {
		return err
	}
	for _, r := range Roles {
		if !isUserKey(t.Users[r]) {
			return fmt.Errorf("tenant %s: users.%s is not a user's public nkey (56 characters, starting with U)", t.Name, r)
		}
	}
	return nil
}

// ValidateSettings reports what is wrong with t but its users: what a
// tenant to be added is checked for before its users are made.
func (t *Tenant) ValidateSettings() error {
	if !nameRE.MatchString(t.Name) {
		return fmt.Errorf("tenant %q: a name is a lower-case letter, then up to 31 lower-case letters, digits or _", t.Name)
	}
	switch {
	case t.SoftStorage < 0 || t.SoftStorage > 100:
		return fmt.Errorf("tenant %s: soft_storage is a percentage of storage, 1 to 100", t.Name)
	case t.InFlight < 0:
		return fmt.Errorf("tenant %s: in_flight may not be negative", t.Name)
	case t.SubmitRate < 0 || t.SubmitBurst < 0:
		return fmt.Errorf("tenant %s: submit_rate and submit_burst may not be negative", t.Name)
	}
	for _, x := range t.Tools {
		if !toolRE.MatchString(x) {
			return fmt.Errorf("tenant %s: tool %q: a tool's name is letters, digits, _ or -, up to 64", t.Name, x)
		}
	}
	return nil
}

// Load reads the tenants file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse reads a tenants file's content.
func Parse(data []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // EOF: no tenants yet
		return nil, err
	}
	if f.System != "" && !isUserKey(f.System) {
		return nil, errors.New("system is not a user's public nkey (56 characters, starting with U)")
	}
	seen := map[string]bool{}
	for i := range f.Tenants {
		t := &f.Tenants[i]
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tenant %s is listed twice", t.Name)
		}
		seen[t.Name] = true
	}
	return &f, nil
}

// Get is the tenant named name, or nil.
func (f *File) Get(name string) *Tenant {
	i := slices.IndexFunc(f.Tenants, func(t Tenant) bool { return t.Name == name })
	if i < 0 {
		return nil
	}
	return &f.Tenants[i]
}

// Names are the tenants' names, in the file's order.
func (f *File) Names() []string {
	var names []string
	for _, t := range f.Tenants {
		names = append(names, t.Name)
	}
	return names
}

// SeedPath is the file of the seed of a tenant's user of the given role,
// beside the tenants file at path.
func SeedPath(path, tenant, role string) string {
	return filepath.Join(filepath.Dir(path), tenant, role+".nk")
}

// SeedPath is the file of the seed of t's user of role, for the tenants
// file at path: under t.Keys when set, else beside the file (SeedPath).
func (t *Tenant) SeedPath(path, role string) string {
	switch {
	case t.Keys == "":
		return SeedPath(path, t.Name, role)
	case filepath.IsAbs(t.Keys):
		return filepath.Join(t.Keys, role+".nk")
	}
	return filepath.Join(filepath.Dir(path), t.Keys, role+".nk")
}

// isUserKey reports whether k is a user's public nkey: its checksum
// holds, so that nothing but a key (no quote, brace or newline) reaches
// the rendered accounts.conf.
func isUserKey(k string) bool { return nkeys.IsValidPublicUserKey(k) }

// SystemSeedPath is the file of the seed of the system account's user,
// beside the tenants file at path.
func SystemSeedPath(path string) string { return filepath.Join(filepath.Dir(path), "sys.nk") }

// AccountsPath is the accounts.conf rendered from the tenants file at path,
// beside it.
func AccountsPath(path string) string { return filepath.Join(filepath.Dir(path), "accounts.conf") }

// header heads a tenants file that Save writes.
const header = `# The tenants of this jetloop deployment (docs/tenants.md), written by
# jetloop tenants add|remove, which render accounts.conf beside it from it.
# users are the public nkeys of each tenant's users; their seeds are the
# files <tenant>/<role>.nk beside this file (<keys>/<role>.nk for a tenant
# with keys), and sys.nk the system user's, readable by their owner only:
# pass one to --creds. Those committed in
# jetloop's repository (deploy/tenants) are public development keys, like
# deploy/dev/*.password: make your own (jetloop tenants add) before the
# server listens anywhere but loopback.
`

// Save writes f to path, with the header, replacing the file at once.
func (f *File) Save(path string) error {
	var b strings.Builder
	b.WriteString(header)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return err
	}
	return WriteFile(path, []byte(b.String()), 0o644)
}

// WriteFile writes data to path through a temporary file renamed over it:
// a reader (the server reloading, an orchestrator starting) sees the old
// file or the new one, never half of one.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a failure; gone after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// lockPath is the file Lock locks, beside the tenants file.
func lockPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock")
}
