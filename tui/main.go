// Command byoc is the operator program of byoc: a command line for vendor
// operators and support engineers that talks to imsd's OperatorService.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/byoc-dev/byoc/tui/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
