package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// copyTenants lays the shipped multi-tenant deployment out in a temporary
// directory (inproc.CopyTenants) and returns its tenants file, config and
// the server's store.
func copyTenants(t *testing.T) (path, config, store string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path, config = inproc.CopyTenants(t, filepath.Join(filepath.Dir(file), "..", "..", "deploy"))
	return path, config, filepath.Join(filepath.Dir(filepath.Dir(path)), "store")
}

// connectSeed connects with an nkey seed file.
func connectSeed(url, seed string) (*nats.Conn, error) {
	opt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, opt, nats.CustomInboxPrefix(bus.InboxCLI), nats.MaxReconnects(0))
}

// TestTenantsAddAndRemove: jetloop tenants add c against a running server
// of the shipped multi-tenant config reloads it, provisions c's streams as
// c's admin and hands out seeds with which c's client submits into c's
// inbox (jetloop submit --tenant c); tenants a's connections live through
// the reload; tenants list reports c's usage; tenants remove c deletes c's
// streams, its accounts and its seeds.
func TestTenantsAddAndRemove(t *testing.T) {
	path, config, store := copyTenants(t)
	srv := testkit.StartConfigAsWritten(t, config)
	url := srv.ClientURL()
	jl := func(args ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code := Main(context.Background(), append(args, "--nats", url, "--tenants", path), &out, &out)
		return out.String(), code
	}
	aClient, err := connectSeed(url, tenants.SeedPath(path, "a", tenants.Client))
	if err != nil {
		t.Fatal(err)
	}
	defer aClient.Close()

	// More storage than the server has: refused, and taken out again.
	out, code := jl("tenants", "add", "c", "--storage", "20GiB")
	if code != ExitFailed || !strings.Contains(out, "max_file_store") {
		t.Fatalf("tenants add c with 20GiB on a 10GB server: exit %d:\n%s", code, out)
	}
	if f, err := tenants.Load(path); err != nil || f.Get("c") != nil {
		t.Fatalf("c is left in the file: %v", err)
	}

	out, code = jl("tenants", "add", "c", "--storage", "256MiB", "--in-flight", "10", "--submit-rate", "5", "--tools", "invoice_total")
	if code != 0 {
		t.Fatalf("tenants add c: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"reloaded server jetloop-tenants-1", "created stream JETLOOP_EVENTS", "created bucket JETLOOP_LIVE",
		tenants.SeedPath(path, "c", tenants.Client), "storage 256MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("tenants add c did not say %q:\n%s", want, out)
		}
	}
	for _, r := range tenants.Roles {
		fi, err := os.Stat(tenants.SeedPath(path, "c", r))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("seed of c's %s: %v %v, want mode 0600", r, fi.Mode(), err)
		}
	}
	f, err := tenants.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Get("c"); c == nil || c.Storage != 256<<20 || c.InFlight != 10 || c.SubmitRate != 5 || len(c.Tools) != 1 || c.Tools[0] != "invoice_total" {
		t.Fatalf("tenants.yaml's c: %+v", c)
	}
	accounts, err := os.ReadFile(tenants.AccountsPath(path))
	if err != nil || !bytes.Equal(accounts, tenants.Render(f)) {
		t.Fatalf("accounts.conf is not the rendering of the file (%v)", err)
	}

	// a's client was not disconnected by the reload.
	if _, err := aClient.Request(bus.APIPrefix+".INFO", nil, 5*time.Second); err != nil || !aClient.IsConnected() {
		t.Errorf("a's client after the reload: %v", err)
	}

	// c's client submits, through the CLI's --tenant, into c's inbox.
	if out, code := jl("submit", "--tenant", "c", "--no-wait", "hello from c"); code != 0 {
		t.Fatalf("submit --tenant c: exit %d:\n%s", code, out)
	}
	admin, err := connectSeed(url, tenants.SeedPath(path, "c", tenants.Admin))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inbox, err := js.Stream(ctx, events.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := inbox.GetLastMsgForSubject(ctx, "jetloop.inbox.>")
	if err != nil || !strings.Contains(string(msg.Data), "hello from c") {
		t.Fatalf("c's inbox: %v %v", msg, err)
	}
	info, err := js.AccountInfo(ctx)
	if err != nil || info.Limits.MaxStore != 256<<20 {
		t.Fatalf("c's account limits: %+v %v", info, err)
	}
	admin.Close()

	out, code = jl("tenants", "list", "--json")
	if code != 0 {
		t.Fatalf("tenants list: exit %d:\n%s", code, out)
	}
	var rows []tenantUsage
	for line := range strings.Lines(out) {
		var u tenantUsage
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatalf("tenants list --json: %v:\n%s", err, out)
		}
		rows = append(rows, u)
	}
	if len(rows) != 3 || rows[2].Name != "c" || rows[2].Used <= 0 || rows[2].Running != 0 || rows[2].Storage != 256<<20 {
		t.Fatalf("tenants list: %+v", rows)
	}

	oldAdmin := filepath.Join(t.TempDir(), "admin.nk")
	seed, err := os.ReadFile(tenants.SeedPath(path, "c", tenants.Admin))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(oldAdmin, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = jl("tenants", "remove", "c")
	if code != 0 {
		t.Fatalf("tenants remove c: exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "deleted stream JETLOOP_INBOX") || !strings.Contains(out, "reloaded server") {
		t.Errorf("tenants remove c:\n%s", out)
	}
	if _, err := os.Stat(filepath.Dir(tenants.SeedPath(path, "c", tenants.Admin))); !os.IsNotExist(err) {
		t.Errorf("c's seeds are still there: %v", err)
	}
	if f, err := tenants.Load(path); err != nil || f.Get("c") != nil {
		t.Errorf("c is still in the file: %v", err)
	}
	// Its streams are gone from the store, and its users from the server.
	// The server renames a deleted stream's directory and removes it
	// afterwards.
	testkit.WaitFor(t, "c's streams to leave the store", func() bool {
		left, _ := os.ReadDir(filepath.Join(store, "jetstream", "JETLOOP_c", "streams"))
		return len(left) == 0
	})
	if nc, err := connectSeed(url, oldAdmin); err == nil {
		nc.Close()
		t.Error("c's admin still gets in")
	}
	if _, err := srv.LookupAccount("JETLOOP_c"); err == nil {
		t.Error("the server still has account JETLOOP_c")
	}
	if _, err := aClient.Request(bus.APIPrefix+".INFO", nil, 5*time.Second); err != nil {
		t.Errorf("a's client after the second reload: %v", err)
	}
}

// TestTenantFlagNamesTheSeed: --tenant takes the seed of the role the
// command needs from the tenants file, and refuses an unknown tenant or
// a second set of credentials.
func TestTenantFlagNamesTheSeed(t *testing.T) {
	path, _, _ := copyTenants(t)
	t.Setenv("NATS_USER", "someone")
	for cmd, role := range map[string]string{"streams": tenants.Admin, "turns": tenants.Viewer, "watch": tenants.Viewer,
		"submit": tenants.Client, "ui": tenants.Client, "abort": tenants.Client} {
		c := &command{name: cmd, tenant: "b", tenantsFile: path}
		a, err := c.authFor()
		if err != nil || a.Creds != tenants.SeedPath(path, "b", role) || a.User != "" {
			t.Errorf("%s --tenant b: creds %q user %q (%v), want %s's seed", cmd, a.Creds, a.User, err, role)
		}
	}
	if _, err := (&command{name: "submit", tenant: "zz", tenantsFile: path}).authFor(); err == nil || !strings.Contains(err.Error(), "no such tenant") {
		t.Errorf("an unknown tenant: %v", err)
	}
	c := &command{name: "submit", tenant: "a", tenantsFile: path}
	c.auth.Creds = "x.nk"
	if _, err := c.authFor(); err == nil {
		t.Error("--tenant with --creds was taken")
	}
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"turns", "--tenant", "zz", "--tenants", path}, &out, &out); code != ExitFailed || !strings.Contains(out.String(), "no such tenant") {
		t.Errorf("turns --tenant zz: exit %d:\n%s", code, out.String())
	}
}

// TestTenantsCommandsTakeTurns: tenants commands run at once edit the file
// one after another (tenants.Lock): eight adds at once leave eight tenants
// in the file and in the accounts rendered from it, none lost to another's
// write of the file it read.
func TestTenantsCommandsTakeTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	const n = 8
	var wg sync.WaitGroup
	outs := make([]lockedBuffer, n)
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			codes[i] = Main(context.Background(), []string{"tenants", "add", fmt.Sprintf("t%d", i), "--offline", "--tenants", path}, &outs[i], &outs[i])
		})
	}
	wg.Wait()
	for i := range n {
		if codes[i] != ExitOK {
			t.Fatalf("add t%d: exit %d\n%s", i, codes[i], outs[i].String())
		}
	}
	f, err := tenants.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := os.ReadFile(tenants.AccountsPath(path))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		if f.Get(name) == nil {
			t.Errorf("tenant %s lost from the file (%v)", name, f.Names())
		}
		if !strings.Contains(string(accounts), "JETLOOP_"+name) {
			t.Errorf("tenant %s lost from the accounts", name)
		}
	}
}

// TestTenantsWaitForTheLock: a tenants command waits while another holds
// the file, says so, and neither reads nor writes it until then.
func TestTenantsWaitForTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	release, err := tenants.Lock(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"tenants", "add", "late", "--offline", "--tenants", path}, &out, &out)
	}()
	testkit.WaitFor(t, "the command to say it waits", func() bool { return strings.Contains(out.String(), "waiting for another jetloop tenants command") })
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file was written while another held it: %v", err)
	}
	release()
	if code := <-done; code != ExitOK {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	if f, err := tenants.Load(path); err != nil || f.Get("late") == nil {
		t.Fatalf("the tenant added after the wait: %v %v", f, err)
	}
}

// TestTenantsFileNamesTheServer: with neither --nats nor NATS_URL, the
// tenants commands and --tenant talk to the server the tenants file names;
// tenants list exits non-zero when the server does not answer.
func TestTenantsFileNamesTheServer(t *testing.T) {
	path, config, _ := copyTenants(t)
	testkit.StartConfigAsWritten(t, config)
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"--tenants", path, "tenants", "list"}, &out, &errOut); code != ExitOK ||
		!strings.Contains(out.String(), "a ") || strings.Contains(out.String(), "?") {
		t.Fatalf("tenants list: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := Main(t.Context(), []string{"tenants", "list", "--tenants", path, "--nats", deadURL(t)}, &out, &errOut); code != ExitFailed ||
		!strings.Contains(errOut.String(), "jetloop tenants: a:") {
		t.Fatalf("tenants list with no server: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// deadURL is a server URL where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("nats://127.0.0.1:%d", testkit.FreePort(t))
}
