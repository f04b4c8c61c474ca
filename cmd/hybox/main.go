// Command hybox is the one user-facing binary of hybox: `hybox serve` runs
// the server; `hybox sandbox|exec|run|files` are its client.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hybox-dev/hybox/cmd/hybox/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	code := cli.Main(ctx, env, os.Args[1:], newServeCmd())
	stop()
	os.Exit(code)
}
