package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/server/servertest"
)

// live runs the CLI in-process against a real server.
func live(t *testing.T, srv *servertest.Server, stdin string, args ...string) result {
	t.Helper()
	return liveCtx(context.Background(), t, srv, stdin, args...)
}

// liveCtx is live with a context, which the test may cancel as Ctrl-C
// would.
func liveCtx(ctx context.Context, t *testing.T, srv *servertest.Server, stdin string, args ...string) result {
	t.Helper()
	return liveEnvCtx(ctx, t, map[string]string{EnvDomain: srv.URL, EnvAPIKey: srv.APIKey}, stdin, args...)
}

// liveEnv runs the CLI with env as its environment.
func liveEnv(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	return liveEnvCtx(context.Background(), t, env, stdin, args...)
}

func liveEnvCtx(ctx context.Context, t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(ctx, Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
	}, args)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// liveCreate creates a running sandbox with extra create flags and returns
// its id.
func liveCreate(t *testing.T, srv *servertest.Server, stdin string, flags ...string) string {
	t.Helper()
	r := live(t, srv, stdin, append([]string{"sandbox", "create", "--wait"}, flags...)...)
	r.check(t, 0)
	return strings.TrimSpace(r.stdout)
}

// policyOf returns a sandbox's policy as "action target" strings and its
// default action, read with -o json.
func policyOf(t *testing.T, srv *servertest.Server, id string) ([]string, string) {
	t.Helper()
	r := live(t, srv, "", "egress", "get", id, "-o", "json")
	r.check(t, 0)
	var st api.PolicyStatus
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	var out []string
	for _, rule := range st.Policy.Egress {
		out = append(out, string(rule.Action)+" "+rule.Target)
	}
	return out, string(st.Policy.DefaultAction)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestSandboxCreateNetworkPolicy(t *testing.T) {
	srv := servertest.New(t)

	// Rules keep the order of the flags, across --allow and --deny.
	id := liveCreate(t, srv, "", "--allow", "pypi.org", "--deny", "*.evil.example", "--allow", "10.0.0.0/8")
	rules, def := policyOf(t, srv, id)
	assert.Equal(t, []string{"allow pypi.org", "deny *.evil.example", "allow 10.0.0.0/8"}, rules)
	assert.Equal(t, "deny", def, "a rule without --default-action denies the rest")

	id = liveCreate(t, srv, "", "--deny", "203.0.113.0/24", "--default-action", "allow")
	rules, def = policyOf(t, srv, id)
	assert.Equal(t, []string{"deny 203.0.113.0/24"}, rules)
	assert.Equal(t, "allow", def)

	id = liveCreate(t, srv, "", "--default-action", "deny")
	rules, def = policyOf(t, srv, id)
	assert.Empty(t, rules)
	assert.Equal(t, "deny", def)

	// No policy flag: unrestricted.
	id = liveCreate(t, srv, "")
	r := live(t, srv, "", "egress", "get", id)
	r.check(t, 0)
	assert.Contains(t, r.stdout, "Mode:         allow_all\n")

	// --network-policy from stdin and from a file.
	id = liveCreate(t, srv, `{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]}`, "--network-policy", "-")
	rules, def = policyOf(t, srv, id)
	assert.Equal(t, []string{"allow api.example.com"}, rules)
	assert.Equal(t, "deny", def)
	f := writeFile(t, "policy.json", `{"egress":[{"action":"deny","target":"example.org"}],"defaultAction":"allow"}`)
	id = liveCreate(t, srv, "", "--network-policy", f)
	rules, def = policyOf(t, srv, id)
	assert.Equal(t, []string{"deny example.org"}, rules)
	assert.Equal(t, "allow", def)

	// --credential-proxy with a policy gives a sandbox whose vault works.
	id = liveCreate(t, srv, "", "--allow", "api.example.com", "--credential-proxy")
	r = live(t, srv, "", "vault", "get", id)
	r.check(t, ExitError)
	assert.Contains(t, r.stderr, "error: NOT_FOUND: ", "the vault exists but is empty")

	usage := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{name: "policy file and rules", args: []string{"--network-policy", f, "--allow", "x.com"}, want: "cannot be combined"},
		{name: "policy file and default", args: []string{"--network-policy", f, "--default-action", "allow"}, want: "cannot be combined"},
		{name: "bad default action", args: []string{"--allow", "x.com", "--default-action", "maybe"}, want: `"maybe": want allow or deny`},
		{name: "empty target", args: []string{"--allow", " "}, want: "empty target"},
		{name: "missing policy file", args: []string{"--network-policy", "/nonexistent/p.json"}, want: "no such file"},
		{name: "malformed policy", args: []string{"--network-policy", "-"}, stdin: `{"egress":`, want: "stdin: no JSON value, or an incomplete one"},
		{name: "unknown policy field", args: []string{"--network-policy", "-"}, stdin: `{"rules":[]}`, want: `unknown field "rules"`},
		{name: "wrong policy type", args: []string{"--network-policy", "-"}, stdin: `{"egress":{}}`, want: `field "egress" must be an array`},
	}
	for _, tt := range usage {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, tt.stdin, append([]string{"sandbox", "create"}, tt.args...)...)
			r.check(t, ExitUsage)
			assert.Contains(t, r.stderr, tt.want)
		})
	}

	// The server refuses: its message, exit code 1, no sandbox id.
	refused := []struct {
		name string
		args []string
		want string
	}{
		{name: "bad target", args: []string{"--allow", "exa mple.com"}, want: "exa mple.com"},
		{name: "wildcard everything", args: []string{"--deny", "*"}, want: "networkPolicy"},
		{name: "credential proxy without policy", args: []string{"--credential-proxy"}, want: "networkPolicy"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, "", append([]string{"sandbox", "create"}, tt.args...)...)
			r.check(t, ExitError)
			assert.Empty(t, r.stdout)
			assert.True(t, strings.HasPrefix(r.stderr, "error: INVALID_"), r.stderr)
			assert.Contains(t, r.stderr, tt.want)
		})
	}
}

func TestEgressCommands(t *testing.T) {
	srv := servertest.New(t)
	id := liveCreate(t, srv, "", "--allow", "pypi.org")

	r := live(t, srv, "", "egress", "get", id)
	r.check(t, 0)
	assert.Equal(t, "Mode:         enforcing\n"+
		"Enforcement:  host\n"+
		"Default:      deny\n"+
		"Rules:        allow  pypi.org\n", r.stdout)

	// allow and deny put their rules first, in the order given, and print
	// the policy in force.
	r = live(t, srv, "", "egress", "deny", id, "*.example.com", "10.0.0.0/8")
	r.check(t, 0)
	assert.Equal(t, "Mode:         enforcing\n"+
		"Enforcement:  host\n"+
		"Default:      deny\n"+
		"Rules:        deny   *.example.com\n"+
		"              deny   10.0.0.0/8\n"+
		"              allow  pypi.org\n", r.stdout)
	r = live(t, srv, "", "egress", "allow", id, "Good.Example.COM", "-o", "json")
	r.check(t, 0)
	var st api.PolicyStatus
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	assert.Equal(t, api.PolicyStatusStatus("ok"), st.Status)
	rules, _ := policyOf(t, srv, id)
	assert.Equal(t, []string{"allow good.example.com", "deny *.example.com", "deny 10.0.0.0/8", "allow pypi.org"}, rules)

	// A rule for an existing target replaces it.
	live(t, srv, "", "egress", "allow", id, "10.0.0.0/8").check(t, 0)
	rules, _ = policyOf(t, srv, id)
	assert.Equal(t, []string{"allow 10.0.0.0/8", "allow good.example.com", "deny *.example.com", "allow pypi.org"}, rules)

	live(t, srv, "", "egress", "rm", id, "pypi.org", "10.0.0.0/8").check(t, 0)
	rules, _ = policyOf(t, srv, id)
	assert.Equal(t, []string{"allow good.example.com", "deny *.example.com"}, rules)

	r = live(t, srv, `{"defaultAction":"allow","egress":[{"action":"deny","target":"2001:db8::/32"}]}`, "egress", "set", id, "-")
	r.check(t, 0)
	assert.Equal(t, "Mode:         enforcing\n"+
		"Enforcement:  host\n"+
		"Default:      allow\n"+
		"Rules:        deny  2001:db8::/32\n", r.stdout)
	f := writeFile(t, "p.json", `{"defaultAction":"deny"}`)
	r = live(t, srv, "", "egress", "set", id, f)
	r.check(t, 0)
	assert.Equal(t, "Mode:         deny_all\n"+
		"Enforcement:  host\n"+
		"Default:      deny\n"+
		"Rules:        -\n", r.stdout)

	// Mistakes: the server's message and exit code 1, or a usage error; the
	// policy is untouched.
	tests := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  string
	}{
		{name: "bad target", args: []string{"egress", "allow", id, "exa mple.com"}, code: ExitError, want: `INVALID_REQUEST: rules[0].target "exa mple.com"`},
		{name: "bad target in set", args: []string{"egress", "set", id, "-"}, stdin: `{"egress":[{"action":"allow","target":"a b"}]}`, code: ExitError, want: `"a b"`},
		{name: "bad action in set", args: []string{"egress", "set", id, "-"}, stdin: `{"egress":[{"action":"permit","target":"x.com"}]}`, code: ExitError, want: "permit"},
		{name: "unknown sandbox", args: []string{"egress", "get", "nope"}, code: ExitError, want: "error: SANDBOX_NOT_FOUND: "},
		{name: "allow without target", args: []string{"egress", "allow", id}, code: ExitUsage, want: "requires at least 2 arg"},
		{name: "rm without target", args: []string{"egress", "rm", id}, code: ExitUsage, want: "requires at least 2 arg"},
		{name: "set without file", args: []string{"egress", "set", id}, code: ExitUsage, want: "accepts 2 arg"},
		{name: "set malformed", args: []string{"egress", "set", id, "-"}, stdin: "{} {}", code: ExitUsage, want: "more than one JSON value"},
		{name: "unknown subcommand", args: []string{"egress", "bogus"}, code: ExitUsage, want: "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, tt.stdin, tt.args...)
			r.check(t, tt.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, tt.want)
			assert.True(t, strings.HasPrefix(r.stderr, "error: "), r.stderr)
		})
	}
	rules, def := policyOf(t, srv, id)
	assert.Empty(t, rules)
	assert.Equal(t, "deny", def)
}

const cliSecret = "cli-secret-93e1f0a7d2"

func TestVaultCommands(t *testing.T) {
	srv := servertest.New(t)
	id := liveCreate(t, srv, "", "--allow", "api.example.com", "--allow", "*.example.net", "--credential-proxy")
	var printed strings.Builder // everything any command printed
	run := func(stdin string, code int, args ...string) result {
		t.Helper()
		r := live(t, srv, stdin, args...)
		printed.WriteString(r.stdout + r.stderr)
		r.check(t, code)
		return r
	}

	create := writeFile(t, "vault.json", `{
  "credentials": [{"name": "api-token", "source": {"type": "inline", "value": "`+cliSecret+`"}}],
  "bindings": [{"name": "bound-api", "match": {"hosts": ["api.example.com"]},
                "auth": {"type": "bearer", "credential": "api-token"}}]}`)
	r := run("", 0, "vault", "create", id, create)
	assert.Equal(t, "Revision: 1\n"+
		"CREDENTIAL  SOURCE  REVISION\n"+
		"api-token   inline  1\n"+
		"\n"+
		"BINDING    AUTH    SCHEMES  HOSTS            PATHS  METHODS                    REVISION\n"+
		"bound-api  bearer  https    api.example.com  /*     GET,POST,PUT,PATCH,DELETE  1\n", r.stdout)

	r = run("", ExitError, "vault", "create", id, create)
	assert.Contains(t, r.stderr, "error: VAULT_EXISTS: ")

	r = run("", 0, "vault", "get", id, "-o", "json")
	var st api.VaultState
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	assert.EqualValues(t, 1, st.Revision)
	require.Len(t, st.Credentials, 1)
	assert.Equal(t, "api-token", st.Credentials[0].Name)

	// patch from stdin: a new credential and an apiKey binding, guarded by
	// the revision.
	patch := `{"expectedRevision": 1,
  "credentials": {"add": [{"name": "net-key", "source": {"value": "` + cliSecret + `-2"}}]},
  "bindings": {"add": [{"name": "net", "match": {"hosts": ["*.example.net"], "paths": ["/v2/*"]},
                        "auth": {"type": "apiKey", "name": "X-Api-Key", "credential": "net-key"}}]}}`
	r = run(patch, 0, "vault", "patch", id, "-")
	assert.Equal(t, "Revision: 2\n"+
		"CREDENTIAL  SOURCE  REVISION\n"+
		"api-token   inline  1\n"+
		"net-key     inline  2\n"+
		"\n"+
		"BINDING    AUTH                SCHEMES  HOSTS            PATHS  METHODS                    REVISION\n"+
		"bound-api  bearer              https    api.example.com  /*     GET,POST,PUT,PATCH,DELETE  1\n"+
		"net        apiKey (X-Api-Key)  https    *.example.net    /v2/*  GET,POST,PUT,PATCH,DELETE  2\n", r.stdout)
	r = run(patch, ExitError, "vault", "patch", id, "-")
	assert.Contains(t, r.stderr, "error: REVISION_CONFLICT: ")
	r = run(`{"bindings": {"add": [{"name": "evil", "match": {"hosts": ["evil.example.org"]}, "auth": {"type": "bearer", "credential": "api-token"}}]}}`,
		ExitError, "vault", "patch", id, "-")
	assert.Contains(t, r.stderr, "error: INVALID_REQUEST: ")
	assert.Contains(t, r.stderr, "evil.example.org", "the server says which host the policy denies")

	// Input mistakes are caught before anything is sent, without quoting
	// the input (it holds secrets).
	for _, in := range []string{
		`{"credentials": [{"name": "x", "source": {"value": "` + cliSecret + `"}}], "bindings": [], "bogus": 1}`,
		`{"credentials": [{"name": "x", "source": {"value": ` + strings.Repeat("9", 12) + `}}], "bindings": []}`,
		`{"credentials": [{"name": "x", "source": {"value": "` + cliSecret + `"}}] "bindings": []}`,
		`{"credentials": [{"name": "x", "source": {"value": "` + cliSecret,
	} {
		r = run(in, ExitUsage, "vault", "create", id, "-")
		assert.NotContains(t, r.stderr, strings.Repeat("9", 12))
	}
	r = run("", ExitUsage, "vault", "create", id, "/nonexistent/v.json")
	assert.Contains(t, r.stderr, "no such file")

	run("", 0, "vault", "rm", id)
	r = run("", ExitError, "vault", "get", id)
	assert.Contains(t, r.stderr, "error: NOT_FOUND: ")
	r = run("", ExitError, "vault", "rm", id)
	assert.Contains(t, r.stderr, "error: NOT_FOUND: ")

	// A sandbox without --credential-proxy has no vault.
	plain := liveCreate(t, srv, "", "--allow", "api.example.com")
	r = run("", ExitError, "vault", "create", plain, create)
	assert.Contains(t, r.stderr, "error: CREDENTIAL_PROXY_DISABLED: ")

	assert.NotContains(t, printed.String(), cliSecret, "no command prints a secret value")
	assert.NotEmpty(t, printed.String())
}
