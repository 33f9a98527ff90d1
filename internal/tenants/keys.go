package tenants

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// NewUser makes a user's nkey and writes its seed to seedPath, readable by
// its owner only; it returns the public key, which the server's config
// lists.
func NewUser(seedPath string) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(seedPath), 0o700); err != nil {
		return "", err
	}
	if err := WriteFile(seedPath, append(seed, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("tenants: seed %s: %w", seedPath, err)
	}
	return pub, nil
}

// NewUsers makes the users of tenant t, one per role, with their seeds
// where t.SeedPath says for the tenants file at path.
func NewUsers(path string, t *Tenant) (map[string]string, error) {
	users := map[string]string{}
	for _, r := range Roles {
		pub, err := NewUser(t.SeedPath(path, r))
		if err != nil {
			return nil, err
		}
		users[r] = pub
	}
	return users, nil
}

// PublicKeyOf reads the seed file at path and returns its public key: to
// check that a seed and the file's key are one user's.
func PublicKeyOf(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return "", fmt.Errorf("tenants: %s: not an nkey seed: %w", path, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}
