package wsh

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// workspace makes a temp dir with a few files and returns its path and root.
func workspace(t *testing.T) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"work/a.txt":         "alpha\nbeta\ngamma\n",
		"work/b.txt":         "one two three\nfour five\n",
		"work/nums.txt":      "10\n9\n100\n9\n",
		"work/sub/c.py":      "print('hi')\n",
		"work/sub/deep/d.md": "# title\n",
		"work/run.sh":        "echo script \"$@\"\nexit 4\n",
		"work/tool.py":       "#!/usr/bin/env python3\nprint(1)\n",
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
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return dir, root
}

// call records what a fake program received.
type call struct {
	args  []string
	cwd   string
	env   map[string]string
	stdin string
	limit int64
}

// fakePython stands in for the wasm interpreter.
func fakePython(mu *sync.Mutex, calls *[]call) Program {
	return func(ctx context.Context, cmd engine.Command) (int, error) {
		var in []byte
		if cmd.Stdin != nil {
			in, _ = io.ReadAll(cmd.Stdin)
		}
		mu.Lock()
		*calls = append(*calls, call{args: cmd.Args, cwd: cmd.Cwd, env: cmd.Env, stdin: string(in), limit: cmd.MemoryLimitBytes})
		mu.Unlock()
		if cmd.Root == nil {
			return 1, errors.New("no root")
		}
		io.WriteString(cmd.Stdout, "py:"+strings.Join(cmd.Args[1:], ","))
		if len(in) > 0 {
			io.WriteString(cmd.Stdout, ":"+strings.ToUpper(string(in)))
		}
		io.WriteString(cmd.Stdout, "\n")
		if len(cmd.Args) > 1 && cmd.Args[1] == "fail" {
			return 5, nil
		}
		return 0, nil
	}
}

func runShell(t *testing.T, ctx context.Context, opts Options, src, cwd string, stdin io.Reader) (int, string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := Run(ctx, opts, src, cwd, map[string]string{"GREETING": "hello"}, stdin, &out, &errb)
	return code, out.String(), errb.String(), err
}

func TestRun(t *testing.T) {
	dir, root := workspace(t)
	var mu sync.Mutex
	var calls []call
	opts := Options{
		Root:             root,
		Programs:         map[string]Program{"python3": fakePython(&mu, &calls), "python": fakePython(&mu, &calls)},
		Env:              map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/work"},
		MemoryLimitBytes: 64 << 20,
		UnknownHint:      "HINT",
	}
	tests := []struct {
		name   string
		src    string
		stdin  string
		code   int
		out    string // exact stdout, unless outHas is set
		outHas []string
		errHas string
		outNot string
	}{
		{name: "echo", src: "echo hi $GREETING", out: "hi hello\n"},
		{name: "exit code", src: "exit 3", code: 3},
		{name: "false", src: "false", code: 1},
		{name: "pwd", src: "pwd; cd sub && pwd; cd ..; pwd", out: "/work\n/work/sub\n/work\n"},
		{name: "cat", src: "cat a.txt", out: "alpha\nbeta\ngamma\n"},
		{name: "cat stdin", src: "cat", stdin: "from stdin\n", out: "from stdin\n"},
		{name: "redirect out and in", src: "echo written > /tmp/o.txt; echo more >> /tmp/o.txt; cat < /tmp/o.txt", out: "written\nmore\n"},
		{name: "redirect relative", src: "echo x > rel.txt && cat /work/rel.txt", out: "x\n"},
		{name: "dev null", src: "echo gone > /dev/null; cat /dev/null; echo ok", out: "ok\n"},
		{name: "glob", src: "echo [abn]*.txt; echo sub/*", out: "a.txt b.txt nums.txt\nsub/c.py sub/deep\n"},
		{name: "glob absolute", src: "echo /work/sub/*.py", out: "/work/sub/c.py\n"},
		{name: "test -f -d", src: "[ -f a.txt ] && echo f; [ -d sub ] && echo d; [ -e nope ] || echo none; test -x run.sh || echo noexec", out: "f\nd\nnone\nnoexec\n"},
		{name: "pipeline", src: "cat a.txt | grep -n a | sort -r", out: "3:gamma\n2:beta\n1:alpha\n"},
		{name: "yes head", src: "yes | head -n 3", out: "y\ny\ny\n"},
		{name: "head tail", src: "head -n 2 a.txt; tail -n 1 a.txt; tail -n +3 a.txt; head -1 b.txt", out: "alpha\nbeta\ngamma\ngamma\none two three\n"},
		{name: "wc", src: "wc -l < a.txt; wc -w b.txt; cat b.txt | wc -c", out: "3\n5 b.txt\n24\n"},
		{name: "mkdir touch ls", src: "mkdir -p x/y/z && touch x/y/z/f && ls x/y/z && ls -a x", out: "f\n.\n..\ny\n"},
		{name: "ls long", src: "ls -l sub", outHas: []string{"total 2", "-rw-r--r-- 1 user user", "c.py", "drwx"}},
		{name: "ls -R", src: "ls -R sub", out: "sub:\nc.py\ndeep\n\nsub/deep:\nd.md\n"},
		{name: "cp mv rm", src: "cp a.txt c.txt && mv c.txt d.txt && cat d.txt | head -n1 && rm d.txt && ls d.txt", code: 2, out: "alpha\n", errHas: "cannot access 'd.txt'"},
		{name: "cp -r", src: "cp -r sub sub2 && cat sub2/deep/d.md && rm -r sub2 && [ ! -e sub2 ] && echo gone", out: "# title\ngone\n"},
		{name: "grep flags", src: "grep -i ALPHA a.txt; grep -c a a.txt; grep -v t b.txt; grep -E 'b(e|x)ta' a.txt; grep -q zzz a.txt || echo nomatch", out: "alpha\n3\nfour five\nbeta\nnomatch\n"},
		{name: "grep -e -e", src: "grep -c -e alpha -e gamma a.txt; grep -e beta -egamma a.txt", out: "2\nbeta\ngamma\n"},
		{name: "grep -r", src: "grep -r title .; grep -rl title; grep -rn print sub", out: "./sub/deep/d.md:# title\nsub/deep/d.md\nsub/c.py:1:print('hi')\n"},
		{name: "sed", src: "sed 's/a/A/g' a.txt; echo hello world | sed -E 's/(\\w+) (\\w+)/\\2 \\1/'; sed -n '2p' a.txt", out: "AlphA\nbetA\ngAmmA\nworld hello\nbeta\n"},
		{name: "sed -i", src: "cp a.txt e.txt; sed -i 's/beta/BETA/' e.txt; cat e.txt", out: "alpha\nBETA\ngamma\n"},
		{name: "sort uniq", src: "sort -n nums.txt | uniq; sort -rn nums.txt | head -n1; sort -u nums.txt | tr '\\n' ' '", out: "9\n10\n100\n100\n10 100 9 "},
		{name: "uniq -c", src: "printf 'a\\na\\nb\\n' | uniq -c", out: "      2 a\n      1 b\n"},
		{name: "tr cut", src: "echo hello | tr a-z A-Z; echo a:b:c | cut -d: -f2,3; echo abc | tr -d b", out: "HELLO\nb:c\nac\n"},
		{name: "tee", src: "echo teed | tee /tmp/t1 > /dev/null; cat /tmp/t1", out: "teed\n"},
		{name: "basename dirname seq", src: "basename /a/b/c.txt .txt; dirname /a/b/c.txt; seq 3; seq -s, 2 2 6", out: "c\n/a/b\n1\n2\n3\n2,4,6\n"},
		{name: "which uname", src: "which python3 ls; uname; uname -a", out: "/usr/bin/python3\n/usr/bin/ls\nLinux\nLinux localhost 6.1.0-hybox #1 SMP wasm32 hybox\n"},
		{name: "whoami without passwd", src: "whoami", code: 1, errHas: "whoami: cannot find name for user ID 1000"},
		{name: "id without passwd", src: "id; id -u; id root", code: 1, out: "uid=1000 gid=1000 groups=1000\n1000\n", errHas: "id: ‘root’: no such user"},
		{name: "command -v", src: "command -v python3; command -v nosuch || echo missing; type cd", out: "/usr/bin/python3\nmissing\ncd is a shell builtin\n"},
		{name: "xargs", src: "printf 'a.txt\\nb.txt\\n' | xargs wc -l", out: " 3 a.txt\n 2 b.txt\n 5 total\n"},
		{name: "find", src: "find . -name '*.md'; find sub -type d", out: "./sub/deep/d.md\nsub\nsub/deep\n"},
		{name: "base64 sums", src: "echo -n hi | base64; echo aGk= | base64 -d; echo; echo -n hi | sha256sum; echo -n hi | md5sum", out: "aGk=\nhi\n8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4  -\n49f68a5c8493ec2c0bf489821c21fc3b  -\n"},
		{name: "stat chmod", src: "chmod 755 run.sh; stat -c '%a %s %n' run.sh; [ -x run.sh ] && echo x", out: "755 24 run.sh\nx\n"},
		{name: "ln realpath", src: "ln -s /work/sub lnk; realpath lnk/c.py; cat lnk/c.py", out: "/work/sub/c.py\nprint('hi')\n"},
		{name: "env printenv", src: "export FOO=bar; env | grep -E '^(FOO|GREETING)='; printenv HOME", out: "FOO=bar\nGREETING=hello\n/work\n"},
		{name: "date", src: "date -u -d @0 +%Y-%m-%dT%H:%M:%S", out: "1970-01-01T00:00:00\n"},
		{name: "sleep short", src: "sleep 0.01 && echo slept", out: "slept\n"},
		{name: "script file", src: "sh run.sh a b; echo $?; ./run.sh c; echo $?", out: "script a b\n4\nscript c\n4\n"},
		{name: "sh -c", src: "sh -c 'echo inner $0 $1' zero one; bash -c 'exit 7'; echo $?", out: "inner zero one\n7\n"},
		{name: "shebang python", src: "./tool.py arg", out: "py:/work/tool.py,arg\n"},
		{name: "program", src: "echo in | python3 -c x; /usr/bin/python3 fail; echo $?", out: "py:-c,x:IN\n\npy:fail\n5\n"},
		{name: "unknown", src: "gcc -v", code: 127, errHas: "gcc: command not found; HINT"},
		{name: "unknown abs", src: "/usr/bin/gcc", code: 127, errHas: "/usr/bin/gcc: command not found"},
		{name: "parse error", src: "if then fi (", code: 2, errHas: "wsh:"},
		{name: "functions", src: "f() { echo fn $1; return 2; }; f x; echo $?", out: "fn x\n2\n"},
		{name: "subst", src: "n=$(cat a.txt | wc -l); echo lines=$n", out: "lines=3\n"},
		{name: "set -e", src: "set -e; false; echo not", code: 1},
		{name: "host uid hidden", src: "echo $UID $HOME", out: "1000 /work\n"},
		{name: "tmpdir bypass closed", src: "echo x > /tmp/sh-interp-1; cat /tmp/sh-interp-1; echo $TMPDIR", out: "x\n/tmp\n"},
		{name: "source", src: "echo 'SRC=1' > lib.sh; . ./lib.sh; source lib.sh; echo $SRC", out: "1\n"},
		{name: "timeout", src: "timeout 0.05 sleep 5; echo $?", out: "124\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdin io.Reader
			if tc.stdin != "" {
				stdin = strings.NewReader(tc.stdin)
			}
			code, out, errs, err := runShell(t, context.Background(), opts, tc.src, "/work", stdin)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if code != tc.code {
				t.Errorf("code = %d, want %d; stdout %q stderr %q", code, tc.code, out, errs)
			}
			if tc.outHas == nil && out != tc.out {
				t.Errorf("stdout = %q, want %q (stderr %q)", out, tc.out, errs)
			}
			for _, s := range tc.outHas {
				if !strings.Contains(out, s) {
					t.Errorf("stdout %q lacks %q", out, s)
				}
			}
			if tc.errHas != "" && !strings.Contains(errs, tc.errHas) {
				t.Errorf("stderr = %q, want it to contain %q", errs, tc.errHas)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "work", "rel.txt")); err != nil {
		t.Errorf("redirect did not land in the root: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var got *call
	for i := range calls {
		if len(calls[i].args) > 1 && calls[i].args[1] == "-c" {
			got = &calls[i]
		}
	}
	if got == nil {
		t.Fatal("python3 -c was not called")
	}
	if got.cwd != "/work" || got.stdin != "in\n" || got.env["GREETING"] != "hello" || got.env["HOME"] != "/work" || got.limit != 64<<20 {
		t.Errorf("program got %+v", *got)
	}
}
