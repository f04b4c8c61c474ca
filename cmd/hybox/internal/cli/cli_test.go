package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/server/servertest"
)

type result struct {
	stdout, stderr string
	code           int
}

func (r result) check(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

// sdk returns an SDK client of srv, to set up and check what the CLI does.
func sdk(t *testing.T, srv *servertest.Server) *hybox.Client {
	t.Helper()
	c, err := hybox.New(hybox.WithDomain(srv.URL), hybox.WithAPIKey(srv.APIKey))
	require.NoError(t, err)
	return c
}

// running creates a running wasm sandbox on srv and returns its id.
func running(t *testing.T, srv *servertest.Server, req api.CreateSandboxRequest) string {
	t.Helper()
	ctx := context.Background()
	sb, err := sdk(t, srv).Create(ctx, req)
	require.NoError(t, err)
	_, err = sb.WaitRunning(ctx, 0)
	require.NoError(t, err)
	return sb.ID()
}

func TestUsageErrors(t *testing.T) {
	srv := servertest.New(t)
	id := running(t, srv, api.CreateSandboxRequest{})
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
		{name: "run bad language", args: []string{"run", "-l", "cobol", "1"}, want: "want one of python, javascript, typescript, bash"},
		{name: "run without code", args: []string{"run"}, want: "no code"},
		{name: "run code twice", args: []string{"run", "-f", "x.py", "1"}, want: "not both"},
		{name: "run missing file", args: []string{"run", "-f", "/nonexistent/x.py"}, want: "no such file"},
		{name: "context without sandbox", args: []string{"run", "--context", "c", "1"}, want: "--context needs --sandbox"},
		{name: "bad domain", args: []string{"--domain", "ftp://x", "sandbox", "list"}, want: "scheme must be http or https"},
		{name: "files put bad mode", args: []string{"files", "put", id, "-", "/x", "--mode", "9"}, want: "octal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, "", tt.args...)
			r.check(t, ExitUsage)
			if !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "--help") {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	r := liveEnv(t, nil, "", "--help")
	r.check(t, 0)
	for _, c := range []string{"sandbox", "exec", "run", "files", "HYBOX_DOMAIN", "OPEN_SANDBOX_DOMAIN"} {
		if !strings.Contains(r.stdout, c) {
			t.Errorf("help lacks %q:\n%s", c, r.stdout)
		}
	}
}

// The CLI reads hybox's variables first, then OpenSandbox's.
func TestEnvironment(t *testing.T) {
	srv := servertest.New(t)
	tests := []struct {
		name string
		env  map[string]string
		code int
	}{
		{"hybox names", map[string]string{"HYBOX_DOMAIN": srv.URL, "HYBOX_API_KEY": srv.APIKey, "OPEN_SANDBOX_API_KEY": "wrong"}, 0},
		{"OpenSandbox names", map[string]string{"OPEN_SANDBOX_DOMAIN": srv.URL, "OPEN_SANDBOX_API_KEY": srv.APIKey}, 0},
		{"no key", map[string]string{"HYBOX_DOMAIN": srv.URL}, ExitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			liveEnv(t, tt.env, "", "sandbox", "list").check(t, tt.code)
		})
	}
}

func TestAPIErrorOutput(t *testing.T) {
	srv := servertest.New(t)
	tests := []struct {
		name string
		args []string
		want string // the start of stderr
	}{
		{name: "not found", args: []string{"sandbox", "get", "nope"}, want: "error: SANDBOX_NOT_FOUND: "},
		{name: "wrong key flag beats env", args: []string{"--api-key", "wrong", "sandbox", "list"}, want: "error: INVALID_API_KEY: "},
		{name: "server refuses", args: []string{"sandbox", "create", "--runtime", "runsc"}, want: "error: INVALID_REQUEST: "},
		{name: "renew into the past", args: []string{"sandbox", "renew", "nope", "--expires-at", "2001-01-01T00:00:00Z"}, want: "error: "},
		{name: "exec in unknown sandbox", args: []string{"exec", "nope", "--", "ls"}, want: "error: SANDBOX_NOT_FOUND: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, "", tt.args...)
			r.check(t, ExitError)
			if !strings.HasPrefix(r.stderr, tt.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
				t.Errorf("stderr = %q, want it to start with %q (stdout %q)", r.stderr, tt.want, r.stdout)
			}
		})
	}
}

func TestSandboxCreate(t *testing.T) {
	srv := servertest.New(t)
	c := sdk(t, srv)
	ctx := context.Background()
	r := live(t, srv, "", "sandbox", "create", "--timeout", "10m", "--env", "A=1", "--env", "B=x=y",
		"--metadata", "team=ml", "--runtime", "wasm", "--memory", "512Mi", "--cpu", "1", "--wait")
	r.check(t, 0)
	id := strings.TrimSpace(r.stdout)
	sb, err := c.Connect(ctx, id)
	require.NoError(t, err, "stdout %q", r.stdout)
	info := sb.Info()
	assert.Equal(t, "wasm://default", info.Image.URI)
	assert.Equal(t, "ml", info.Metadata["team"])
	assert.InDelta(t, 600, info.ExpiresAt.Sub(info.CreatedAt).Seconds(), 2)
	x, err := sb.Exec(ctx, hybox.Command{Command: "echo $A $B"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "1 x=y", x.Text())

	// No expiry, --wait, JSON output.
	r = live(t, srv, "", "sandbox", "create", "--timeout", "0", "--wait", "-o", "json")
	r.check(t, 0)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	assert.Equal(t, "Running", out["status"].(map[string]any)["state"])
	assert.Nil(t, out["expiresAt"])
}

func TestSandboxListGet(t *testing.T) {
	srv := servertest.New(t)
	a := running(t, srv, api.CreateSandboxRequest{Metadata: api.Metadata{"team": "ml", "env": "dev"}, Entrypoint: []string{"tail", "-f", "/dev/null"}})
	b := running(t, srv, api.CreateSandboxRequest{Metadata: api.Metadata{"team": "web"}})
	require.NoError(t, sdk(t, srv).Sandbox(b).Pause(context.Background()))

	r := live(t, srv, "", "sandbox", "list")
	r.check(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	assert.Regexp(t, `^ID\s+STATE\s+IMAGE\s+RUNTIME\s+CREATED\s+EXPIRES$`, lines[0])
	assert.Regexp(t, a+`\s+Running\s+wasm://default\s+wasm\s`, r.stdout)
	assert.Contains(t, r.stdout, b)

	r = live(t, srv, "", "sandbox", "list", "--metadata", "team=ml")
	r.check(t, 0)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.Regexp(t, `^`+a+`\s+Running\s+wasm://default\s+wasm\s+\d{4}-\d\d-\d\dT\S+Z\s+-$`, lines[1])

	r = live(t, srv, "", "sandbox", "list", "--state", "Paused", "--state", "Pausing")
	r.check(t, 0)
	assert.NotContains(t, r.stdout, a)
	assert.Contains(t, r.stdout, b)

	r = live(t, srv, "", "sandbox", "list", "--page-size", "1")
	r.check(t, 0)
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
	assert.Contains(t, r.stderr, "next: --page 2")

	r = live(t, srv, "", "sandbox", "list", "-o", "json")
	r.check(t, 0)
	var l api.ListSandboxesResponse
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
	assert.Len(t, l.Items, 2)
	assert.Equal(t, 2, l.Pagination.TotalItems)

	r = live(t, srv, "", "sandbox", "get", a)
	r.check(t, 0)
	assert.Regexp(t, `^ID:\s+`+a+`\nState:\s+Running\nImage:\s+wasm://default\nRuntime:\s+wasm\n(Platform:.*\n)?Created:\s+\S+Z\nExpires:\s+-\n`+
		`Entrypoint:\s+tail -f /dev/null\nMetadata:\s+env=dev\n\s+team=ml\n$`, r.stdout)
	r = live(t, srv, "", "sandbox", "get", a, "-o", "json")
	r.check(t, 0)
	var sb api.Sandbox
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sb), r.stdout)
	assert.Equal(t, a, sb.ID)
	assert.Equal(t, api.SandboxStateRunning, sb.Status.State)
}

func TestSandboxKillRenewPause(t *testing.T) {
	srv := servertest.New(t)
	a, b := running(t, srv, api.CreateSandboxRequest{}), running(t, srv, api.CreateSandboxRequest{})

	r := live(t, srv, "", "sandbox", "kill", a, "nope", b)
	r.check(t, ExitError)
	assert.Equal(t, a+"\n"+b+"\n", r.stdout)
	assert.True(t, strings.HasPrefix(r.stderr, "error: nope: SANDBOX_NOT_FOUND: "), r.stderr)
	live(t, srv, "", "sandbox", "get", a).check(t, ExitError)

	c := running(t, srv, api.CreateSandboxRequest{})
	before := time.Now()
	r = live(t, srv, "", "sandbox", "renew", c, "--timeout", "1h")
	r.check(t, 0)
	got, err := time.Parse(time.RFC3339, strings.TrimSpace(r.stdout))
	if err != nil || got.Before(before.Add(time.Hour-time.Second)) || got.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("renew printed %q (%v)", r.stdout, err)
	}
	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	r = live(t, srv, "", "sandbox", "renew", c, "--expires-at", at, "-o", "json")
	r.check(t, 0)
	assert.Equal(t, "{\n  \"expiresAt\": \""+at+"\"\n}", strings.TrimSpace(r.stdout))

	live(t, srv, "", "sandbox", "pause", c).check(t, 0)
	require.Eventually(t, func() bool {
		return strings.Contains(live(t, srv, "", "sandbox", "get", c).stdout, "Paused")
	}, 10*time.Second, 20*time.Millisecond)
	live(t, srv, "", "sandbox", "resume", c).check(t, 0)
	r = live(t, srv, "", "sandbox", "pause", "nope")
	r.check(t, ExitError)
}

func TestDomainWithoutScheme(t *testing.T) {
	srv := servertest.New(t)
	running(t, srv, api.CreateSandboxRequest{})
	r := live(t, srv, "", "--domain", strings.TrimPrefix(srv.URL, "http://"), "sandbox", "list")
	r.check(t, 0)
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
}

func TestFiles(t *testing.T) {
	srv := servertest.New(t)
	id := running(t, srv, api.CreateSandboxRequest{})
	sb := sdk(t, srv).Sandbox(id)
	ctx := context.Background()
	dir := t.TempDir()
	local := filepath.Join(dir, "in.txt")
	require.NoError(t, os.WriteFile(local, []byte("hello file"), 0o600))

	live(t, srv, "", "files", "put", id, local, "/w/in.txt").check(t, 0)
	b, err := sb.ReadFile(ctx, "/w/in.txt")
	require.NoError(t, err)
	assert.Equal(t, "hello file", string(b))
	live(t, srv, "from stdin", "files", "put", id, "-", "/w/std.txt", "--mode", "644").check(t, 0)
	b, err = sb.ReadFile(ctx, "/w/std.txt")
	require.NoError(t, err)
	assert.Equal(t, "from stdin", string(b))

	r := live(t, srv, "", "files", "get", id, "/w/in.txt", "-")
	r.check(t, 0)
	assert.Equal(t, "hello file", r.stdout)
	out := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(out, 0o755))
	live(t, srv, "", "files", "get", id, "/w/std.txt", out).check(t, 0)
	b, err = os.ReadFile(filepath.Join(out, "std.txt"))
	require.NoError(t, err)
	assert.Equal(t, "from stdin", string(b))
	r = live(t, srv, "", "files", "get", id, "/w/missing", filepath.Join(out, "m"))
	r.check(t, ExitError)
	assert.Contains(t, r.stderr, "error: FILE_NOT_FOUND: ")
	entries, _ := os.ReadDir(out)
	assert.Len(t, entries, 1, "a failed download left files")

	require.NoError(t, sb.WriteFile(ctx, "/w/sub/deep.txt", []byte("x"), 0))
	r = live(t, srv, "", "files", "ls", id, "/w")
	r.check(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	assert.Regexp(t, `^MODE\s+SIZE\s+MODIFIED\s+PATH$`, lines[0])
	assert.Regexp(t, `^-rw-------\s+10\s+\S+Z\s+/w/in.txt$`, lines[1])
	assert.Regexp(t, `^-rw-r--r--\s+10\s+\S+Z\s+/w/std.txt$`, lines[2])
	assert.Regexp(t, `^d\S+\s+\d+\s+\S+Z\s+/w/sub/$`, lines[3])
	r = live(t, srv, "", "files", "ls", id, "/w", "-o", "json")
	r.check(t, 0)
	var list []api.FileInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	assert.Len(t, list, 3)
	live(t, srv, "", "files", "ls", id, "/nope").check(t, ExitError)
}

func TestModes(t *testing.T) {
	for _, tt := range []struct {
		name  string
		bits  uint64
		mode  os.FileMode
		wire  int
		perms os.FileMode
	}{
		{name: "rw-r--r--", bits: 0o644, mode: 0o644, wire: 644, perms: 0o644},
		{name: "rwxr-xr-x", bits: 0o755, mode: 0o755, wire: 755, perms: 0o755},
		{name: "none", bits: 0, mode: 0, wire: 0, perms: 0},
		{name: "setuid", bits: 0o4755, mode: 0o755 | os.ModeSetuid, wire: 4755, perms: 0o755},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.mode, fromOctal(tt.bits))
			assert.Equal(t, tt.perms, fromOctalDigits(tt.wire))
		})
	}
}
