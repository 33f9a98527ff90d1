package tenants

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const key = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func users() string {
	var b strings.Builder
	b.WriteString("    users:\n")
	for _, r := range Roles {
		b.WriteString("      " + r + ": " + key + "\n")
	}
	return b.String()
}

func TestLoad(t *testing.T) {
	p := write(t, "tenants:\n  - name: acme\n    storage: 1GiB\n    in_flight: 10\n    submit_rate: 2.5\n"+users())
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a := f.Get("acme")
	if a == nil || a.Storage != 1<<30 || a.InFlight != 10 || a.Burst() != 3 || a.SoftLimit() != (1<<30)/100*90 {
		t.Fatalf("got %+v", a)
	}
	if got := SeedPath(p, "acme", Client); got != filepath.Join(filepath.Dir(p), "acme", "client.nk") {
		t.Fatal(got)
	}
	empty, err := Load(write(t, ""))
	if err != nil || len(empty.Tenants) != 0 {
		t.Fatalf("an empty file: %v %v", empty, err)
	}
}

func TestLoadRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"bad name":     "tenants:\n  - name: Acme.x\n" + users(),
		"twice":        "tenants:\n  - name: a\n" + users() + "  - name: a\n" + users(),
		"unknown key":  "tenants:\n  - name: a\n    quota: 3\n" + users(),
		"missing user": "tenants:\n  - name: a\n",
		"bad size":     "tenants:\n  - name: a\n    storage: lots\n" + users(),
		"soft > 100":   "tenants:\n  - name: a\n    soft_storage: 120\n" + users(),
		"forged key":   "tenants:\n  - name: a\n" + strings.Replace(users(), key, "U }\\n  EVIL { users: [{user: x}] }"+strings.Repeat("A", 26), 1),
		"bad tool":     "tenants:\n  - name: a\n    tools: [\"x\\\" }\"]\n" + users(),
		"bad system":   "system: UABC\ntenants: []\n",
	} {
		if _, err := Load(write(t, body)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]Size{"512": 512, "1KiB": 1024, "10GB": 10e9, "1.5 MiB": 3 << 19, "2g": 2 << 30} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("%q: %d %v", in, got, err)
		}
	}
	if Size(3<<30).String() != "3GiB" || Size(1000).String() != "1000" {
		t.Error(Size(3<<30).String(), Size(1000).String())
	}
}
