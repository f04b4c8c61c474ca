package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/client"
	"github.com/hybox-dev/hybox/client/clienttest"
)

type result struct {
	stdout, stderr string
	code           int
}

// hybox runs the CLI in-process against srv, configured through the
// environment variables, and returns what it printed.
func hybox(t *testing.T, srv *clienttest.Server, stdin string, args ...string) result {
	t.Helper()
	return hyboxCtx(context.Background(), t, srv, stdin, args...)
}

func hyboxCtx(ctx context.Context, t *testing.T, srv *clienttest.Server, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{EnvDomain: srv.URL, EnvAPIKey: srv.APIKey}
	code := Main(ctx, Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
	}, args)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

func (r result) check(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

func running(srv *clienttest.Server) string {
	return srv.AddSandbox(client.Sandbox{Status: client.Status{State: client.StateRunning}, Image: &client.Image{URI: "wasm://default"}})
}

func TestUsageErrors(t *testing.T) {
	srv := clienttest.NewServer(t)
	id := running(srv)
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{name: "unknown command", args: []string{"bogus"}, want: "unknown command"},
		{name: "unknown subcommand", args: []string{"sandbox", "bogus"}, want: "unknown command"},
		{name: "unknown flag", args: []string{"sandbox", "list", "--nope"}, want: "unknown flag"},
		{name: "bad flag value", args: []string{"sandbox", "list", "--page", "x"}, want: "invalid argument"},
		{name: "bad output", args: []string{"sandbox", "list", "-o", "yaml"}, want: "unknown output format"},
		{name: "get without id", args: []string{"sandbox", "get"}, want: "accepts 1 arg"},
		{name: "bad runtime", args: []string{"sandbox", "create", "--runtime", "docker"}, want: "want one of wasm, runc, runsc"},
		{name: "short timeout", args: []string{"sandbox", "create", "--timeout", "5"}, want: "at least 60 seconds"},
		{name: "bad timeout", args: []string{"sandbox", "create", "--timeout", "soon"}, want: "neither seconds nor a duration"},
		{name: "bad env", args: []string{"sandbox", "create", "--env", "NOEQUALS"}, want: "want KEY=VALUE"},
		{name: "renew without time", args: []string{"sandbox", "renew", id}, want: "give --timeout or --expires-at"},
		{name: "renew with both", args: []string{"sandbox", "renew", id, "--timeout", "60", "--expires-at", "2030-01-01T00:00:00Z"}, want: "not both"},
		{name: "renew bad time", args: []string{"sandbox", "renew", id, "--expires-at", "tomorrow"}, want: "RFC 3339"},
		{name: "exec without command", args: []string{"exec", id}, want: "requires at least 2 arg"},
		{name: "exec only dashes", args: []string{"exec", id, "--"}, want: "no command given"},
		{name: "run bad language", args: []string{"run", "-l", "cobol", "1"}, want: "want one of python, javascript"},
		{name: "run without code", args: []string{"run"}, want: "no code"},
		{name: "run code twice", args: []string{"run", "-f", "x.py", "1"}, want: "not both"},
		{name: "run missing file", args: []string{"run", "-f", "/nonexistent/x.py"}, want: "no such file"},
		{name: "context without sandbox", args: []string{"run", "--context", "c", "1"}, want: "--context needs --sandbox"},
		{name: "bad domain", args: []string{"--domain", "ftp://x", "sandbox", "list"}, want: "scheme must be http or https"},
		{name: "files put bad mode", args: []string{"files", "put", id, "-", "/x", "--mode", "9"}, want: "octal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hybox(t, srv, "", tt.args...)
			r.check(t, ExitUsage)
			if !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "--help") {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	srv := clienttest.NewServer(t)
	r := hybox(t, srv, "", "--help")
	r.check(t, 0)
	for _, c := range []string{"sandbox", "exec", "run", "files", "OPEN_SANDBOX_DOMAIN"} {
		if !strings.Contains(r.stdout, c) {
			t.Errorf("help lacks %q:\n%s", c, r.stdout)
		}
	}
}

func TestAPIErrorOutput(t *testing.T) {
	srv := clienttest.NewServer(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "not found", args: []string{"sandbox", "get", "nope"}, want: "error: SANDBOX_NOT_FOUND: sandbox nope not found\n"},
		{name: "wrong key flag beats env", args: []string{"--api-key", "wrong", "sandbox", "list"}, want: "error: INVALID_API_KEY: invalid API key\n"},
		{name: "server refuses", args: []string{"sandbox", "create", "--image", "bad"}, want: "error: INVALID_IMAGE: image bad cannot be pulled\n"},
		{name: "renew into the past", args: []string{"sandbox", "renew", "nope", "--expires-at", "2001-01-01T00:00:00Z"}, want: "error: INVALID_EXPIRATION: expiresAt must be in the future\n"},
		{name: "exec in unknown sandbox", args: []string{"exec", "nope", "--", "ls"}, want: "error: SANDBOX_NOT_FOUND: sandbox nope not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hybox(t, srv, "", tt.args...)
			r.check(t, ExitError)
			if r.stderr != tt.want || r.stdout != "" {
				t.Errorf("stderr = %q, want %q (stdout %q)", r.stderr, tt.want, r.stdout)
			}
		})
	}
}

func TestSandboxCreate(t *testing.T) {
	srv := clienttest.NewServer(t)
	r := hybox(t, srv, "", "sandbox", "create", "--timeout", "10m", "--env", "A=1", "--env", "B=x=y",
		"--metadata", "team=ml", "--runtime", "runsc", "--memory", "512Mi", "--cpu", "1")
	r.check(t, 0)
	creates := srv.Creates()
	if len(creates) != 1 {
		t.Fatalf("creates = %d", len(creates))
	}
	c := creates[0]
	if !strings.HasSuffix(r.stdout, "\n") || !exists(t, srv, strings.TrimSpace(r.stdout)) {
		t.Errorf("stdout = %q", r.stdout)
	}
	if c.Image.URI != "wasm://default" || *c.Timeout != 600 || c.Env["B"] != "x=y" || c.Metadata["team"] != "ml" ||
		c.Extensions[client.RuntimeExtension] != "runsc" || c.ResourceLimits["memory"] != "512Mi" || c.ResourceLimits["cpu"] != "1" {
		t.Errorf("create request = %+v", c)
	}

	// No expiry, --wait, JSON output.
	srv.SetPendingPolls(2)
	r = hybox(t, srv, "", "sandbox", "create", "--timeout", "0", "--wait", "-o", "json")
	r.check(t, 0)
	var sb map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil {
		t.Fatalf("json output %q: %v", r.stdout, err)
	}
	if sb["status"].(map[string]any)["state"] != "Running" || sb["expiresAt"] != nil {
		t.Errorf("waited sandbox = %v", sb)
	}
	if c := srv.Creates()[1]; c.Timeout != nil {
		t.Errorf("timeout 0 sent %v, want null", *c.Timeout)
	}
}

// exists reports whether the server knows sandbox id.
func exists(t *testing.T, srv *clienttest.Server, id string) bool {
	t.Helper()
	c, err := client.New(client.Options{Domain: srv.URL, APIKey: srv.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSandbox(context.Background(), id)
	return err == nil
}

func TestSandboxListGet(t *testing.T) {
	srv := clienttest.NewServer(t)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	exp := t0.Add(10 * time.Minute)
	a := srv.AddSandbox(client.Sandbox{ID: "aaaa", Status: client.Status{State: client.StateRunning}, Image: &client.Image{URI: "wasm://default"},
		CreatedAt: t0, ExpiresAt: &exp, Metadata: map[string]string{"team": "ml", "env": "dev"}, Entrypoint: []string{"tail", "-f", "/dev/null"},
		Extensions: map[string]string{client.RuntimeExtension: "wasm"}})
	srv.AddSandbox(client.Sandbox{ID: "bbbb", Status: client.Status{State: client.StatePaused}, Image: &client.Image{URI: "python:3.12"}, CreatedAt: t0.Add(time.Second)})

	r := hybox(t, srv, "", "sandbox", "list")
	r.check(t, 0)
	want := "ID    STATE    IMAGE           RUNTIME  CREATED               EXPIRES\n" +
		"aaaa  Running  wasm://default  wasm     2030-01-02T03:04:05Z  2030-01-02T03:14:05Z\n" +
		"bbbb  Paused   python:3.12     -        2030-01-02T03:04:06Z  -\n"
	if r.stdout != want {
		t.Errorf("list:\n%s\nwant:\n%s", r.stdout, want)
	}

	r = hybox(t, srv, "", "sandbox", "list", "--state", "Paused", "--state", "Pending", "--metadata", "x=y z")
	r.check(t, 0)
	req, _ := srv.LastRequest("GET", "/v1/sandboxes")
	if len(req.Query["state"]) != 2 || req.Query.Get("metadata") != "x=y+z" {
		t.Errorf("list query = %v", req.Query)
	}

	r = hybox(t, srv, "", "sandbox", "list", "--page-size", "1")
	r.check(t, 0)
	if strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stderr, "next: --page 2") {
		t.Errorf("paged list: %q / %q", r.stdout, r.stderr)
	}

	r = hybox(t, srv, "", "sandbox", "list", "-o", "json")
	r.check(t, 0)
	var l struct {
		Items      []map[string]any  `json:"items"`
		Pagination client.Pagination `json:"pagination"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || len(l.Items) != 2 || l.Pagination.TotalItems != 2 {
		t.Errorf("json list %q: %v", r.stdout, err)
	}

	r = hybox(t, srv, "", "sandbox", "get", a)
	r.check(t, 0)
	want = "ID:          aaaa\n" +
		"State:       Running\n" +
		"Image:       wasm://default\n" +
		"Runtime:     wasm\n" +
		"Created:     2030-01-02T03:04:05Z\n" +
		"Expires:     2030-01-02T03:14:05Z\n" +
		"Entrypoint:  tail -f /dev/null\n" +
		"Metadata:    env=dev\n" +
		"             team=ml\n"
	if r.stdout != want {
		t.Errorf("get:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = hybox(t, srv, "", "sandbox", "get", a, "-o", "json")
	r.check(t, 0)
	if !strings.Contains(r.stdout, `"runtime": "wasm"`) {
		t.Errorf("json get does not print the server's JSON: %s", r.stdout)
	}
}

func TestSandboxKillRenewPause(t *testing.T) {
	srv := clienttest.NewServer(t)
	a, b := running(srv), running(srv)

	r := hybox(t, srv, "", "sandbox", "kill", a, "nope", b)
	r.check(t, ExitError)
	if r.stdout != a+"\n"+b+"\n" || r.stderr != "error: nope: SANDBOX_NOT_FOUND: sandbox nope not found\n" {
		t.Errorf("kill: stdout %q stderr %q", r.stdout, r.stderr)
	}
	hybox(t, srv, "", "sandbox", "get", a).check(t, ExitError)

	c := running(srv)
	before := time.Now()
	r = hybox(t, srv, "", "sandbox", "renew", c, "--timeout", "1h")
	r.check(t, 0)
	got, err := time.Parse(time.RFC3339, strings.TrimSpace(r.stdout))
	if err != nil || got.Before(before.Add(time.Hour-time.Second)) || got.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("renew printed %q (%v)", r.stdout, err)
	}
	r = hybox(t, srv, "", "sandbox", "renew", c, "--expires-at", "2031-05-06T07:08:09Z", "-o", "json")
	r.check(t, 0)
	if strings.TrimSpace(r.stdout) != "{\n  \"expiresAt\": \"2031-05-06T07:08:09Z\"\n}" {
		t.Errorf("renew json = %q", r.stdout)
	}

	hybox(t, srv, "", "sandbox", "pause", c).check(t, 0)
	r = hybox(t, srv, "", "sandbox", "get", c)
	if !strings.Contains(r.stdout, "Paused") {
		t.Errorf("after pause: %s", r.stdout)
	}
	hybox(t, srv, "", "sandbox", "resume", c).check(t, 0)
}

func TestDomainWithoutScheme(t *testing.T) {
	srv := clienttest.NewServer(t)
	running(srv)
	r := hybox(t, srv, "", "--domain", strings.TrimPrefix(srv.URL, "http://"), "sandbox", "list")
	r.check(t, 0)
	if strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("list = %q", r.stdout)
	}
}

func TestFiles(t *testing.T) {
	srv := clienttest.NewServer(t)
	id := running(srv)
	dir := t.TempDir()
	local := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(local, []byte("hello file"), 0o600); err != nil {
		t.Fatal(err)
	}

	hybox(t, srv, "", "files", "put", id, local, "/w/in.txt").check(t, 0)
	if b, _ := srv.File("/w/in.txt"); string(b) != "hello file" {
		t.Errorf("uploaded %q", b)
	}
	hybox(t, srv, "from stdin", "files", "put", id, "-", "/w/std.txt").check(t, 0)
	if b, _ := srv.File("/w/std.txt"); string(b) != "from stdin" {
		t.Errorf("uploaded from stdin %q", b)
	}

	r := hybox(t, srv, "", "files", "get", id, "/w/in.txt", "-")
	r.check(t, 0)
	if r.stdout != "hello file" {
		t.Errorf("get - = %q", r.stdout)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	hybox(t, srv, "", "files", "get", id, "/w/std.txt", out).check(t, 0)
	if b, err := os.ReadFile(filepath.Join(out, "std.txt")); err != nil || string(b) != "from stdin" {
		t.Errorf("downloaded into dir: %q %v", b, err)
	}
	r = hybox(t, srv, "", "files", "get", id, "/w/missing", filepath.Join(out, "m"))
	r.check(t, ExitError)
	if !strings.Contains(r.stderr, "error: FILE_NOT_FOUND: ") {
		t.Errorf("missing file stderr %q", r.stderr)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("failed download left files: %v", entries)
	}

	srv.PutFile("/w/sub/deep.txt", []byte("x"))
	r = hybox(t, srv, "", "files", "ls", id, "/w")
	r.check(t, 0)
	want := "MODE        SIZE  MODIFIED              PATH\n" +
		"-rw-r--r--  10    2025-01-01T00:00:00Z  /w/in.txt\n" +
		"-rw-r--r--  10    2025-01-01T00:00:00Z  /w/std.txt\n" +
		"drwxr-xr-x  0     2025-01-01T00:00:00Z  /w/sub/\n"
	if r.stdout != want {
		t.Errorf("ls:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = hybox(t, srv, "", "files", "ls", id, "/w", "-o", "json")
	r.check(t, 0)
	var list []client.FileInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 {
		t.Errorf("ls json %q: %v", r.stdout, err)
	}
	hybox(t, srv, "", "files", "ls", id, "/nope").check(t, ExitError)
}

func TestOctalDigits(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    os.FileMode
		n    int
	}{
		{name: "rw-r--r--", m: 0o644, n: 644},
		{name: "rwxr-xr-x", m: 0o755, n: 755},
		{name: "none", m: 0, n: 0},
		{name: "setuid", m: 0o4755, n: 4755},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := octalDigits(tt.m); got != tt.n {
				t.Errorf("octalDigits = %d, want %d", got, tt.n)
			}
			if got := fromOctalDigits(tt.n); got != tt.m&os.ModePerm {
				t.Errorf("fromOctalDigits = %o", got)
			}
		})
	}
}
