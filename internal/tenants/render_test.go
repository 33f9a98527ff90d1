package tenants

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/nats-io/nats-server/v2/conf"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of deploy/accounts.conf and deploy/permissions.conf")

// repo is the repository's root.
func repo(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// exportLines are the entries of an exports list as the server's parser
// reads them, one string each.
func exportLines(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, e := range v.([]any) {
		m := e.(map[string]any)
		kind := "service"
		if _, ok := m["stream"]; ok {
			kind = "stream"
		}
		var accs []string
		for _, a := range m["accounts"].([]any) {
			accs = append(accs, a.(string))
		}
		slices.Sort(accs)
		out = append(out, fmt.Sprintf("%s %v response_type=%v accounts=%v", kind, m[kind], m["response_type"], accs))
	}
	return out
}

// importLines are the entries of an imports list, each with the account
// it imports from.
func importLines(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, e := range v.([]any) {
		m := e.(map[string]any)
		kind := "service"
		if _, ok := m["stream"]; ok {
			kind = "stream"
		}
		src := m[kind].(map[string]any)
		out = append(out, fmt.Sprintf("%s %v from %v to %v", kind, src["subject"], src["account"], m["to"]))
	}
	return out
}

// parseList parses one rendered list as the server's parser does.
func parseList(t *testing.T, lines []string) any {
	t.Helper()
	m, err := conf.Parse("x = [\n" + strings.Join(lines, "\n") + "\n]\n")
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	return m["x"]
}

func renderedImports(is []Import, from string) []string {
	var ls []string
	for _, i := range is {
		ls = append(ls, i.Line(from))
	}
	return ls
}

// TestSingleTenantConfigIsTheRendering holds deploy/accounts.conf, written
// by hand for the single-tenant layout, to the lists the multi-tenant
// renderer writes: every export with its audience, every account's imports
// in order. A change to either fails here until both say the same.
func TestSingleTenantConfigIsTheRendering(t *testing.T) {
	shipped, err := conf.ParseFile(filepath.Join(repo(t), "deploy", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var exports []string
	answers := append(AnswerExports("WORKER_default", BuiltinTools, nil), AnswerExports("WORKER_examples", ExampleTools, ExampleHooks)...)
	for _, e := range append(Exports(), answers...) {
		exports = append(exports, e.Line(SingleAccounts))
	}
	for _, c := range []struct {
		name string
		got  []string
		want []string
	}{
		{"JETLOOP_EXPORTS", exportLines(t, shipped["JETLOOP_EXPORTS"]), exportLines(t, parseList(t, exports))},
		{"CLIENT_IMPORTS", importLines(t, shipped["CLIENT_IMPORTS"]), importLines(t, parseList(t, renderedImports(ClientImports(), "JETLOOP")))},
		{"VIEWER_IMPORTS", importLines(t, shipped["VIEWER_IMPORTS"]), importLines(t, parseList(t, renderedImports(ViewerImports(), "JETLOOP")))},
		{"WORKER_DEFAULT_IMPORTS", importLines(t, shipped["WORKER_DEFAULT_IMPORTS"]),
			importLines(t, parseList(t, renderedImports(WorkerImports(BuiltinTools, nil), "JETLOOP")))},
		{"WORKER_EXAMPLES_IMPORTS", importLines(t, shipped["WORKER_EXAMPLES_IMPORTS"]),
			importLines(t, parseList(t, renderedImports(WorkerImports(ExampleTools, ExampleHooks), "JETLOOP")))},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("deploy/accounts.conf's %s differs from the rendering:\n%s", c.name, diff(c.got, c.want))
		}
	}
}

// diff lists the lines only one side has, and then both in full when they
// differ only in order.
func diff(got, want []string) string {
	var b strings.Builder
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "  only in the file:      %s\n", g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "  only in the rendering: %s\n", w)
		}
	}
	if b.Len() == 0 {
		b.WriteString("  the same lines in another order\n")
	}
	return b.String()
}

// TestShippedTenantsAreRendered holds deploy/tenants/accounts.conf to a
// fresh rendering of deploy/tenants/tenants.yaml, and each shipped seed to
// its public key in the file.
func TestShippedTenantsAreRendered(t *testing.T) {
	path := filepath.Join(repo(t), "deploy", "tenants", "tenants.yaml")
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("shipped tenants: %v, want a and b", got)
	}
	shipped, err := os.ReadFile(AccountsPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shipped, Render(f)) {
		t.Errorf("deploy/tenants/accounts.conf is not the rendering of tenants.yaml: run jetloop tenants render --tenants %s", path)
	}
	check := func(seed, want string) {
		got, err := PublicKeyOf(seed)
		if err != nil || got != want {
			t.Errorf("%s: public key %s (%v), the file says %s", seed, got, err, want)
		}
	}
	check(SystemSeedPath(path), f.System)
	for _, tn := range f.Tenants {
		for _, r := range Roles {
			check(SeedPath(path, tn.Name, r), tn.Users[r])
		}
	}
}

// TestBuiltinToolsAreTheWorkers: the tools every tenant's worker account
// imports are cmd/toolworker's.
func TestBuiltinToolsAreTheWorkers(t *testing.T) {
	ts, err := tools.Builtins(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range ts {
		names = append(names, x.Spec().Name)
	}
	if !slices.Equal(names, BuiltinTools) {
		t.Errorf("tools.Builtins serves %v, the tenants' worker accounts import %v", names, BuiltinTools)
	}
}

// TestRenderIsolatesTenants: a tenant's exports name only its own
// accounts, and its users only its own keys.
func TestRenderIsolatesTenants(t *testing.T) {
	f := &File{Tenants: []Tenant{{Name: "a", Storage: 1 << 30, Users: keys("A")}, {Name: "b", Users: keys("B"), Tools: []string{"invoice_total"}}}}
	// The rendering includes ../permissions.conf: lay it out as deploy/ is.
	dir := t.TempDir()
	perms, err := os.ReadFile(filepath.Join(repo(t), "deploy", "permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "permissions.conf"), perms, 0o644); err != nil {
		t.Fatal(err)
	}
	rendered := filepath.Join(dir, "tenants", "accounts.conf")
	if err := os.MkdirAll(filepath.Dir(rendered), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rendered, Render(f), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := conf.ParseFile(rendered)
	if err != nil {
		t.Fatal(err)
	}
	accs := m["accounts"].(map[string]any)
	for _, name := range []string{"a", "b"} {
		jl := accs["JETLOOP_"+name].(map[string]any)
		for _, e := range jl["exports"].([]any) {
			for _, a := range e.(map[string]any)["accounts"].([]any) {
				if !strings.HasSuffix(a.(string), "_"+name) {
					t.Errorf("JETLOOP_%s offers %v to %s", name, e, a)
				}
			}
		}
		for _, kind := range []string{"CLIENT", "VIEWER", "WORKER"} {
			for _, i := range accs[kind+"_"+name].(map[string]any)["imports"].([]any) {
				for _, v := range i.(map[string]any) {
					if src, ok := v.(map[string]any); ok && src["account"] != "JETLOOP_"+name {
						t.Errorf("%s_%s imports from %v", kind, name, src["account"])
					}
				}
			}
		}
	}
	if js := accs["JETLOOP_a"].(map[string]any)["jetstream"].(map[string]any); js["max_file"] != int64(1<<30) {
		t.Errorf("JETLOOP_a's jetstream: %v", js)
	}
	if n := strings.Count(string(Render(f)), `subject: "$JS.API.CONSUMER.MSG.NEXT.JETLOOP_JOBS.tool_invoice_total"`); n != 1 {
		t.Error("b's worker account does not import its extra tool once")
	}
	// No untrusted account may create a consumer (docs/accounts.md).
	if strings.Contains(string(Render(f)), "CONSUMER.CREATE") {
		t.Error("the rendering imports or exports CONSUMER.CREATE")
	}
	for _, kind := range []string{"CLIENT", "VIEWER", "WORKER"} {
		if accs[kind+"_a"].(map[string]any)["limits"] == nil {
			t.Errorf("%s_a has no limits", kind)
		}
	}
}

// keys are distinct fake public keys for a tenant's roles.
func keys(tag string) map[string]string {
	m := map[string]string{}
	for i, r := range Roles {
		m[r] = fmt.Sprintf("U%s%d%s", tag, i, strings.Repeat("X", 53))
	}
	return m
}

// The grants on the logs' streams in the hand-written single-tenant files
// are written by code, between the lines "# BEGIN events streams" and
// "# END events streams": seventeen streams' worth of lines are too many to
// keep right by hand.
const (
	beginEvents = "# BEGIN events streams"
	endEvents   = "# END events streams"
)

// eventsBlocks writes the blocks of the file at path anew, block i's lines
// from lines(i), indented as its BEGIN line, and keeps the comment lines
// that follow BEGIN.
func eventsBlocks(t *testing.T, text string, lines func(i int) []string) string {
	t.Helper()
	var out []string
	in, i := false, 0
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, beginEvents):
			in = true
			out = append(out, l)
			continue
		case trimmed == endEvents:
			indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
			for _, g := range lines(i) {
				out = append(out, indent+g)
			}
			out = append(out, l)
			in, i = false, i+1
			continue
		case in && strings.HasPrefix(trimmed, "#"):
			out = append(out, l) // the block's header
			continue
		case in:
			continue // a generated line, written again at END
		}
		out = append(out, l)
	}
	if in || i == 0 {
		t.Fatalf("%d blocks, the last one open: %v", i, in)
	}
	return strings.Join(out, "\n")
}

// TestShippedEventsGrants holds the generated blocks of deploy/accounts.conf
// (the readers' exports and imports of every stream of the logs) and of
// deploy/permissions.conf (the orchestrator's) to their rendering, and
// rewrites them with -update. The orchestrator's permissions name the logs'
// streams nowhere else.
func TestShippedEventsGrants(t *testing.T) {
	files := map[string]func(i int) []string{
		"accounts.conf": func(i int) []string {
			var ls []string
			if i == 0 {
				for _, e := range EventsExports() {
					ls = append(ls, strings.Replace(e.Line(SingleAccounts), "[CLIENT, VIEWER]", "$READER_ACCOUNTS", 1))
				}
				return ls
			}
			return renderedImports(EventsImports(), "JETLOOP")
		},
		"permissions.conf": func(int) []string {
			var ls []string
			// One line per stream, its reads and its purge.
			all := OrchestratorEvents()
			for k := 0; k < len(all); k += 4 {
				ls = append(ls, fmt.Sprintf("%q, %q, %q, %q,", all[k], all[k+1], all[k+2], all[k+3]))
			}
			return ls
		},
	}
	for name, lines := range files {
		path := filepath.Join(repo(t), "deploy", name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := eventsBlocks(t, string(data), lines)
		if want == string(data) {
			continue
		}
		if !*update {
			t.Errorf("deploy/%s's generated blocks are not the rendering: run go test ./internal/tenants -run TestShippedEventsGrants -update", name)
			continue
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	shipped, err := conf.ParseFile(filepath.Join(repo(t), "deploy", "permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range shipped["ORCHESTRATOR_PERMISSIONS"].(map[string]any)["publish"].(map[string]any)["allow"].([]any) {
		if strings.Contains(s.(string), events.StreamEvents) {
			got = append(got, s.(string))
		}
	}
	if want := OrchestratorEvents(); !slices.Equal(got, want) {
		t.Errorf("the orchestrator's grants on the logs' streams differ from OrchestratorEvents:\n%s", diff(got, want))
	}
}
