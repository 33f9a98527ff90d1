package inproc

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
)

// CopyTenants copies a multi-tenant deployment (tenants.Copy) into a
// directory of the test's, with a free port and a store of its own, so that
// a test may add and remove tenants (and reload a server started by
// testkit.StartConfigAsWritten) without touching the repository. It returns
// the copy's tenants file and configuration. It is here, not in testkit,
// because the tenants package's own tests use testkit.
func CopyTenants(t testing.TB, deploy string) (tenantsFile, config string) {
	t.Helper()
	dir := t.TempDir()
	tenantsFile, config, err := tenants.Copy(deploy, dir, fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)), filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	return tenantsFile, config
}
