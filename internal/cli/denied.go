package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/jetloop/jetloop/internal/tenants"
)

// denial is how a command fails fast when the server refuses its user
// something: the first permissions violation on its connection is said
// once, naming the user, what it may not do and the role the command
// needs, and it ends the command's context with errDenied as the cause,
// instead of a request that times out ten seconds later.
type denial struct {
	mu     sync.Mutex
	said   bool
	cancel context.CancelCauseFunc
}

// errDenied is the cause of a command's context that a permissions
// violation ended.
var errDenied = errors.New("permission denied")

// violation reads the server's "Permissions Violation for Publish to
// "subject"" (or Subscription to).
var violation = regexp.MustCompile(`(?i)for (publish|subscription) to "?([^"\s]+)"?`)

// deny reports a permissions violation, once, and stops the command.
func (c *command) deny(err error) {
	c.denied.mu.Lock()
	defer c.denied.mu.Unlock()
	if c.denied.said {
		return
	}
	c.denied.said = true
	what := err.Error()
	if m := violation.FindStringSubmatch(what); m != nil {
		verb := "publish to"
		if m[1][0] == 's' || m[1][0] == 'S' {
			verb = "subscribe to"
		}
		what = fmt.Sprintf("may not %s %s", verb, m[2])
	}
	fmt.Fprintf(c.stderr, "jetloop %s: permission denied: %s %s; %s\n", c.name, c.who(), what, c.needs())
	if c.denied.cancel != nil {
		c.denied.cancel(errDenied)
	}
}

// saidDenial reports whether a denial was reported: what fails after it
// is its consequence, not news.
func (c *command) saidDenial() bool {
	c.denied.mu.Lock()
	defer c.denied.mu.Unlock()
	return c.denied.said
}

// who names the user the command connected as.
func (c *command) who() string {
	switch {
	case c.tenant != "":
		return fmt.Sprintf("tenant %s's %s user", c.tenant, tenantRole(c.name))
	case c.auth.User != "":
		return fmt.Sprintf("user %q", c.auth.User)
	case c.auth.Creds != "":
		return "the user of " + c.auth.Creds
	}
	return "this connection's user"
}

// needs says which of the shipped roles (deploy/permissions.conf) the
// command runs as.
func (c *command) needs() string {
	role := tenantRole(c.name)
	switch {
	case role == tenants.Admin:
		return fmt.Sprintf("jetloop %s needs the admin role (--user admin; docs/accounts.md)", c.name)
	case role == tenants.Viewer:
		return fmt.Sprintf("jetloop %s needs the viewer or client role (docs/accounts.md)", c.name)
	}
	return fmt.Sprintf("jetloop %s needs the client role (--user client; the viewer only reads; docs/accounts.md)", c.name)
}

// explain says what a request nobody answers means for the command's
// user: an account that does not import that part of the JetStream API
// gets no answer rather than a refusal.
func (c *command) explain(err error) string {
	return fmt.Sprintf("%v: either JetStream is off on the server, or %s cannot reach this part of its API; %s",
		err, c.who(), c.needs())
}
