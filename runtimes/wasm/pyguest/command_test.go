package pyguest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

func TestRunCommand(t *testing.T) {
	m := newManager(t, Options{PoolSize: -1})
	root, dir := newRoot(t)
	files := map[string]string{
		"proj/script.py":    "import sys, os\nprint(sys.argv[1:], os.getcwd(), __name__)\n",
		"proj/pkgmod.py":    "print('module ran as', __name__)\n",
		"proj/data.txt":     "payload",
		"proj/sub/child.py": "import os\nprint(os.path.basename(__file__), os.getcwd())\n",
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

	cases := []struct {
		name     string
		args     []string
		stdin    string
		env      map[string]string
		code     int
		stdout   string
		inStderr string
	}{
		{name: "-c", args: []string{"python3", "-c", "print(6*7)"}, stdout: "42\n"},
		{name: "-c argv", args: []string{"python3", "-c", "import sys; print(sys.argv)", "a", "b"}, stdout: "['-c', 'a', 'b']\n"},
		{name: "script relative to cwd", args: []string{"python3", "script.py", "x", "y"}, stdout: "['x', 'y'] /proj __main__\n"},
		{name: "script in subdirectory", args: []string{"python", "-u", "sub/child.py"}, stdout: "child.py /proj\n"},
		{name: "script absolute", args: []string{"python3", "/proj/script.py"}, stdout: "[] /proj __main__\n"},
		{name: "stdin via -", args: []string{"python3", "-"}, stdin: "print('from stdin')\n", stdout: "from stdin\n"},
		{name: "stdin without args", args: []string{"python3"}, stdin: "print(1+2)\n", stdout: "3\n"},
		{name: "version", args: []string{"python3", "--version"}, stdout: "Python 3.11.2\n"},
		{name: "-m module from cwd", args: []string{"python3", "-m", "pkgmod"}, stdout: "module ran as __main__\n"},
		{name: "-m stdlib", args: []string{"python3", "-m", "json.tool"}, stdin: `{"a":1}`, stdout: "{\n    \"a\": 1\n}\n"},
		{name: "relative read", args: []string{"python3", "-c", "print(open('data.txt').read())"}, stdout: "payload\n"},
		{name: "sys.exit code", args: []string{"python3", "-c", "import sys; sys.exit(3)"}, code: 3},
		{name: "sys.exit message", args: []string{"python3", "-c", "import sys; sys.exit('bye')"}, code: 1, inStderr: "bye"},
		{name: "uncaught exception", args: []string{"python3", "-c", "raise KeyError('k')"}, code: 1, inStderr: "KeyError: 'k'"},
		{name: "missing script", args: []string{"python3", "nope.py"}, code: 2, inStderr: "nope.py"},
		{name: "env and home", args: []string{"python3", "-c", "import os; print(os.environ['FOO'], os.environ['HOME'], 'HYBOX_CWD' in os.environ)"}, env: map[string]string{"FOO": "bar"}, stdout: "bar /proj False\n"},
		{name: "user PYTHONPATH kept", args: []string{"python3", "-c", "import os, sys; print(os.environ['PYTHONPATH'], '/proj/sub' in sys.path, any('hybox' in p for p in sys.path))"}, env: map[string]string{"PYTHONPATH": "/proj/sub"}, stdout: "/proj/sub True False\n"},
		{name: "sleep works", args: []string{"python3", "-c", "import time; time.sleep(0.1); print('ok')"}, stdout: "ok\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := engine.Command{Args: c.args, Stdout: &stdout, Stderr: &stderr, Root: root, Cwd: "/proj", Env: c.env}
			if c.stdin != "" {
				cmd.Stdin = strings.NewReader(c.stdin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			code, err := m.RunCommand(ctx, cmd)
			if err != nil {
				t.Fatal(err)
			}
			if code != c.code || stdout.String() != c.stdout || !strings.Contains(stderr.String(), c.inStderr) {
				t.Errorf("exit %d stdout %q stderr %q; want %d %q stderr containing %q",
					code, stdout.String(), stderr.String(), c.code, c.stdout, c.inStderr)
			}
		})
	}

	t.Run("writes land in the root", func(t *testing.T) {
		var out bytes.Buffer
		code, err := m.RunCommand(context.Background(), engine.Command{
			Args: []string{"python3", "-c", "open('made.txt', 'w').write('hi')"}, Stdout: &out, Stderr: &out, Root: root, Cwd: "/proj",
		})
		if err != nil || code != 0 {
			t.Fatalf("%d %v %s", code, err, out.String())
		}
		if b, err := os.ReadFile(filepath.Join(dir, "proj", "made.txt")); string(b) != "hi" {
			t.Errorf("made.txt: %q %v", b, err)
		}
	})

	t.Run("deadline kills", func(t *testing.T) {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		code, err := m.RunCommand(ctx, engine.Command{
			Args: []string{"python3", "-c", "while True: pass"}, Stdout: &out, Stderr: &out, Root: root,
		})
		if code != 137 || !errors.Is(err, execd.ErrTimeout) {
			t.Errorf("got %d, %v; want 137 and ErrTimeout", code, err)
		}
	})

	t.Run("memory limit", func(t *testing.T) {
		var out bytes.Buffer
		code, err := m.RunCommand(context.Background(), engine.Command{
			Args: []string{"python3", "-c", "x = bytearray(10**9)"}, Stdout: &out, Stderr: &out, Root: root, MemoryLimitBytes: 64 << 20,
		})
		if err != nil || code != 1 || !strings.Contains(out.String(), "MemoryError") {
			t.Errorf("got %d, %v, %q", code, err, out.String())
		}
	})
}

func TestScriptIndex(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want int
	}{
		{name: "script", args: []string{"python3", "a.py"}, want: 1},
		{name: "flags then script", args: []string{"python3", "-u", "-B", "a.py", "-c"}, want: 3},
		{name: "clustered flags", args: []string{"python3", "-uB", "a.py"}, want: 2},
		{name: "-W with value", args: []string{"python3", "-W", "ignore", "a.py"}, want: 3},
		{name: "-W attached", args: []string{"python3", "-Wignore", "a.py"}, want: 2},
		{name: "-X with value", args: []string{"python3", "-X", "dev", "a.py"}, want: 3},
		{name: "-c", args: []string{"python3", "-c", "code", "a.py"}, want: -1},
		{name: "-c clustered", args: []string{"python3", "-uc", "code"}, want: -1},
		{name: "-m", args: []string{"python3", "-m", "mod"}, want: -1},
		{name: "dash", args: []string{"python3", "-"}, want: 1},
		{name: "double dash", args: []string{"python3", "--", "-odd.py"}, want: 2},
		{name: "long option with value", args: []string{"python3", "--check-hash-based-pycs", "never", "a.py"}, want: 3},
		{name: "version only", args: []string{"python3", "--version"}, want: -1},
		{name: "nothing", args: []string{"python3"}, want: -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := scriptIndex(c.args); got != c.want {
				t.Errorf("scriptIndex(%q) = %d, want %d", c.args, got, c.want)
			}
		})
	}
	if got := commandArgs([]string{"python", "-u", "x/a.py", "b.py"}, "/w"); !slices.Equal(got, []string{"python3", "-u", "/w/x/a.py", "b.py"}) {
		t.Errorf("commandArgs = %q", got)
	}
}
