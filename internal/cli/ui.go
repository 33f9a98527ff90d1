package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/ui"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// webUI is `jetloop ui`: it serves the web view until the command is stopped.
func webUI(ctx context.Context, c *command, args []string) int {
	addr := c.flags.String("addr", "127.0.0.1:8080", "address to serve on; anything but loopback lets others read every turn")
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 0 {
		return c.usageErr("usage: jetloop ui [--addr HOST:PORT]")
	}
	u := ui.New()
	c.asyncErr = func(err error) {
		u.AsyncErr(err)
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			fmt.Fprintf(c.stderr, "jetloop ui: %v\n", err)
		}
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	return c.serveUI(ctx, u, nc, js, *addr)
}

// serveUI serves u, on nc, at addr until ctx ends.
func (c *command) serveUI(ctx context.Context, u *ui.Server, nc *nats.Conn, js jetstream.JetStream, addr string) int {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := u.Start(sctx, nc, js)
	cancel()
	if err != nil {
		return c.fail("%v (are the streams provisioned? jetloop streams apply)", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return c.fail("%v", err)
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		fmt.Fprintf(c.stdout, "jetloop ui: http://%s/ (bound to loopback: only this machine can open it)\n", ln.Addr())
	} else {
		fmt.Fprintf(c.stderr, "jetloop ui: warning: bound to %s, not loopback: whoever reaches it reads every turn "+
			"and, with these credentials, steers them; there is no login\n", ln.Addr())
		fmt.Fprintf(c.stdout, "jetloop ui: http://%s/\n", ln.Addr())
	}
	if u.CanControl() {
		fmt.Fprintln(c.stdout, "jetloop ui: its buttons send control messages with this command's NATS credentials")
	} else {
		fmt.Fprintln(c.stdout, "jetloop ui: read only: these NATS credentials may not send control messages")
	}
	if err := u.Serve(ctx, ln); err != nil {
		return c.fail("%v", err)
	}
	return ExitOK
}
