package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/server/servertest"
)

func TestExec(t *testing.T) {
	srv := servertest.New(t)
	id := running(t, srv, api.CreateSandboxRequest{})
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{name: "echo", args: []string{"exec", id, "--", "echo", "hi", "there"}, stdout: "hi there\n"},
		{name: "without dashes", args: []string{"exec", id, "echo", "x", "-n"}, stdout: "x -n\n"},
		{name: "exit code", args: []string{"exec", id, "--", "echo bye; echo oops >&2; exit 3"}, code: 3, stdout: "bye\n", stderr: "oops\n"},
		{name: "killed at its timeout", args: []string{"exec", "--timeout", "300ms", id, "--", "sleep 10"}, code: 137},
		{name: "one argument is a command line", args: []string{"exec", id, "--", "echo a && echo b"}, stdout: "a\nb\n"},
		{name: "several arguments are quoted", args: []string{"exec", id, "--", "printf", "%s\n", "a b", "it's", "$HOME"}, stdout: "a b\nit's\n$HOME\n"},
		{name: "options", args: []string{"exec", "--cwd", "/tmp", "--env", "A=1", "--env", "B=2", "--timeout", "20s", id, "--", "pwd; echo $A$B"}, stdout: "/tmp\n12\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, "", tt.args...)
			r.check(t, tt.code)
			if r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q; want %q %q", r.stdout, r.stderr, tt.stdout, tt.stderr)
			}
		})
	}

	t.Run("background", func(t *testing.T) {
		r := live(t, srv, "", "exec", "--background", id, "--", "echo started; exit 5")
		r.check(t, 0)
		ctx := context.Background()
		bg, err := sdk(t, srv).Sandbox(id).Command(ctx, strings.TrimSpace(r.stdout))
		require.NoError(t, err)
		st, err := bg.Wait(ctx, 0)
		require.NoError(t, err, "the CLI printed %q, not a command id", r.stdout)
		require.NotNil(t, st.ExitCode)
		assert.Equal(t, 5, *st.ExitCode)
		logs, _, err := bg.Logs(ctx, 0)
		require.NoError(t, err)
		assert.Equal(t, "started\n", logs)
	})
}

// Ctrl-C (the context ends) stops the command in the sandbox.
func TestExecInterrupt(t *testing.T) {
	srv := servertest.New(t)
	id := running(t, srv, api.CreateSandboxRequest{})
	sb := sdk(t, srv).Sandbox(id)
	ticks := func() int {
		b, err := sb.ReadFile(context.Background(), "/tmp/ticks")
		if err != nil {
			return 0
		}
		return strings.Count(string(b), "\n")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result)
	go func() {
		done <- liveCtx(ctx, t, srv, "", "exec", id, "--", "for i in $(seq 1 200); do echo $i >> /tmp/ticks; sleep 0.05; done")
	}()
	require.Eventually(t, func() bool { return ticks() > 2 }, 20*time.Second, 10*time.Millisecond, "the command never started")
	cancel()
	r := <-done
	r.check(t, ExitInterrupted)
	time.Sleep(time.Second) // the interrupt lands
	n := ticks()
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, n, ticks(), "the command went on after Ctrl-C")
	assert.Less(t, n, 200)
}

func TestRun(t *testing.T) {
	srv := servertest.New(t)
	id := running(t, srv, api.CreateSandboxRequest{})
	cc, err := sdk(t, srv).Sandbox(id).CreateContext(context.Background(), api.CodeContextRequest{Language: "python"})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "x.py")
	require.NoError(t, os.WriteFile(file, []byte("print('from file')"), 0o644))
	tests := []struct {
		name           string
		stdin          string
		args           []string
		code           int
		stdout, stderr string
	}{
		{name: "one-shot", args: []string{"run", "print(1)\n6*7"}, stdout: "1\n42\n"},
		{name: "one-shot javascript with timeout", args: []string{"run", "-l", "javascript", "--timeout", "3s", "console.log(1+1)"}, stdout: "2\n"},
		{name: "traceback", args: []string{"run", "print('before')\nraise ValueError('boom')"}, code: 1, stdout: "before\n"},
		{name: "one-shot with a policy", args: []string{"run", "--allow", "pypi.org", "--deny", "*.evil.test", "print(2)"}, stdout: "2\n"},
		{name: "policy in a sandbox", args: []string{"run", "--sandbox", id, "--allow", "x.test", "1"}, code: 2,
			stderr: "error: a network policy applies to one-shot runs: change a sandbox's with hybox egress\nRun 'hybox run --help' for usage.\n"},
		{name: "from file", args: []string{"run", "-f", file}, stdout: "from file\n"},
		{name: "from stdin", stdin: "print('piped')", args: []string{"run", "-"}, stdout: "piped\n"},
		{name: "in a sandbox", args: []string{"run", "--sandbox", id, "x = 2"}},
		{name: "the sandbox's default context keeps state", args: []string{"run", "--sandbox", id, "print(x)"}, stdout: "2\n"},
		{name: "in a context", args: []string{"run", "--sandbox", id, "--context", cc.ID, "-f", "-"}, stdin: "y = 5\ny * 2", stdout: "10\n"},
		{name: "sandbox traceback", args: []string{"run", "--sandbox", id, "print('before')\nraise ValueError('boom')"}, code: 1, stdout: "before\n"},
		{name: "sandbox timeout", args: []string{"run", "--sandbox", id, "--timeout", "300ms", "import time\ntime.sleep(10)"}, code: 1,
			stderr: "error: timed out after 300ms\n"},
		{name: "unknown context", args: []string{"run", "--sandbox", id, "--context", "missing", "1"}, code: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := live(t, srv, tt.stdin, tt.args...)
			r.check(t, tt.code)
			assert.Equal(t, tt.stdout, r.stdout)
			switch {
			case tt.stderr != "":
				assert.Equal(t, tt.stderr, r.stderr)
			case strings.Contains(tt.name, "traceback"):
				assert.Contains(t, r.stderr, "ValueError: boom")
			case tt.name == "unknown context":
				assert.True(t, strings.HasPrefix(r.stderr, "error: CONTEXT_NOT_FOUND: "), r.stderr)
			default:
				assert.Empty(t, r.stderr)
			}
		})
	}
}

func TestShellJoin(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{name: "single kept", argv: []string{"a | b"}, want: "a | b"},
		{name: "plain words", argv: []string{"ls", "-la", "/tmp"}, want: "ls -la /tmp"},
		{name: "spaces", argv: []string{"echo", "a b"}, want: "echo 'a b'"},
		{name: "quote", argv: []string{"echo", "it's"}, want: `echo 'it'\''s'`},
		{name: "empty", argv: []string{"echo", ""}, want: "echo ''"},
		{name: "dollar", argv: []string{"echo", "$HOME"}, want: "echo '$HOME'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shellJoin(tt.argv); got != tt.want {
				t.Errorf("shellJoin = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{name: "seconds", in: "600", want: 10 * time.Minute},
		{name: "duration", in: "1h30m", want: 90 * time.Minute},
		{name: "zero", in: "0", want: 0},
		{name: "negative", in: "-5", wantErr: true},
		{name: "negative duration", in: "-5m", wantErr: true},
		{name: "junk", in: "soon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSeconds(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseSeconds(%q) = %v, %v", tt.in, got, err)
			}
		})
	}
}
