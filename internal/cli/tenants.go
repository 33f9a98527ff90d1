package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// defaultTenantsFile is the tenants file when neither --tenants nor
// JETLOOP_TENANTS names one: the shipped multi-tenant deployment's.
const defaultTenantsFile = "deploy/tenants/tenants.yaml"

// tenantsPath is the tenants file the command uses.
func (c *command) tenantsPath() string {
	switch {
	case c.tenantsFile != "":
		return c.tenantsFile
	case os.Getenv("JETLOOP_TENANTS") != "":
		return os.Getenv("JETLOOP_TENANTS")
	}
	return defaultTenantsFile
}

// tenantRole is the role whose credentials a command takes with --tenant:
// admin provisions, the commands that only read are the viewer's, the rest
// the client's.
func tenantRole(command string) string {
	switch command {
	case "streams":
		return tenants.Admin
	case "watch", "replay", "export", "turns", "show", "top", "workflows", "workers":
		return tenants.Viewer
	}
	return tenants.Client
}

// authFor is the command's credentials: --tenant's seed when it is set,
// else the flags'.
func (c *command) authFor() (bus.Auth, error) {
	a := c.auth
	if c.tenant == "" {
		return a, nil
	}
	if a.Creds != "" {
		return a, errors.New("--tenant and --creds both name the credentials: give one")
	}
	path := c.tenantsPath()
	f, err := tenants.Load(path)
	if err != nil {
		return a, fmt.Errorf("--tenant %s: %w", c.tenant, err)
	}
	t := f.Get(c.tenant)
	if t == nil {
		return a, fmt.Errorf("--tenant %s: no such tenant in %s (jetloop tenants list)", c.tenant, path)
	}
	// The tenant's seed is the user: a NATS_USER from the environment
	// (or a password) must not be sent beside it.
	a.Creds, a.User, a.Password, a.PasswordFile = t.SeedPath(path, tenantRole(c.name)), "", "", ""
	return a, nil
}

func tenantsCmd(ctx context.Context, c *command, args []string) int {
	storage := c.flags.String("storage", "1GiB", "add: the tenant's file storage, a hard limit the server enforces (0: unlimited)")
	memory := c.flags.String("memory", "64MiB", "add: the tenant's memory storage (0: unlimited)")
	soft := c.flags.Int("soft-storage", tenants.DefaultSoftStorage, "add: the share of --storage, in percent, above which submissions are refused")
	inFlight := c.flags.Int("in-flight", 1000, "add: turns and workflows running at once (0: unbounded)")
	rate := c.flags.Float64("submit-rate", 500, "add: submissions accepted per second (0: unbounded)")
	burst := c.flags.Int("submit-burst", 0, "add: submissions accepted at once (default: the rate)")
	toolList := c.flags.String("tools", "", "add: tools its worker account serves besides the built-in ones, comma-separated")
	keep := c.flags.Bool("keep-streams", false, "remove: leave the tenant's streams on the server (they stay on disk, unreachable, until an account of that name is made again)")
	offline := c.flags.Bool("offline", false, "write the files only: ask no server (reload and provision yourself)")
	asJSON := c.flags.Bool("json", false, "list: one JSON object per tenant")
	out := c.flags.String("out", "", "add: the directory of the new tenant's seeds, DIR/NAME/ROLE.nk (default: beside a tenants file that --tenants or $JETLOOP_TENANTS names, else $XDG_CONFIG_HOME/jetloop/tenants, ~/.config/jetloop/tenants without it)")
	if !c.parse(args) {
		return c.exit
	}
	rest := c.flags.Args()
	if len(rest) == 0 {
		return c.usageErr("add, remove, list or render?")
	}
	path := c.tenantsPath()
	if err := c.resolveServer(); err != nil {
		return c.fail("%v", err)
	}
	if verb := rest[0]; verb == "add" || verb == "remove" || verb == "render" {
		// One command at a time edits the file: two adds at once would each
		// write the file they read, and lose the other's tenant.
		release, err := tenants.Lock(path, func() {
			fmt.Fprintf(c.stderr, "waiting for another jetloop tenants command to finish with %s\n", path)
		})
		if err != nil {
			return c.fail("lock %s: %v", path, err)
		}
		defer release()
	}
	switch verb := rest[0]; {
	case verb == "add" && len(rest) == 2:
		t := tenants.Tenant{Name: rest[1], SoftStorage: *soft, InFlight: *inFlight, SubmitRate: *rate, SubmitBurst: *burst}
		var err error
		if t.Storage, err = tenants.ParseSize(*storage); err != nil {
			return c.usageErr("--storage: %v", err)
		}
		if t.Memory, err = tenants.ParseSize(*memory); err != nil {
			return c.usageErr("--memory: %v", err)
		}
		for x := range strings.SplitSeq(*toolList, ",") {
			if x = strings.TrimSpace(x); x != "" {
				t.Tools = append(t.Tools, x)
			}
		}
		if *soft == tenants.DefaultSoftStorage {
			t.SoftStorage = 0 // the default, not written
		}
		if t.Keys, err = c.keysDir(*out, t.Name); err != nil {
			return c.fail("%v", err)
		}
		return c.tenantAdd(ctx, path, t, *offline)
	case verb == "remove" && len(rest) == 2:
		return c.tenantRemove(ctx, path, rest[1], *keep, *offline)
	case verb == "list" && len(rest) == 1:
		return c.tenantList(ctx, path, *offline, *asJSON)
	case verb == "render" && len(rest) == 1:
		f, err := loadTenants(path)
		if err != nil {
			return c.fail("%v", err)
		}
		if err := tenants.WriteFile(tenants.AccountsPath(path), tenants.Render(f), 0o644); err != nil {
			return c.fail("%v", err)
		}
		fmt.Fprintf(c.stdout, "wrote %s\n", tenants.AccountsPath(path))
		if *offline {
			return ExitOK
		}
		if err := c.reload(ctx, path); err != nil {
			return c.fail("%v", err)
		}
		return ExitOK
	}
	return c.usageErr("add NAME, remove NAME, list or render")
}

// keysDir is where tenants add writes the seeds of tenant name, as the
// tenant's keys ("" beside the tenants file). The default tenants file is
// the repository's deploy/tenants: seeds made for it go to the user's
// configuration, never into a tree that may be committed.
func (c *command) keysDir(out, name string) (string, error) {
	if out == "" && (c.tenantsFile != "" || os.Getenv("JETLOOP_TENANTS") != "") {
		return "", nil
	}
	if out == "" {
		base := os.Getenv("XDG_CONFIG_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("where to write the seeds: %v (give --out DIR)", err)
			}
			base = filepath.Join(home, ".config")
		}
		out = filepath.Join(base, "jetloop", "tenants")
	}
	dir, err := filepath.Abs(filepath.Join(out, name))
	if err != nil {
		return "", err
	}
	// Another deployment's tenant of that name may keep its seeds there.
	if _, err := os.Stat(dir); err == nil {
		return "", fmt.Errorf("%s exists already (another deployment's tenant %s?): remove it, or give --out DIR", dir, name)
	}
	return dir, nil
}

// loadTenants reads the tenants file, or an empty one where there is none
// yet (the first tenants add makes it).
func loadTenants(path string) (*tenants.File, error) {
	f, err := tenants.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &tenants.File{}, nil
	}
	return f, err
}

// tenantAdd makes tenant t: its users, its entry, the accounts, then the
// server's reload and its streams.
func (c *command) tenantAdd(ctx context.Context, path string, t tenants.Tenant, offline bool) int {
	f, err := loadTenants(path)
	if err != nil {
		return c.fail("%v", err)
	}
	if f.Get(t.Name) != nil {
		return c.fail("tenant %s is already in %s", t.Name, path)
	}
	if err := t.ValidateSettings(); err != nil {
		return c.usageErr("%v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return c.fail("%v", err)
	}
	if f.System == "" {
		if f.System, err = tenants.NewUser(tenants.SystemSeedPath(path)); err != nil {
			return c.fail("system user: %v", err)
		}
	}
	if t.Users, err = tenants.NewUsers(path, &t); err != nil {
		return c.fail("%v", err)
	}
	f.Tenants = append(f.Tenants, t)
	if err := c.writeTenants(path, f); err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintf(c.stdout, "added tenant %s to %s and wrote %s\n", t.Name, path, tenants.AccountsPath(path))
	if !offline {
		if code := c.reloadAndProvision(ctx, path, f.Get(t.Name)); code != ExitOK {
			return code
		}
	}
	c.printCredentials(path, f.Get(t.Name))
	if offline {
		fmt.Fprintf(c.stdout, "\nnext: reload the server (nats-server --signal reload, or jetloop tenants render), then\n  jetloop streams apply --tenant %s --tenants %s\n", t.Name, path)
	}
	return ExitOK
}

// writeTenants saves the file and the accounts rendered from it.
func (c *command) writeTenants(path string, f *tenants.File) error {
	if err := f.Save(path); err != nil {
		return err
	}
	return tenants.WriteFile(tenants.AccountsPath(path), tenants.Render(f), 0o644)
}

// reloadAndProvision reloads the servers, waits for the tenant's admin to
// get in and provisions its streams as it.
func (c *command) reloadAndProvision(ctx context.Context, path string, t *tenants.Tenant) int {
	if err := c.reload(ctx, path); err != nil {
		return c.fail("%v; the files are written: reload the server, then jetloop streams apply --tenant %s", err, t.Name)
	}
	nc, js, err := c.connectAs(ctx, path, t, tenants.Admin, 30*time.Second)
	if err != nil {
		return c.fail("the reloaded server does not let %s's admin in: %v", t.Name, err)
	}
	defer nc.Close()
	// A server that cannot reserve the tenant's storage or memory lets its
	// users in but enables no JetStream for the account: say why, and
	// take the tenant out again rather than leave one without streams.
	ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = js.AccountInfo(ictx)
	icancel()
	if err != nil {
		code := c.fail("the server enabled no JetStream for %s (%v): do the tenants' storage and memory together fit the server's "+
			"max_file_store and max_memory_store? Its log says why. Taking %s out again.", tenants.Account("JETLOOP", t.Name), err, t.Name)
		if rc := c.tenantRemove(ctx, path, t.Name, true, false); rc != ExitOK {
			return rc
		}
		return code
	}
	fmt.Fprintf(c.stdout, "provisioning %s's streams as its admin:\n", t.Name)
	if err := c.applyStreams(ctx, js, t.Provision(bus.DefaultProvision(nc.MaxPayload()))); err != nil {
		return c.fail("%v", err)
	}
	return ExitOK
}

// connectAs connects as a tenant's user, trying again for up to wait: a
// cluster's servers take a reload one after the other.
func (c *command) connectAs(ctx context.Context, path string, t *tenants.Tenant, role string, wait time.Duration) (*nats.Conn, jetstream.JetStream, error) {
	a := c.auth
	a.Creds, a.User, a.Password, a.PasswordFile, a.Inbox = t.SeedPath(path, role), "", "", "", bus.InboxCLI
	opts, err := a.Options()
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, nats.Timeout(3*time.Second), nats.RetryOnFailedConnect(false), nats.MaxReconnects(0))
	deadline := time.Now().Add(wait)
	for {
		nc, err := nats.Connect(c.serverURL(), opts...)
		if err == nil {
			js, err := bus.JetStreamFor(ctx, nc, c.auth.APIPrefix)
			if err != nil {
				nc.Close()
				return nil, nil, err
			}
			return nc, js, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, nil, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serverURL is the server the tenants command talks to (resolveServer):
// the tenants file's, unless --nats, NATS_URL or a context says otherwise.
func (c *command) serverURL() string {
	if err := c.resolveServer(); err != nil || c.url == "" {
		return bus.DefaultURL // tenantsCmd reported the error already
	}
	return c.url
}

// reload asks every server of the deployment to read its configuration
// again, as the system account's user: $SYS.REQ.SERVER.PING finds them,
// $SYS.REQ.SERVER.<id>.RELOAD reloads each (nats-server's events.go).
func (c *command) reload(ctx context.Context, path string) error {
	a := c.auth
	a.Creds, a.User, a.Password, a.PasswordFile, a.Inbox = tenants.SystemSeedPath(path), "", "", "", ""
	opts, err := a.Options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(c.serverURL(), append(opts, nats.Timeout(3*time.Second), nats.MaxReconnects(0))...)
	if err != nil {
		return fmt.Errorf("no server answered the system user at %s: %w", bus.RedactURL(c.serverURL()), err)
	}
	defer nc.Close()
	ids, err := pingServers(nc)
	if err != nil {
		return err
	}
	for _, id := range ids {
		// Twice: nats-server (2.15, server.go configureAccounts) starts
		// the service imports of an account that a reload introduces
		// only at the next reload, so that until then a new tenant's
		// client, viewer and workers find no responders behind their
		// imports. The second reload of the same file changes nothing
		// else.
		var name string
		for range 2 {
			var err error
			if name, err = reloadServer(ctx, nc, id); err != nil {
				return err
			}
		}
		fmt.Fprintf(c.stdout, "reloaded server %s\n", name)
	}
	return nil
}

// reloadServer asks server id to reload its configuration and returns its
// name.
func reloadServer(ctx context.Context, nc *nats.Conn, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, fmt.Sprintf("$SYS.REQ.SERVER.%s.RELOAD", id), nil)
	if err != nil {
		return "", fmt.Errorf("reload server %s: %w", id, err)
	}
	var r server.ServerAPIResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return "", fmt.Errorf("reload server %s: %s", id, m.Data)
	}
	if r.Error != nil {
		return "", fmt.Errorf("reload server %s: %s", id, r.Error.Description)
	}
	if r.Server != nil && r.Server.Name != "" {
		return r.Server.Name, nil
	}
	return id, nil
}

// pingServers returns the ids of the servers that answer a ping: every one
// the first names among its routes, or those that answered within two
// seconds of the first.
func pingServers(nc *nats.Conn) ([]string, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SYS.REQ.SERVER.PING", inbox, nil); err != nil {
		return nil, err
	}
	var ids []string
	want := 1
	deadline := time.Now().Add(5 * time.Second)
	for len(ids) < want {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			if len(ids) > 0 {
				return ids, nil // the rest did not answer: reload those that did
			}
			return nil, fmt.Errorf("no server answered $SYS.REQ.SERVER.PING: %w", err)
		}
		var s server.ServerStatsMsg
		if err := json.Unmarshal(m.Data, &s); err != nil || s.Server.ID == "" {
			continue
		}
		if !slices.Contains(ids, s.Server.ID) {
			ids = append(ids, s.Server.ID)
		}
		if len(ids) == 1 {
			peers := map[string]bool{}
			for _, r := range s.Stats.Routes {
				peers[r.Name] = true
			}
			want = 1 + len(peers)
			deadline = time.Now().Add(2 * time.Second)
		}
	}
	return ids, nil
}

// applyStreams is jetloop streams apply's work: p applied, what it did
// printed.
func (c *command) applyStreams(ctx context.Context, js jetstream.JetStream, p bus.Provision) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := bus.Apply(ctx, js, p)
	for _, line := range done {
		fmt.Fprintln(c.stdout, line)
	}
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintln(c.stdout, "everything matches the table: nothing to do")
	}
	return nil
}

// roleUse says what each role's credentials are for.
var roleUse = map[string]string{
	tenants.Admin:        "jetloop streams apply, operations",
	tenants.Orchestrator: "orchestrator --creds (or --tenants, serving every tenant)",
	tenants.Client:       "jetloop --tenant, the UI, the Go client: submit, steer, read",
	tenants.Viewer:       "read only",
	tenants.Toolworker:   "toolworker --creds: the built-in tools",
}

// printCredentials lists the seed files of tenant t's users.
func (c *command) printCredentials(path string, t *tenants.Tenant) {
	fmt.Fprintf(c.stdout, "\ntenant %s: storage %s (submissions refused above %d%%), memory %s, %d in flight, %g submissions/s\n",
		t.Name, sizeOrUnlimited(t.Storage), softPct(t), sizeOrUnlimited(t.Memory), t.InFlight, t.SubmitRate)
	fmt.Fprintf(c.stdout, "credentials (nkey seeds: --creds FILE, or jetloop --tenant %s):\n", t.Name)
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, r := range tenants.Roles {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", r, t.SeedPath(path, r), roleUse[r])
	}
	_ = w.Flush()
}

func sizeOrUnlimited(s tenants.Size) string {
	if s == 0 {
		return "unlimited"
	}
	return s.String()
}

func softPct(t *tenants.Tenant) int {
	if t.SoftStorage == 0 {
		return tenants.DefaultSoftStorage
	}
	return t.SoftStorage
}

// tenantRemove deletes tenant name's streams (as its admin), then its
// entry, accounts and seeds.
func (c *command) tenantRemove(ctx context.Context, path, name string, keep, offline bool) int {
	f, err := tenants.Load(path)
	if err != nil {
		return c.fail("%v", err)
	}
	t := f.Get(name)
	if t == nil {
		return c.fail("no tenant %s in %s", name, path)
	}
	seeds := filepath.Dir(t.SeedPath(path, tenants.Admin))
	if !keep && !offline {
		nc, js, err := c.connectAs(ctx, path, t, tenants.Admin, 0)
		if err != nil {
			return c.fail("connect as %s's admin to delete its streams: %v (--keep-streams leaves them)", name, err)
		}
		err = deleteStreams(ctx, js, c.stdout)
		nc.Close()
		if err != nil {
			return c.fail("%v", err)
		}
	}
	f.Tenants = slices.DeleteFunc(f.Tenants, func(t tenants.Tenant) bool { return t.Name == name })
	if err := c.writeTenants(path, f); err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintf(c.stdout, "removed tenant %s from %s and wrote %s\n", name, path, tenants.AccountsPath(path))
	if !offline {
		if err := c.reload(ctx, path); err != nil {
			return c.fail("%v; the files are written: reload the server yourself", err)
		}
	}
	// The seeds go last: until the reload the server still takes them.
	if err := os.RemoveAll(seeds); err != nil {
		return c.fail("%v", err)
	}
	return ExitOK
}

// deleteStreams deletes every stream of the account js reaches.
func deleteStreams(ctx context.Context, js jetstream.JetStream, out interface{ Write([]byte) (int, error) }) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list streams: %w", err)
	}
	for _, n := range all {
		if err := js.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", n, err)
		}
		fmt.Fprintf(out, "deleted stream %s\n", n)
	}
	return nil
}

// tenantUsage is one row of jetloop tenants list.
type tenantUsage struct {
	Name        string  `json:"name"`
	Storage     int64   `json:"storage"`
	SoftStorage int     `json:"soft_storage"`
	Memory      int64   `json:"memory"`
	InFlight    int     `json:"in_flight"`
	SubmitRate  float64 `json:"submit_rate"`
	// Used and Running are read from the server: -1 when it did not
	// answer.
	Used    int64 `json:"storage_used"`
	Running int   `json:"running"`
}

// tenantList prints the tenants, their quotas and, from the server, their
// usage.
func (c *command) tenantList(ctx context.Context, path string, offline, asJSON bool) int {
	f, err := tenants.Load(path)
	if err != nil {
		return c.fail("%v", err)
	}
	var rows []tenantUsage
	failed := false
	reachable := !offline
	for _, t := range f.Tenants {
		u := tenantUsage{Name: t.Name, Storage: int64(t.Storage), SoftStorage: softPct(&t), Memory: int64(t.Memory),
			InFlight: t.InFlight, SubmitRate: t.SubmitRate, Used: -1, Running: -1}
		if reachable {
			var err error
			u.Used, u.Running, err = c.usage(ctx, path, &t)
			if err != nil && errors.Is(err, nats.ErrNoServers) {
				reachable = false // no server: the others will not answer either
			}
			if err != nil {
				failed = true
				fmt.Fprintf(c.stderr, "jetloop tenants: %s: %v (at %s)\n", t.Name, err, bus.RedactURL(c.serverURL()))
			}
		}
		rows = append(rows, u)
	}
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		for _, r := range rows {
			_ = enc.Encode(r)
		}
		return listStatus(failed)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tSTORAGE USED / LIMIT\tSOFT\tRUNNING / IN FLIGHT\tSUBMIT RATE")
	for _, r := range rows {
		used, running := "?", "?"
		if r.Used >= 0 {
			used = tenants.Size(r.Used).String()
		}
		if r.Running >= 0 {
			running = fmt.Sprint(r.Running)
		}
		fmt.Fprintf(w, "%s\t%s / %s\t%d%%\t%s / %s\t%s\n", r.Name, used, sizeOrUnlimited(tenants.Size(r.Storage)), r.SoftStorage,
			running, unbounded(r.InFlight), unboundedF(r.SubmitRate))
	}
	_ = w.Flush()
	return listStatus(failed)
}

// listStatus is tenants list's exit status: what the server did not say
// is printed as ?, and the command fails so that a script notices.
func listStatus(failed bool) int {
	if failed {
		return ExitFailed
	}
	return ExitOK
}

func unbounded(n int) string {
	if n == 0 {
		return "unbounded"
	}
	return fmt.Sprint(n)
}

func unboundedF(r float64) string {
	if r == 0 {
		return "unbounded"
	}
	return fmt.Sprintf("%g/s", r)
}

// usage reads, as tenant's admin, its storage used and its unfinished
// turns and workflows (the keys of KV JETLOOP_LIVE).
func (c *command) usage(ctx context.Context, path string, t *tenants.Tenant) (int64, int, error) {
	nc, js, err := c.connectAs(ctx, path, t, tenants.Admin, 0)
	if err != nil {
		return -1, -1, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return -1, -1, err
	}
	kv, err := js.KeyValue(ctx, bus.BucketLive)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return int64(info.Store), 0, nil
	}
	if err != nil {
		return int64(info.Store), -1, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return int64(info.Store), -1, err
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if err := ctx.Err(); err != nil { // the lister ends quietly with ctx
		return int64(info.Store), -1, err
	}
	return int64(info.Store), n, nil
}
