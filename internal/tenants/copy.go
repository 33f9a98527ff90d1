package tenants

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// Copy lays a multi-tenant deployment (deploy/tenants: its configuration,
// tenants file, seeds and rendered accounts) out in dir as deploy holds it,
// beside a copy of the permissions its accounts include, its server
// listening on listen with its store in store. Tests and benchmarks run a
// copy, so that adding a tenant or starting a server leaves the repository
// as it was. It returns the copy's tenants file and configuration.
func Copy(deploy, dir, listen, store string) (tenantsFile, config string, err error) {
	if err := os.CopyFS(filepath.Join(dir, "tenants"), os.DirFS(filepath.Join(deploy, "tenants"))); err != nil {
		return "", "", err
	}
	perms, err := os.ReadFile(filepath.Join(deploy, "permissions.conf"))
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "permissions.conf"), perms, 0o600); err != nil {
		return "", "", err
	}
	config = filepath.Join(dir, "tenants", "nats.conf")
	data, err := os.ReadFile(config)
	if err != nil {
		return "", "", err
	}
	data = regexp.MustCompile(`(?m)^listen:.*$`).ReplaceAll(data, []byte("listen: "+listen))
	data = regexp.MustCompile(`(?m)store_dir:\s*("[^"]*"|\S+)`).ReplaceAll(data, []byte("store_dir: "+strconv.Quote(store)))
	if err := os.WriteFile(config, data, 0o600); err != nil {
		return "", "", err
	}
	// The tenants file names the server it goes with.
	tenantsFile = filepath.Join(dir, "tenants", "tenants.yaml")
	data, err = os.ReadFile(tenantsFile)
	if err != nil {
		return "", "", err
	}
	data = regexp.MustCompile(`(?m)^server:.*$`).ReplaceAll(data, []byte("server: nats://"+listen))
	return tenantsFile, config, os.WriteFile(tenantsFile, data, 0o600)
}
