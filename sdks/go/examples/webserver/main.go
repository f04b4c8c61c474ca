// Command webserver starts a web server in a container sandbox and reaches
// it through the sandbox's endpoint for its port, as a browser or an agent
// outside would. It needs a server with container runtimes (runc); against
// one that runs wasm sandboxes only, it says so and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	client, err := hybox.FromEnv()
	if err != nil {
		return err
	}
	sb, err := client.Create(ctx, api.CreateSandboxRequest{
		Image:      api.ImageSpec{URI: "localhost/hybox/python:3-bookworm"},
		Extensions: api.Extensions{hybox.RuntimeExtension: "runc"},
	})
	if errors.Is(err, hybox.ErrInvalid) || errors.Is(err, hybox.ErrNotSupported) {
		fmt.Println("skipped: this server has no container runtime:", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		return err
	}
	if err := sb.WriteFile(ctx, "/srv/index.html", []byte("<h1>hello from a sandbox</h1>\n"), 0o644); err != nil {
		return err
	}
	if _, err := sb.Start(ctx, hybox.Command{Command: "python3 -m http.server 8000", Cwd: "/srv"}); err != nil {
		return err
	}
	u, headers, err := sb.URL(ctx, 8000)
	if err != nil {
		return err
	}
	// The server takes a moment to listen.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		body, err := get(ctx, u+"/index.html", headers)
		if err == nil {
			fmt.Printf("GET %s/index.html: %s", u, body)
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

func get(ctx context.Context, u string, headers http.Header) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header = headers.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}
