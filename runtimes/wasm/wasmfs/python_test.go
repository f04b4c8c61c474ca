package wasmfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// pyResult is what a CPython guest run produced.
type pyResult struct {
	stdout, stderr string
	exit           uint32
}

// runPython runs `python -c code` with fsys mounted at "/". stdin and
// stdoutTee may be nil; stdout is also copied to stdoutTee.
// It fails the test only through t.Errorf, so it may run in a goroutine.
func runPython(t *testing.T, e *engine.Engine, fsys experimentalsys.FS, stdin io.Reader, stdoutTee io.Writer, code string) pyResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cm, err := e.Compile(ctx, engine.Python)
	if err != nil {
		t.Errorf("compile: %v", err)
		return pyResult{exit: 255}
	}
	var stdout, stderr bytes.Buffer
	cfg := wazero.NewModuleConfig().
		WithArgs("python", "-c", code).
		WithFSConfig(wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(fsys, "/")).
		WithSysWalltime().WithSysNanotime().
		WithStdout(&stdout).WithStderr(&stderr).
		WithName("")
	if stdin != nil {
		cfg = cfg.WithStdin(stdin)
	}
	if stdoutTee != nil {
		cfg = cfg.WithStdout(io.MultiWriter(&stdout, stdoutTee))
	}
	mod, err := e.Runtime().InstantiateModule(ctx, cm, cfg)
	res := pyResult{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *sys.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.exit = exitErr.ExitCode()
	case err != nil:
		t.Errorf("python: %v\nstderr: %s", err, res.stderr)
		res.exit = 255
	default:
		mod.Close(ctx)
	}
	return res
}

// mustPython runs code and fails the test unless it exits 0.
func mustPython(t *testing.T, fsys experimentalsys.FS, code string) string {
	t.Helper()
	res := runPython(t, wasmtest.Engine(t), fsys, nil, nil, code)
	if res.exit != 0 {
		t.Fatalf("python exited %d\nstdout: %s\nstderr: %s", res.exit, res.stdout, res.stderr)
	}
	return res.stdout
}

// pyPrelude defines helpers for the guest scripts.
const pyPrelude = `
import os, sys
def fails(fn, *args):
    try:
        r = fn(*args)
        if hasattr(r, 'read'):
            r = r.read()
    except OSError as e:
        return type(e).__name__
    raise AssertionError('%s%r did not fail, got %r' % (fn.__name__, args, r))
`

func TestPythonFileIO(t *testing.T) {
	root, dir, _ := testRoot(t)
	writeHost(t, dir, "host.txt", "from host")
	out := mustPython(t, New(root), pyPrelude+`
os.mkdir('/ws')
with open('/ws/a.txt', 'w') as f:
    f.write('hello\n')
with open('/ws/a.txt', 'a') as f:
    f.write('world\n')
with open('/ws/a.txt') as f:
    assert f.read() == 'hello\nworld\n'
with open('/ws/a.txt', 'r+b') as f:
    f.seek(6)
    assert f.read(5) == b'world'
    f.seek(0)
    f.write(b'HELLO')
    f.seek(-3, 2)
    assert f.read() == b'ld\n', 'seek from end'
    f.truncate(5)
assert open('/ws/a.txt').read() == 'HELLO'
assert open('/host.txt').read() == 'from host'
assert fails(open, '/ws/a.txt', 'x') == 'FileExistsError'
assert fails(open, '/ws/missing.txt') == 'FileNotFoundError'
assert fails(open, '/ws') == 'IsADirectoryError'
with open('/ws/new.txt', 'x') as f:
    f.write('x')

st = os.stat('/ws/a.txt')
assert st.st_size == 5, st
os.utime('/ws/a.txt', (1000000000, 1234567890))
st = os.stat('/ws/a.txt')
assert int(st.st_mtime) == 1234567890 and int(st.st_atime) == 1000000000, st

os.makedirs('/ws/d1/d2/d3')
os.makedirs('/ws/d1/d2/d3', exist_ok=True)
assert fails(os.makedirs, '/ws/d1/d2') == 'FileExistsError'
os.rename('/ws/d1/d2', '/ws/moved')
assert os.listdir('/ws/moved') == ['d3']
os.replace('/ws/new.txt', '/ws/a.txt')
assert open('/ws/a.txt').read() == 'x'
assert fails(os.rmdir, '/ws/moved') == 'OSError'
assert fails(os.rmdir, '/ws/a.txt') == 'NotADirectoryError'
assert fails(os.remove, '/ws/moved') == 'IsADirectoryError'
os.rmdir('/ws/moved/d3')
os.rmdir('/ws/moved')
os.remove('/ws/a.txt')
assert not os.path.exists('/ws/a.txt')
assert sorted(os.listdir('/ws')) == ['d1'], os.listdir('/ws')

os.mkdir('/ws/many')
for i in range(250):
    with open('/ws/many/file%03d.txt' % i, 'w') as f:
        f.write('%d' % i)
names = os.listdir('/ws/many')
assert len(names) == 250 and len(set(names)) == 250, len(names)
assert sorted(names) == ['file%03d.txt' % i for i in range(250)]
ents = list(os.scandir('/ws/many'))
assert len(ents) == 250 and all(e.is_file() for e in ents)
assert sum(e.stat().st_size for e in ents) == sum(len(str(i)) for i in range(250))
walked = [(d, len(fs)) for d, _, fs in os.walk('/ws')]
assert ('/ws/many', 250) in walked, walked

import shutil, pathlib, errno
os.makedirs('/ws/tree/b')
for i in range(3):
    pathlib.Path('/ws/tree/b/f%d.txt' % i).write_text('x' * i)
assert sorted(p.name for p in pathlib.Path('/ws/tree').rglob('*.txt')) == ['f0.txt', 'f1.txt', 'f2.txt']
shutil.copytree('/ws/tree', '/ws/tree2')
shutil.rmtree('/ws/tree')
assert not os.path.exists('/ws/tree') and os.path.getsize('/ws/tree2/b/f2.txt') == 2
fd = os.open('/ws/tree2/b/f2.txt', os.O_RDWR)
os.pwrite(fd, b'YY', 1)
os.fsync(fd)
assert os.pread(fd, 10, 0) == b'xYY'
os.close(fd)
os.truncate('/ws/tree2/b/f2.txt', 1)
assert os.path.getsize('/ws/tree2/b/f2.txt') == 1
os.link('/ws/tree2/b/f2.txt', '/ws/hard')
assert os.stat('/ws/hard').st_nlink == 2
os.symlink('hard', '/ws/soft')
try:
    os.open('/ws/soft', os.O_RDONLY | os.O_NOFOLLOW)
    raise AssertionError('O_NOFOLLOW followed a link')
except OSError as e:
    assert e.errno == errno.ELOOP, e
print('done')
`)
	if strings.TrimSpace(out) != "done" {
		t.Fatalf("stdout %q", out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ws", "many", "file249.txt"))
	if err != nil || string(b) != "249" {
		t.Fatalf("host sees %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "ws", "d1"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("host sees d1: %v", err)
	}
}

func TestPythonEscapes(t *testing.T) {
	root, dir, outside := testRoot(t)
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "ws", "hostlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(dir, "ws", "hostrel")); err != nil {
		t.Fatal(err)
	}
	writeHost(t, dir, "ws/hostdata.txt", "host inside")
	if err := os.Symlink("hostdata.txt", filepath.Join(dir, "ws", "hostin")); err != nil {
		t.Fatal(err)
	}
	res := runPython(t, wasmtest.Engine(t), New(root), nil, nil, pyPrelude+`
secret = sys.argv[1] if len(sys.argv) > 1 else None
OUT = '`+outside+`'
for p in ['/../../etc/passwd', '/../outside/secret.txt', '/ws/../../outside/secret.txt',
          '/ws/hostlink/secret.txt', '/ws/hostrel/secret.txt', OUT + '/secret.txt']:
    print(p, fails(open, p))
    print(p, 'stat', fails(os.stat, p))
for p in ['/ws/hostlink', '/ws/hostrel', '/..']:
    r = None
    try:
        r = os.listdir(p)
    except OSError as e:
        print(p, 'listdir', type(e).__name__)
    assert r is None or 'secret.txt' not in r, (p, r)

os.symlink('/etc', '/ws/link')
print('link', fails(open, '/ws/link/passwd'))
print('link', fails(os.listdir, '/ws/link'))
assert os.readlink('/ws/link') == '/etc'
os.symlink(OUT, '/ws/glink')
print('glink', fails(open, '/ws/glink/secret.txt'))
print('glink', fails(os.listdir, '/ws/glink'))
print('glink write', fails(open, '/ws/glink/new.txt', 'w'))
os.symlink('../../outside/secret.txt', '/ws/grel')
print('grel', fails(open, '/ws/grel'))
print('grel write', fails(open, '/ws/grel', 'w'))
print('mkdir through', fails(os.mkdir, '/ws/glink/newdir'))

assert open('/ws/hostin').read() == 'host inside'
with open('/ws/data.txt', 'w') as f:
    f.write('inside')
os.symlink('data.txt', '/ws/inlink')
assert open('/ws/inlink').read() == 'inside'
os.mkdir('/ws/sub')
os.symlink('../data.txt', '/ws/sub/uplink')
assert open('/ws/sub/uplink').read() == 'inside'
os.symlink('sub', '/ws/dirlink')
assert sorted(os.listdir('/ws/dirlink')) == ['uplink']
assert os.path.islink('/ws/inlink') and os.readlink('/ws/inlink') == 'data.txt'
os.remove('/ws/inlink')
assert os.path.exists('/ws/data.txt')
print('done')
`)
	t.Logf("stdout:\n%s", res.stdout)
	if res.exit != 0 || !strings.HasSuffix(strings.TrimSpace(res.stdout), "done") {
		t.Fatalf("python exited %d\nstdout: %s\nstderr: %s", res.exit, res.stdout, res.stderr)
	}
	if strings.Contains(res.stdout, "SECRET") {
		t.Fatal("the guest read the secret")
	}
	ents, err := os.ReadDir(outside)
	if err != nil || len(ents) != 1 {
		t.Fatalf("outside changed: %v, %v", ents, err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "SECRET" {
		t.Fatalf("secret is now %q", b)
	}
}

func TestPythonSwitch(t *testing.T) {
	t.Run("unbound", func(t *testing.T) {
		out := mustPython(t, NewSwitch(), pyPrelude+`
print(fails(open, '/x.txt', 'w'))
print(fails(open, '/x.txt'))
print(fails(os.listdir, '/'))
print(fails(os.stat, '/x.txt'))
`)
		want := "PermissionError\nPermissionError\nPermissionError\nPermissionError\n"
		if out != want {
			t.Fatalf("stdout %q, want %q", out, want)
		}
	})

	t.Run("bound while running", func(t *testing.T) {
		root, dir, _ := testRoot(t)
		writeHost(t, dir, "in.txt", "bound")
		s := NewSwitch()
		stdinR, stdinW := io.Pipe()
		stdoutR, stdoutW := io.Pipe()
		done := make(chan pyResult, 1)
		e := wasmtest.Engine(t)
		go func() {
			defer stdoutW.Close()
			done <- runPython(t, e, s, stdinR, stdoutW, pyPrelude+`
print(fails(open, '/in.txt'), flush=True)
sys.stdin.readline()
print(open('/in.txt').read())
with open('/out.txt', 'w') as f:
    f.write('written')
print(sorted(os.listdir('/')))
`)
		}()
		// Bind only once the guest has run its first, unbound, open.
		first, err := bufio.NewReader(stdoutR).ReadString('\n')
		if err != nil || first != "PermissionError\n" {
			stdinW.Close()
			go io.Copy(io.Discard, stdoutR)
			res := <-done
			t.Fatalf("first line %q, %v\nstderr: %s", first, err, res.stderr)
		}
		go io.Copy(io.Discard, stdoutR)
		s.Bind(root)
		if _, err := stdinW.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		stdinW.Close()
		res := <-done
		want := "PermissionError\nbound\n['in.txt', 'out.txt']\n"
		if res.exit != 0 || res.stdout != want {
			t.Fatalf("exit %d stdout %q, want %q\nstderr: %s", res.exit, res.stdout, want, res.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "written" {
			t.Fatalf("host sees %q", b)
		}
	})
}
