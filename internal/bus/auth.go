package bus

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Inbox prefixes of jetloop's processes. The shipped nats.conf lets each
// role subscribe to its own prefix only: a user allowed _INBOX.> would read
// the replies to every other user's requests, the jobs pulled by the
// orchestrator among them. A program in another language that connects as
// one of these roles sets the same prefix.
const (
	InboxOrchestrator = "_INBOX_orchestrator"
	InboxToolworker   = "_INBOX_toolworker"
	// InboxCLI is shared by the client and viewer roles (and admin): what
	// the CLI is answered is what both may read anyway.
	InboxCLI = "_INBOX_cli"
)

// Auth is how a process proves who it is: the --creds, --user, --password,
// --password-file and --tls-ca flags that every process and the CLI take,
// with NATS_USER, NATS_PASSWORD and NATS_CA as their defaults. Of the three
// ways to give a password only --password shows in a process listing; it is
// kept for scripts that already use it.
type Auth struct {
	Creds, User, Password, PasswordFile, CA string
	// Inbox is the prefix of the connection's reply subjects.
	Inbox string
	// APIPrefix is the JetStream API prefix: "" (or "auto") finds it,
	// see DetectAPIPrefix.
	APIPrefix string
}

// Flags registers the authentication flags on fs.
func (a *Auth) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.Creds, "creds", "", "NATS credentials file: a user JWT and seed (nsc), or an nkey seed")
	fs.StringVar(&a.User, "user", os.Getenv("NATS_USER"), "NATS user (default $NATS_USER)")
	fs.StringVar(&a.Password, "password", "", "NATS password; visible to other users of the machine: prefer --password-file or NATS_PASSWORD")
	fs.StringVar(&a.PasswordFile, "password-file", "", "file whose first line is the NATS password (default $NATS_PASSWORD)")
	fs.StringVar(&a.APIPrefix, "js-prefix", os.Getenv("NATS_JS_PREFIX"), "JetStream API prefix (default $NATS_JS_PREFIX, else "+APIPrefix+" where the account imports it, else "+DefaultAPIPrefix+")")
	fs.StringVar(&a.CA, "tls-ca", os.Getenv("NATS_CA"), "PEM file of the CA that signed the server's TLS certificate (default $NATS_CA)")
}

// Options are the connection options a turns into.
func (a Auth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.Inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(a.Inbox))
	}
	if a.CA != "" {
		opts = append(opts, nats.RootCAs(a.CA))
	}
	if a.Creds != "" {
		opt, err := credsOption(a.Creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	password, err := a.password()
	if err != nil {
		return nil, err
	}
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, password))
	} else if password != "" && (a.Password != "" || a.PasswordFile != "") {
		return nil, errors.New("bus: a password needs a user (--user or NATS_USER)")
	}
	return opts, nil
}

// password is the first of --password, --password-file and NATS_PASSWORD
// that is set.
func (a Auth) password() (string, error) {
	switch {
	case a.Password != "":
		return a.Password, nil
	case a.PasswordFile != "":
		data, err := os.ReadFile(a.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("bus: password file: %w", err)
		}
		line, _, _ := strings.Cut(string(data), "\n")
		if line = strings.TrimRight(line, "\r"); line == "" {
			return "", fmt.Errorf("bus: password file %s: the first line is empty", a.PasswordFile)
		}
		return line, nil
	}
	return os.Getenv("NATS_PASSWORD"), nil
}

// credsOption reads a credentials file as nsc writes one (a JWT and its
// seed), or as a bare nkey seed for a server that lists its users' nkeys in
// its own configuration.
func credsOption(path string) (nats.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bus: credentials: %w", err)
	}
	if bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		return nats.UserCredentials(path), nil
	}
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("bus: credentials %s: neither a user JWT nor an nkey seed: %w", path, err)
	}
	return opt, nil
}
