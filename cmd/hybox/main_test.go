package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/cmd/hybox/internal/cli"
	"github.com/hybox-dev/hybox/server/servertest"
)

// runCLI runs the binary's full command tree (client commands and serve)
// in-process.
func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(context.Background(), cli.Env{
		Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
	}, args, newServeCmd())
	return out.String(), errb.String(), code
}

func TestCommandTree(t *testing.T) {
	srv := servertest.New(t)
	env := map[string]string{cli.EnvDomain: srv.URL, cli.EnvAPIKey: srv.APIKey}
	tests := []struct {
		name     string
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{name: "help lists every command", args: []string{"--help"}, inStdout: "serve"},
		{name: "serve help", args: []string{"serve", "--help"}, inStdout: "--api-key"},
		{name: "unknown command", args: []string{"nope"}, code: cli.ExitUsage, inStderr: `unknown command "nope"`},
		{name: "client command", args: []string{"sandbox", "create"}, inStdout: "-"},
		{name: "api error", args: []string{"sandbox", "get", "missing"}, code: cli.ExitError, inStderr: "error: SANDBOX_NOT_FOUND: "},
		{name: "pools listed", args: []string{"pool", "ls"}, inStdout: "NAME"},
		{name: "pool of a wasm image", args: []string{"pool", "create", "p", "--image", "wasm://default"}, code: cli.ExitError, inStderr: "keeps no warm pools"},
		{name: "pool not found", args: []string{"pool", "rm", "none"}, code: cli.ExitError, inStderr: "error: NOT_FOUND: "},
		{name: "volume made", args: []string{"volume", "create", "data"}, inStdout: "data"},
		{name: "volume listed", args: []string{"volume", "ls"}, inStdout: "data"},
		{name: "volume removed", args: []string{"volume", "rm", "data"}},
		{name: "volume not found", args: []string{"volume", "rm", "data"}, code: cli.ExitError, inStderr: "error: NOT_FOUND: "},
		{name: "pool needs an image", args: []string{"pool", "create", "p"}, code: cli.ExitUsage, inStderr: "image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, env, tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.inStdout) || !strings.Contains(stderr, tt.inStderr) {
				t.Errorf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
		})
	}
}
