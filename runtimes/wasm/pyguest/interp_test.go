package pyguest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

func TestCells(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)

	// The cells run in order in one context: later ones see earlier state.
	cells := []struct {
		name, code             string
		result, stdout, stderr string
		ename                  string
	}{
		{name: "assignment has no result", code: "x = 41"},
		{name: "state survives", code: "x + 1", result: "42"},
		{name: "trailing expression after statements", code: "y = [x]\ny * 2", result: "[41, 41]"},
		{name: "None gives no result", code: "None"},
		{name: "call returning None", code: "print('hi')", stdout: "hi\n"},
		{name: "stderr", code: "import sys\nprint('oops', file=sys.stderr)", stderr: "oops\n"},
		{name: "repr of str", code: "'a' + 'b'", result: "'ab'"},
		{name: "functions persist", code: "def f(n):\n    return n * 2", result: ""},
		{name: "call persisted function", code: "f(21)", result: "42"},
		{name: "underscore holds last result", code: "_", result: "42"},
		{name: "input sees EOF", code: "input()", ename: "EOFError"},
		{name: "exception", code: "1/0", ename: "ZeroDivisionError"},
		{name: "state survives exceptions", code: "x", result: "41"},
		{name: "sys.exit is an error, not a death", code: "import sys; sys.exit(3)", ename: "SystemExit"},
		{name: "still alive", code: "x", result: "41"},
		{name: "main module", code: "__name__", result: "'__main__'"},
		{name: "stdout and result", code: "print(1)\n2", stdout: "1\n", result: "2"},
		{name: "time.sleep works", code: "import time\nt = time.monotonic()\ntime.sleep(0.2)\ntime.monotonic() - t >= 0.2", result: "True"},
		{name: "sleep type check", code: "time.sleep('x')", ename: "TypeError"},
	}
	for _, c := range cells {
		t.Run(c.name, func(t *testing.T) {
			rec, xerr := run(t, it, c.code)
			stdout, stderr, _ := rec.out()
			if got := plain(t, rec); got != c.result {
				t.Errorf("result %q, want %q", got, c.result)
			}
			if stdout != c.stdout || stderr != c.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", stdout, stderr, c.stdout, c.stderr)
			}
			gotName := ""
			if xerr != nil {
				gotName = xerr.EName
			}
			if gotName != c.ename {
				t.Errorf("error %+v, want ename %q", xerr, c.ename)
			}
		})
	}
}

func TestExceptionTraceback(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)

	run(t, it, "def boom():\n    raise ValueError('bad value')")
	_, xerr := run(t, it, "x = 1\nboom()")
	if xerr == nil {
		t.Fatal("no error")
	}
	if xerr.EName != "ValueError" || xerr.EValue != "bad value" {
		t.Errorf("got %s: %s", xerr.EName, xerr.EValue)
	}
	tb := strings.Join(xerr.Traceback, "")
	for _, want := range []string{"Traceback (most recent call last)", "<cell-2>", "line 2", "boom()", "<cell-1>", "raise ValueError", "ValueError: bad value"} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	for _, bad := range []string{"<string>", "exec(", "_Kernel"} {
		if strings.Contains(tb, bad) {
			t.Errorf("traceback shows driver frame %q:\n%s", bad, tb)
		}
	}
}

func TestSyntaxError(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)

	rec, xerr := run(t, it, "x = 1\ndef (:")
	if xerr == nil || xerr.EName != "SyntaxError" {
		t.Fatalf("got %+v, want SyntaxError", xerr)
	}
	tb := strings.Join(xerr.Traceback, "")
	if !strings.Contains(tb, "<cell-1>") || strings.Contains(tb, "Traceback") {
		t.Errorf("traceback:\n%s", tb)
	}
	if got := plain(t, rec); got != "" {
		t.Errorf("result %q", got)
	}
	// Nothing of a cell with a syntax error runs.
	if _, xerr := run(t, it, "x"); xerr == nil || xerr.EName != "NameError" {
		t.Errorf("x after syntax error: %+v", xerr)
	}
}

func TestRichResult(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)

	rec, xerr := run(t, it, `
class Rich:
    def __repr__(self): return "Rich()"
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_png_(self): return b"\x89PNG"
display(1, "two")
Rich()`)
	if xerr != nil {
		t.Fatal(xerr)
	}
	_, _, res := rec.out()
	if len(res) != 3 {
		t.Fatalf("results %v", res)
	}
	if res[0]["text/plain"] != "1" || res[1]["text/plain"] != "'two'" {
		t.Errorf("display results %v", res[:2])
	}
	want := map[string]string{"text/plain": "Rich()", "text/html": "<b>rich</b>", "image/png": "iVBORw=="}
	if fmt.Sprint(res[2]) != fmt.Sprint(want) {
		t.Errorf("bundle %v, want %v", res[2], want)
	}
}

func TestStreaming(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)

	rec := newRecorder()
	done := make(chan error, 1)
	go func() {
		_, err := it.Run(context.Background(), "import time\nprint('early', end='')\ntime.sleep(3)\nprint('late')", rec)
		done <- err
	}()
	select {
	case <-rec.firstOut:
	case err := <-done:
		t.Fatalf("Run returned (%v) before any output was streamed", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no output")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) right after the early print", err)
	default:
	}
	if stdout, _, _ := rec.out(); stdout != "early" {
		t.Errorf("stdout so far %q", stdout)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if stdout, _, _ := rec.out(); stdout != "earlylate\n" {
		t.Errorf("stdout %q", stdout)
	}
}

// stopCases are the ways a running cell is stopped.
var stopCases = []struct {
	name string
	code string
	stop func(context.Context) (context.Context, context.CancelFunc)
	want error
}{
	{
		name: "busy loop hits deadline", code: "while True: pass", want: execd.ErrTimeout,
		stop: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		},
	},
	{
		name: "sleep hits deadline", code: "import time\ntime.sleep(600)", want: execd.ErrTimeout,
		stop: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		},
	},
	{
		name: "client interrupt", code: "while True: pass", want: execd.ErrInterrupted,
		stop: func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(ctx)
			time.AfterFunc(time.Second, func() { cancel(fmt.Errorf("client: %w", execd.ErrInterrupted)) })
			return ctx, func() { cancel(nil) }
		},
	},
}

// TestStopKeepsState: in the source build a timeout or an interrupt raises
// TimeoutError / KeyboardInterrupt in the cell, and the context's variables
// survive.
func TestStopKeepsState(t *testing.T) {
	m := newManager(t, Options{})
	root, _ := newRoot(t)
	for _, c := range stopCases {
		t.Run(c.name, func(t *testing.T) {
			it := newInterp(t, m, root, "/", 0)
			run(t, it, "state = 1\ncaught = []")
			ctx, cancel := c.stop(context.Background())
			defer cancel()
			// (CPython 3.11 does not catch an exception raised at the back
			// edge of a loop that is the first statement of its try block,
			// natively too: hence the n = 0.)
			xerr, err := it.Run(ctx, "try:\n    n = 0\n"+indent(c.code)+"\nexcept BaseException as e:\n    caught.append(type(e).__name__)\n    raise", newRecorder())
			if !errors.Is(err, c.want) || errors.Is(err, execd.ErrContextLost) || xerr != nil {
				t.Fatalf("got %v, %v; want %v without ErrContextLost", xerr, err, c.want)
			}
			if got := plain(t, mustRun(t, it, "state, caught")); got != wantCaught(c.want) {
				t.Errorf("state, caught = %s, want %s", got, wantCaught(c.want))
			}
			// No late interrupt lands in the cells that follow.
			for range 20 {
				mustRun(t, it, "n = 0\nfor i in range(2000): n += i")
			}
		})
	}
	t.Run("cell catches the interrupt and goes on", func(t *testing.T) {
		it := newInterp(t, m, root, "/", 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		code := "try:\n    n = 0\n    while True: n += 1\nexcept TimeoutError:\n    after = 'handled'"
		if _, err := it.Run(ctx, code, newRecorder()); !errors.Is(err, execd.ErrTimeout) || errors.Is(err, execd.ErrContextLost) {
			t.Fatalf("err %v", err)
		}
		if got := plain(t, mustRun(t, it, "after")); got != "'handled'" {
			t.Errorf("after = %s", got)
		}
	})
	t.Run("a guest that ignores interrupts is destroyed", func(t *testing.T) {
		it := newInterp(t, m, root, "/", 0)
		run(t, it, "state = 1")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		code := "while True:\n    try:\n        n = 0\n        while True: n += 1\n    except BaseException:\n        pass"
		_, err := it.Run(ctx, code, newRecorder())
		if !errors.Is(err, execd.ErrTimeout) || !errors.Is(err, execd.ErrContextLost) ||
			!strings.Contains(err.Error(), "did not stop when interrupted") {
			t.Fatalf("err %v, want a timeout that says the guest ignored it and lost the context", err)
		}
		if _, xerr := run(t, it, "state"); xerr == nil || xerr.EName != "NameError" {
			t.Errorf("state after kill: %+v, want NameError", xerr)
		}
	})
	// A loop in C never reaches the eval breaker: the loop guard stops it
	// (engine.Guard), in well under the minutes the loop would take.
	t.Run("a guest stuck in C is destroyed", func(t *testing.T) {
		it := newInterp(t, m, root, "/", 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := it.Run(ctx, "sum(range(10**15))", newRecorder())
		if !errors.Is(err, execd.ErrTimeout) || !errors.Is(err, execd.ErrContextLost) {
			t.Fatalf("err %v, want a timeout that lost the context", err)
		}
		if took := time.Since(start); took > time.Minute {
			t.Errorf("the kill took %v", took)
		}
		if got := plain(t, mustRun(t, it, "1 + 1")); got != "2" {
			t.Errorf("a cell after the kill: %s, want 2", got)
		}
	})
}

func indent(code string) string {
	return "    " + strings.ReplaceAll(code, "\n", "\n    ")
}

func wantCaught(err error) string {
	if errors.Is(err, execd.ErrTimeout) {
		return "(1, ['TimeoutError'])"
	}
	return "(1, ['KeyboardInterrupt'])"
}

// TestStopAndRecoverNPM: in the npm build a stop destroys the context.
func TestStopAndRecoverNPM(t *testing.T) {
	m := newNPMManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)

	cases := []struct {
		name  string
		code  string
		stop  func(context.Context) (context.Context, context.CancelFunc)
		want  error
		limit time.Duration
	}{
		{
			name: "busy loop hits deadline", code: "while True: pass", want: execd.ErrTimeout,
			stop: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Second)
			},
		},
		{
			name: "sleep hits deadline", code: "import time\ntime.sleep(600)", want: execd.ErrTimeout,
			stop: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Second)
			},
		},
		{
			name: "client interrupt", code: "while True: pass", want: execd.ErrInterrupted,
			stop: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(ctx)
				time.AfterFunc(time.Second, func() { cancel(fmt.Errorf("client: %w", execd.ErrInterrupted)) })
				return ctx, func() { cancel(nil) }
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := newInterp(t, m, root, "/", 0)
			run(t, it, "state = 1")
			ctx, cancel := c.stop(context.Background())
			defer cancel()
			start := time.Now()
			xerr, err := it.Run(ctx, c.code, newRecorder())
			if !errors.Is(err, c.want) || !errors.Is(err, execd.ErrContextLost) || xerr != nil {
				t.Fatalf("got %v, %v; want %v and ErrContextLost", xerr, err, c.want)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("stopping took %v", d)
			}
			// The next Run gets a fresh interpreter.
			if _, xerr := run(t, it, "state"); xerr == nil || xerr.EName != "NameError" {
				t.Errorf("state after kill: %+v, want NameError", xerr)
			}
			if rec, _ := run(t, it, "1+1"); plain(t, rec) != "2" {
				t.Errorf("1+1 after kill = %q", plain(t, rec))
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 128<<20)

	run(t, it, "keep = 'still here'")
	for _, code := range []string{
		"x = bytearray(10**9)",
		"x = [0]*10**9",
		"x = bytearray(200 * 2**20)",
		"chunks = []\nwhile True: chunks.append(bytearray(2**20))",
	} {
		t.Run(code, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			xerr, err := it.Run(ctx, code, newRecorder())
			switch {
			case err != nil && errors.Is(err, execd.ErrContextLost):
				t.Logf("context lost: %v", err)
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			case xerr == nil:
				t.Fatal("allocation succeeded beyond the limit")
			case xerr.EName != "MemoryError":
				t.Fatalf("got %s: %s", xerr.EName, xerr.EValue)
			default:
				// The interpreter survived with its state.
				if rec, _ := run(t, it, "keep"); plain(t, rec) != "'still here'" {
					t.Errorf("state after MemoryError: %q", plain(t, rec))
				}
			}
			// Whatever happened, the context is usable afterwards.
			run(t, it, "chunks = None; x = None")
			if rec, _ := run(t, it, "1+1"); plain(t, rec) != "2" {
				t.Errorf("1+1 after memory bomb = %q", plain(t, rec))
			}
		})
	}
}

func TestOutputLimit(t *testing.T) {
	const limit = 1 << 20
	m := newManager(t, Options{PoolSize: 1, OutputLimitBytes: limit})
	root, _ := newRoot(t)

	for _, code := range []string{
		"while True: print('x' * 1000)",
		"import sys\nwhile True: sys.stderr.write('y' * 4096)",
		"'z' * (2 * 2**20)",
	} {
		t.Run(code, func(t *testing.T) {
			it := newInterp(t, m, root, "/", 0)
			rec := newRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := it.Run(ctx, code, rec)
			if !errors.Is(err, execd.ErrOutputLimit) || !errors.Is(err, execd.ErrContextLost) {
				t.Fatalf("err %v, want ErrOutputLimit and ErrContextLost", err)
			}
			stdout, stderr, res := rec.out()
			if n := len(stdout) + len(stderr); n > limit {
				t.Errorf("%d bytes of output passed a %d limit", n, limit)
			}
			if len(res) != 0 {
				t.Errorf("oversized result delivered")
			}
			if rec, _ := run(t, it, "1+1"); plain(t, rec) != "2" {
				t.Errorf("1+1 after flood = %q", plain(t, rec))
			}
		})
	}
}

func TestFilesAndCwd(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, dir := newRoot(t)
	if err := os.MkdirAll(filepath.Join(dir, "work", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work", "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work", "helper.py"), []byte("VALUE = 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	it := newInterp(t, m, root, "/work", 0)

	cases := []struct{ name, code, result string }{
		{name: "cwd", code: "import os; os.getcwd()", result: "'/work'"},
		{name: "home", code: "os.environ['HOME']", result: "'/work'"},
		{name: "read host file", code: "open('in.txt').read()", result: "'from host'"},
		{name: "write relative", code: "open('out.txt', 'w').write('from python')", result: "11"},
		{name: "write absolute", code: "open('/work/sub/abs.txt', 'w').write('abs')", result: "3"},
		{name: "import from cwd", code: "import helper; helper.VALUE", result: "7"},
		{name: "listdir root", code: "sorted(os.listdir('/'))", result: "['work']"},
		{name: "cannot escape", code: "import glob\ntry:\n    r = glob.glob('/../*') + glob.glob('../../*')\nexcept OSError:\n    r = []\nsorted(set(r) - {'/../work', '../../work'})", result: "[]"},
		{name: "parent of root", code: "try:\n    open('../../../etc/passwd')\nexcept OSError as e:\n    r = type(e).__name__\nr", result: "'PermissionError'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, xerr := run(t, it, c.code)
			if xerr != nil {
				t.Fatalf("%s: %s\n%s", xerr.EName, xerr.EValue, strings.Join(xerr.Traceback, ""))
			}
			if got := plain(t, rec); got != c.result {
				t.Errorf("got %s, want %s", got, c.result)
			}
		})
	}
	for name, want := range map[string]string{"work/out.txt": "from python", "work/sub/abs.txt": "abs"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}

	if _, err := m.NewInterpreter(context.Background(), root, "/missing", 0, nil); err == nil {
		t.Error("NewInterpreter with a missing cwd succeeded")
	}
}

func TestParallelContexts(t *testing.T) {
	m := newManager(t, Options{PoolSize: 2})
	const n = 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			root, _ := newRoot(t)
			it, err := m.NewInterpreter(context.Background(), root, "/", 0, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer it.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			for j, code := range []string{fmt.Sprintf("me = %d", i), "open('id', 'w').write(str(me))", "me * 10 + int(open('id').read())"} {
				rec := newRecorder()
				xerr, err := it.Run(ctx, code, rec)
				if err != nil || xerr != nil {
					t.Errorf("context %d cell %d: %v %+v", i, j, err, xerr)
					return
				}
				if j == 2 {
					if got, want := plain(t, rec), fmt.Sprint(i*10+i); got != want {
						t.Errorf("context %d: %s, want %s", i, got, want)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestBusyAndClose(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it, err := m.NewInterpreter(context.Background(), root, "/", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	done := make(chan error, 1)
	go func() {
		_, err := it.Run(context.Background(), "print('go')\nwhile True: pass", rec)
		done <- err
	}()
	<-rec.firstOut
	if _, err := it.Run(context.Background(), "1", newRecorder()); !errors.Is(err, execd.ErrBusy) {
		t.Errorf("concurrent Run: %v, want ErrBusy", err)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, execd.ErrContextLost) {
			t.Errorf("Run after Close: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not stop the running cell")
	}
	if _, err := it.Run(context.Background(), "1", newRecorder()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run on closed interpreter: %v", err)
	}
	if err := it.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestManagerClose(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)
	run(t, it, "x = 1")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := it.Run(context.Background(), "x", newRecorder()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Manager.Close: %v", err)
	}
	if _, err := m.NewInterpreter(context.Background(), root, "/", 0, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("NewInterpreter after Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestSourceBuildModules: the stdlib modules with C parts built from Debian
// source (zlib, sqlite3) work, also on files in the workspace, and clones of
// the image do not share random state.
func TestSourceBuildModules(t *testing.T) {
	m := newManager(t, Options{})
	root, dir := newRoot(t)
	it := newInterp(t, m, root, "/", 0)
	for _, c := range []struct{ code, want string }{
		{"import zlib; len(zlib.compress(b'a' * 10000)) < 100", "True"},
		{"import gzip; gzip.decompress(gzip.compress(b'hybox'))", "b'hybox'"},
		{"import sqlite3; db = sqlite3.connect(':memory:'); db.execute('select 6*7').fetchone()", "(42,)"},
		{"f = sqlite3.connect('/data.db'); f.execute('create table t(x)'); f.execute('insert into t values (1)'); f.commit(); f.close(); 1", "1"},
		{"sqlite3.connect('/data.db').execute('select count(*) from t').fetchone()", "(1,)"},
		{"import hashlib; hashlib.sha256(b'').hexdigest()[:8]", "'e3b0c442'"},
		{"import decimal; str(decimal.Decimal(1) / 7)[:6]", "'0.1428'"},
	} {
		rec, xerr := run(t, it, c.code)
		if xerr != nil {
			t.Fatalf("%s: %s: %s", c.code, xerr.EName, xerr.EValue)
		}
		if got := plain(t, rec); got != c.want {
			t.Errorf("%s = %s, want %s", c.code, got, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data.db")); err != nil {
		t.Errorf("the database is not in the workspace: %v", err)
	}
	other := newInterp(t, m, root, "/", 0)
	a := plain(t, mustRun(t, it, "import random; random.random()"))
	b := plain(t, mustRun(t, other, "import random; random.random()"))
	if a == b {
		t.Errorf("two contexts drew the same random number %s", a)
	}
}
