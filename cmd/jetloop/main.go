// Command jetloop runs the demo and dev stacks and the client commands that
// submit, watch and steer turns. See internal/cli.
package main

import (
	"context"
	"os"
	"syscall"

	"github.com/jetloop/jetloop/internal/cli"
)

func main() {
	// cli.SignalContext, not signal.NotifyContext: a command that follows a
	// turn exits 130 after SIGINT and 0 after SIGTERM, so it must know which.
	ctx, stop := cli.SignalContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
