package cli

import (
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

func TestExec(t *testing.T) {
	srv := clienttest.NewServer(t)
	id := running(srv)
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
		sent           string // command the server received
	}{
		{name: "echo", args: []string{"exec", id, "--", "echo", "hi", "there"}, stdout: "hi there\n", sent: "echo hi there"},
		{name: "without dashes", args: []string{"exec", id, "echo", "-n", "x"}, stdout: "-n x\n", sent: "echo -n x"},
		{name: "exit code", args: []string{"exec", id, "--", "exit", "3"}, code: 3, stdout: "bye\n", stderr: "oops\n"},
		{name: "failure without exit code", args: []string{"exec", id, "--", "fail"}, code: 1, stderr: "error: TimeoutError: command timed out\n"},
		{name: "one argument is a command line", args: []string{"exec", id, "--", "ls | wc -l"}, stdout: "ran: ls | wc -l\n", sent: "ls | wc -l"},
		{name: "several arguments are quoted", args: []string{"exec", id, "--", "printf", "%s\n", "a b", "it's"}, stdout: "ran: printf '%s\n' 'a b' 'it'\\''s'\n", sent: `printf '%s` + "\n" + `' 'a b' 'it'\''s'`},
		{name: "options", args: []string{"exec", "--cwd", "/w", "--env", "A=1", "--env", "B=2", "--timeout", "2s", id, "--", "env"}, stdout: "cwd=/w\ntimeout=2000\nA=1\nB=2\n"},
		{name: "background", args: []string{"exec", "--background", id, "--", "sleep", "100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hybox(t, srv, "", tt.args...)
			r.check(t, tt.code)
			if tt.name == "background" {
				if !strings.HasPrefix(r.stdout, "cmd-") {
					t.Errorf("background printed %q, want the command id", r.stdout)
				}
				req, _ := srv.LastRequest("POST", "/command")
				if !strings.Contains(string(req.Body), `"background":true`) {
					t.Errorf("body = %s", req.Body)
				}
				return
			}
			if r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q; want %q %q", r.stdout, r.stderr, tt.stdout, tt.stderr)
			}
			if tt.sent != "" {
				req, _ := srv.LastRequest("POST", "/command")
				var body client.CommandRequest
				if err := json.Unmarshal(req.Body, &body); err != nil || body.Command != tt.sent {
					t.Errorf("sent %q, want %q", body.Command, tt.sent)
				}
			}
		})
	}
}

func TestExecInterrupt(t *testing.T) {
	srv := clienttest.NewServer(t)
	id := running(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result)
	go func() { done <- hyboxCtx(ctx, t, srv, "", "exec", id, "--", "hang") }()
	// Wait until the command runs, then press "Ctrl-C".
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := srv.LastRequest("POST", "/command"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the init event arrive
	cancel()
	r := <-done
	r.check(t, ExitInterrupted)
	req, ok := srv.LastRequest("DELETE", "/command")
	if !ok || !strings.HasPrefix(req.Query.Get("id"), "cmd-") {
		t.Errorf("no interrupt sent for the command: %+v", req)
	}
}

func TestRun(t *testing.T) {
	srv := clienttest.NewServer(t)
	id := running(srv)
	file := filepath.Join(t.TempDir(), "x.py")
	if err := os.WriteFile(file, []byte("from_file()"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		stdin          string
		args           []string
		dataPrefix     bool
		code           int
		stdout, stderr string
		path           string // request path suffix
		body           string // expected in the request body
	}{
		{name: "one-shot", args: []string{"run", "print(1)"}, stdout: "out: print(1)\n42\n", path: "/v1/run", body: `"language":"python"`},
		{name: "one-shot javascript with timeout", args: []string{"run", "-l", "javascript", "--timeout", "3s", "1+1"}, stdout: "out: 1+1\n42\n", path: "/v1/run", body: `"timeoutMs":3000`},
		{name: "one-shot sse framing", args: []string{"run", "x"}, dataPrefix: true, stdout: "out: x\n42\n", path: "/v1/run"},
		{name: "traceback", args: []string{"run", "raise ValueError('boom')"}, code: 1, stdout: "before\n", stderr: "Traceback (most recent call last):\nValueError: boom\n", path: "/v1/run"},
		{name: "one-shot with a policy", args: []string{"run", "--allow", "pypi.org", "--deny", "*.evil.test", "x"}, stdout: "out: x\n42\n", path: "/v1/run",
			body: `"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"},{"action":"deny","target":"*.evil.test"}]}`},
		{name: "one-shot without a policy", args: []string{"run", "x"}, stdout: "out: x\n42\n", path: "/v1/run", body: `{"language":"python","code":"x"}`},
		{name: "policy in a sandbox", args: []string{"run", "--sandbox", id, "--allow", "x.test", "1"}, code: 2,
			stderr: "error: a network policy applies to one-shot runs: change a sandbox's with hybox egress\nRun 'hybox run --help' for usage.\n"},
		{name: "from file", args: []string{"run", "-f", file}, stdout: "out: from_file()\n42\n", path: "/v1/run", body: `"code":"from_file()"`},
		{name: "from stdin", stdin: "piped()", args: []string{"run", "-"}, stdout: "out: piped()\n42\n", path: "/v1/run", body: `"code":"piped()"`},
		{name: "in a sandbox", args: []string{"run", "--sandbox", id, "x = 2"}, stdout: "out: x = 2\n42\n", path: "/code", body: `"context":{"language":"python"}`},
		{name: "in a context", args: []string{"run", "--sandbox", id, "--context", "ctx-1", "-f", "-"}, stdin: "y", stdout: "out: y\n42\n", path: "/code", body: `"context":{"id":"ctx-1","language":"python"}`},
		{name: "sandbox traceback", args: []string{"run", "--sandbox", id, "raise"}, code: 1, stdout: "before\n", stderr: "Traceback (most recent call last):\nValueError: boom\n", path: "/code"},
		{name: "unknown context", args: []string{"run", "--sandbox", id, "--context", "missing", "1"}, code: 1, stderr: "error: CONTEXT_NOT_FOUND: context missing not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.SetDataPrefix(tt.dataPrefix)
			r := hybox(t, srv, tt.stdin, tt.args...)
			r.check(t, tt.code)
			if r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q; want %q %q", r.stdout, r.stderr, tt.stdout, tt.stderr)
			}
			if tt.path != "" {
				req, ok := srv.LastRequest("POST", tt.path)
				if !ok || !strings.Contains(string(req.Body), tt.body) {
					t.Errorf("request %s body %s, want it to contain %s", tt.path, req.Body, tt.body)
				}
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
