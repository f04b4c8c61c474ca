package jsguest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

func TestRunCommand(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"main.js":                 "#!/usr/bin/env node\nconst lib = require('./lib');\nconsole.log(lib.double(21), process.argv.slice(2).join(','), __filename);\n",
		"lib.js":                  "exports.double = (x) => x * 2;\n",
		"fail.js":                 "function explode() {\n  throw new TypeError('kaboom');\n}\nexplode();\n",
		"code.js":                 "process.exitCode = 4; console.log('set');\n",
		"sub/dir.js":              "console.log(process.cwd(), __dirname, require('fs').readFileSync('data.txt', 'utf8'));\n",
		"sub/data.txt":            "from sub",
		"node_modules/m/index.js": "module.exports = 'pkg';\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m := newManager(t, Options{})

	tests := []struct {
		name       string
		args       []string
		cwd, stdin string
		env        map[string]string
		code       int
		stdout     string // exact unless prefix is set
		prefix     bool
		stderr     string // substring
	}{
		{name: "version", args: []string{"node", "--version"}, code: 0, stdout: "v20.", prefix: true},
		{name: "eval", args: []string{"node", "-e", "console.log(1 + 1)"}, stdout: "2\n"},
		{name: "eval argv", args: []string{"node", "-e", "console.log(process.argv.slice(1))", "a", "b"}, stdout: "[ 'a', 'b' ]\n"},
		{name: "print", args: []string{"node", "-p", "'abc'.toUpperCase()"}, stdout: "ABC\n"},
		{name: "print object", args: []string{"node", "-p", "({a: [1]})"}, stdout: "{ a: [ 1 ] }\n"},
		{name: "file with require", args: []string{"node", "main.js", "x", "y"}, stdout: "42 x,y /main.js\n"},
		{name: "uncaught error", args: []string{"node", "fail.js"}, code: 1, stderr: "TypeError: kaboom\n    at explode (/fail.js:2"},
		{name: "exit code", args: []string{"node", "-e", "console.log('bye'); process.exit(7); console.log('not')"}, code: 7, stdout: "bye\n"},
		{name: "exitCode property", args: []string{"node", "code.js"}, code: 4, stdout: "set\n"},
		{name: "cwd and relative paths", args: []string{"node", "../sub/dir.js"}, cwd: "/node_modules", code: 1, stderr: "ENOENT"},
		{name: "cwd", args: []string{"node", "dir.js"}, cwd: "/sub", stdout: "/sub /sub from sub\n"},
		{name: "node_modules", args: []string{"node", "-p", "require('m')"}, stdout: "pkg\n"},
		{name: "env", args: []string{"node", "-p", "process.env.GREETING"}, env: map[string]string{"GREETING": "hi"}, stdout: "hi\n"},
		{name: "stdin script", args: []string{"node"}, stdin: "console.log('from stdin')", stdout: "from stdin\n"},
		{name: "stdin data", args: []string{"node", "-e", "console.log(require('fs').readFileSync(0, 'utf8').trim().split(' ').length)"}, stdin: "a b c", stdout: "3\n"},
		{name: "missing file", args: []string{"node", "nope.js"}, code: 1, stderr: "Cannot find module '/nope.js'"},
		{name: "bad option", args: []string{"node", "-Z"}, code: 9, stderr: "bad option"},
		{name: "unhandled rejection", args: []string{"node", "-e", "Promise.reject(new Error('rej'))"}, code: 1, stderr: "Error: rej"},
		{name: "timers in order", args: []string{"node", "-e", "setTimeout(() => console.log('b'), 30); setTimeout(() => console.log('a'), 5); console.log('sync')"}, stdout: "sync\na\nb\n"},
		{name: "top-level await", args: []string{"node", "-e", "await null; console.log('tla')"}, stdout: "tla\n"},
		{name: "stderr", args: []string{"node", "-e", "console.error('to err')"}, stderr: "to err\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := engine.Command{Args: tt.args, Stdout: &stdout, Stderr: &stderr, Root: root, Cwd: tt.cwd, Env: tt.env}
			if tt.stdin != "" {
				cmd.Stdin = strings.NewReader(tt.stdin)
			}
			code, err := m.RunCommand(ctx, cmd)
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if got := stdout.String(); (tt.prefix && !strings.HasPrefix(got, tt.stdout)) || (!tt.prefix && got != tt.stdout) {
				t.Errorf("stdout %q, want %q", got, tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.stderr)
			}
		})
	}
}

func TestRunCommandTimeout(t *testing.T) {
	m := newManager(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	code, err := m.RunCommand(ctx, engine.Command{Args: []string{"node", "-e", "while (true) {}"}, Stdout: &out, Stderr: &out})
	if code != exitKilled || !errors.Is(err, execd.ErrTimeout) {
		t.Errorf("got %d, %v; want %d, ErrTimeout", code, err, exitKilled)
	}
}

// failWriter fails every write, like a closed pipe.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestRunCommandBrokenPipe(t *testing.T) {
	m := newManager(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := m.RunCommand(ctx, engine.Command{Args: []string{"node", "-e", "for (;;) console.log('y')"}, Stdout: failWriter{}, Stderr: failWriter{}})
	if err != nil || code != 1 {
		t.Errorf("got %d, %v; want 1", code, err)
	}
}

func TestParseNode(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want nodeInvocation
		err  bool
	}{
		{name: "file and args", argv: []string{"--no-warnings", "a.js", "-e", "x"}, want: nodeInvocation{file: "a.js", args: []string{"-e", "x"}}},
		{name: "eval with args", argv: []string{"-e", "1", "p", "q"}, want: nodeInvocation{code: "1", hasCode: true, args: []string{"p", "q"}}},
		{name: "print long form", argv: []string{"--print=2"}, want: nodeInvocation{code: "2", hasCode: true, print: true}},
		{name: "stdin dash", argv: []string{"-", "z"}, want: nodeInvocation{file: "-", args: []string{"z"}}},
		{name: "double dash", argv: []string{"--", "-weird.js", "a"}, want: nodeInvocation{file: "-weird.js", args: []string{"a"}}},
		{name: "missing eval arg", argv: []string{"-e"}, err: true},
		{name: "unknown short", argv: []string{"-Q"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNode(tt.argv)
			if (err != nil) != tt.err {
				t.Fatalf("err %v", err)
			}
			if !tt.err && (got.file != tt.want.file || got.code != tt.want.code || got.hasCode != tt.want.hasCode ||
				got.print != tt.want.print || strings.Join(got.args, "|") != strings.Join(tt.want.args, "|")) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRunCommandBlockedStdin(t *testing.T) {
	m := newManager(t, Options{})
	pr, pw := io.Pipe() // never written: a read blocks until the pipe closes
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	code, err := m.RunCommand(ctx, engine.Command{Args: []string{"node", "-e", "require('fs').readFileSync(0)"}, Stdin: pr, Stdout: &out, Stderr: &out})
	if code != exitKilled || !errors.Is(err, execd.ErrTimeout) {
		t.Errorf("got %d, %v; want %d, ErrTimeout", code, err, exitKilled)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
