// Command quickstart creates a sandbox, runs a shell command and some
// Python in it, and removes it.
package main

import (
	"context"
	"fmt"
	"log"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// The server and the API key come from HYBOX_DOMAIN and HYBOX_API_KEY
	// (or OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY).
	client, err := hybox.FromEnv()
	if err != nil {
		return err
	}
	sb, err := client.Create(ctx, api.CreateSandboxRequest{Image: api.ImageSpec{URI: "wasm://default"}})
	if err != nil {
		return err
	}
	defer sb.Kill(context.WithoutCancel(ctx))

	// A command: its output streams line by line; its exit code is data.
	x, err := sb.Exec(ctx, hybox.Command{Command: "echo hello; echo from a sandbox; exit 3"}, &hybox.Handlers{
		OnStdout: func(line string) { fmt.Println("stdout:", line) },
	})
	if err != nil {
		return err
	}
	fmt.Println("exit code:", x.ExitCode)

	// Code: the value of the last expression comes back as a result.
	code := hybox.CodeOf("python", "squares = [n * n for n in range(5)]\nsum(squares)")
	x, err = sb.RunCode(ctx, code, nil)
	if err != nil {
		return err
	}
	fmt.Println("result:", x.Results[0]["text"])
	return nil
}
