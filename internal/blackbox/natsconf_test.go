package blackbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// TestLeastPrivilegeUsers runs a turn on a server with the repository's
// nats.conf, provisioned by admin, each process as its own user: the
// orchestrator, the tool worker and the jetloop client must each need
// nothing their user may not do, and the viewer can read what it is shown.
// A denied publish or subscribe is a "Permissions Violation" in a process's
// output, and usually a turn that never finishes.
func TestLeastPrivilegeUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	url := srv.ClientURL()
	// Passwords go by file, never on the command line.
	as := func(role string) []string {
		return []string{"--nats", url, "--user", role, "--password-file", filepath.Join(root, "deploy", "dev", role+".password")}
	}
	stack := &roleStack{t: t, root: root, as: as}
	stack.run()
}

// roleStack runs a whole turn with every process as its own role, on a
// server whose users and transport as says how to reach.
type roleStack struct {
	t    *testing.T
	root string
	// as is the connection flags of a role.
	as func(role string) []string
	// env is added to the environment of every CLI command.
	env []string
	// outputs keeps every process's and command's output, none of which may
	// report a permissions violation.
	outputs []string
}

func (s *roleStack) cli(args ...string) (string, int) {
	s.t.Helper()
	out, code := runEnv(s.t, s.root, s.env, args...)
	s.outputs = append(s.outputs, "jetloop "+strings.Join(args, " ")+":\n"+out)
	return out, code
}

// as runs a jetloop command as role: flags before arguments.
func (s *roleStack) cliAs(role string, cmd []string) (string, int) {
	s.t.Helper()
	return s.cli(append(append([]string{cmd[0]}, s.as(role)...), cmd[1:]...)...)
}

func (s *roleStack) run() {
	t := s.t
	if out, code := s.cliAs("admin", []string{"streams", "apply"}); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}

	orchArgs := append(s.as("orchestrator"), "--agents", "data/AGENTS.md")
	if hasFlag(t, "orchestrator", "allow-scripts") {
		orchArgs = append(orchArgs, "--allow-scripts")
	}
	worker := start(t, s.root, "toolworker", append(s.as("toolworker"), "--root", s.root)...)
	orch := start(t, s.root, "orchestrator", orchArgs...)
	testkit.WaitFor(t, "the tool worker to serve", func() bool { return strings.Contains(worker.out.String(), "serving") })
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })

	// The test reads the streams back as admin.
	_, js := s.connect("admin")
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	for _, tool := range []string{"read_file", "list_dir", "grep", "echo"} {
		testkit.WaitTool(t, js, tool)
	}

	out, code := s.cliAs("client", []string{"submit", "--watch", "--turn", "acl-turn", "--agent", "General",
		"--model", "script:scripts/demo.yaml", "What is this project?"})
	if code != 0 {
		t.Fatalf("submit --watch as the client user exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "turn.finished") || !strings.Contains(out, "completed") {
		t.Fatalf("the turn did not complete:\n%s", out)
	}
	// A workflow as the client: the orchestrator submits its tasks' turns
	// and keeps its checkpoints with its own credentials.
	wf := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(wf, []byte(`workflow_id: acl-flow
agent: General
tasks:
  - {input: one, model: script, script: {responses: [{text: first}]}}
  - {input: two, model: script, script: {responses: [{text: second}]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := s.cliAs("client", []string{"workflow", "run", "--watch", wf}); code != 0 || !strings.Contains(out, "completed after 2 tasks") {
		t.Fatalf("workflow run --watch as the client user exited %d:\n%s", code, out)
	}
	for _, role := range []string{"client", "viewer"} {
		for _, cmd := range [][]string{{"turns"}, {"show", "acl-turn"}, {"replay", "--verify", "acl-turn"},
			{"export", "acl-turn"}, {"watch", "acl-turn"}, {"dead"},
			{"workflows"}, {"workflow", "show", "acl-flow"}, {"replay", "--verify", "acl-flow"}} {
			if out, code := s.cliAs(role, cmd); code != 0 {
				t.Fatalf("jetloop %s as the %s user exited %d:\n%s", strings.Join(cmd, " "), role, code, out)
			}
		}
	}

	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	if code := worker.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
	s.outputs = append(s.outputs, "orchestrator:\n"+orch.out.String(), "toolworker:\n"+worker.out.String())
	for _, out := range s.outputs {
		if strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Errorf("denied something:\n%s", out)
		}
	}
}

// connect opens a connection as role with the same flags the processes
// were given, as the CLI would read them.
func (s *roleStack) connect(role string) (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	args := s.as(role)
	var url string
	var opts []nats.Option
	var user, password string
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--nats":
			url = args[i+1]
		case "--user":
			user = args[i+1]
		case "--password-file":
			data, err := os.ReadFile(args[i+1])
			if err != nil {
				s.t.Fatal(err)
			}
			password = strings.TrimSpace(string(data))
		case "--creds":
			opt, err := nats.NkeyOptionFromSeed(args[i+1])
			if err != nil {
				s.t.Fatal(err)
			}
			opts = append(opts, opt)
		case "--tls-ca":
			opts = append(opts, nats.RootCAs(args[i+1]))
		}
	}
	if user != "" {
		opts = append(opts, nats.UserInfo(user, password))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	return nc, js
}

// runEnv runs jetloop with env added to the environment.
func runEnv(t *testing.T, dir string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "jetloop"), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatal(err)
	}
	return string(out), 0
}

// hasFlag reports whether a binary takes --flag, for flags that other work
// is adding.
func hasFlag(t *testing.T, name, flag string) bool {
	t.Helper()
	out, _ := exec.Command(filepath.Join(binaries(t), name), "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+flag)
}

// TestPasswordFromEnvironment: NATS_USER and NATS_PASSWORD authenticate the
// CLI, so no password needs to be in a process listing; a wrong one is
// refused.
func TestPasswordFromEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	secret, err := os.ReadFile(filepath.Join(root, "deploy", "dev", "viewer.password"))
	if err != nil {
		t.Fatal(err)
	}
	if out, code := runEnv(t, root, nil, "streams", "--nats", srv.ClientURL(), "--user", "admin",
		"--password-file", filepath.Join(root, "deploy", "dev", "admin.password"), "apply"); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	env := []string{"NATS_URL=" + srv.ClientURL(), "NATS_USER=viewer"}
	if out, code := runEnv(t, root, append(env, "NATS_PASSWORD="+strings.TrimSpace(string(secret))), "dead"); code != 0 {
		t.Fatalf("jetloop dead with NATS_USER/NATS_PASSWORD exited %d:\n%s", code, out)
	}
	out, code := runEnv(t, root, append(env, "NATS_PASSWORD=viewer"), "dead")
	if code == 0 || !strings.Contains(strings.ToLower(out), "authorization") {
		t.Fatalf("a wrong password was not refused (exit %d):\n%s", code, out)
	}
}

// TestProductionConfig starts the server from deploy/production/nats.conf
// with nkeys and a TLS certificate made for the test (nothing secret is
// committed), provisions it as admin and runs a turn with every process
// as its role over TLS.
func TestProductionConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	seeds := map[string]string{}
	for _, role := range []string{"admin", "orchestrator", "toolworker", "client", "viewer"} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		seeds[role] = filepath.Join(dir, role+".nk")
		if err := os.WriteFile(seeds[role], seed, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("JETLOOP_"+strings.ToUpper(role)+"_NKEY", pub)
	}
	ca, cert, key := makeTLS(t, dir)
	t.Setenv("JETLOOP_TLS_CERT", cert)
	t.Setenv("JETLOOP_TLS_KEY", key)
	t.Setenv("JETLOOP_STORE_DIR", filepath.Join(dir, "store"))
	srv := testkit.StartConfig(t, filepath.Join(root, "deploy", "production", "nats.conf"))
	url := srv.ClientURL()

	// Neither an unverified server nor a connection without a key.
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("connected without trusting the server's CA")
	}
	if nc, err := nats.Connect(url, nats.RootCAs(ca)); err == nil {
		nc.Close()
		t.Fatal("connected without an nkey")
	}
	stack := &roleStack{t: t, root: root, as: func(role string) []string {
		return []string{"--nats", url, "--creds", seeds[role], "--tls-ca", ca}
	}}
	stack.run()
}

// makeTLS writes a CA and a server certificate for 127.0.0.1 signed by it,
// and returns the paths of the CA, the certificate and its key.
func makeTLS(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jetloop test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
