package jsguest

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
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// recorder is an execd.Output that keeps every event in order.
type recorder struct {
	mu     sync.Mutex
	events []string // "out:...", "err:...", "result:..."
	bytes  int
}

func (r *recorder) Stdout(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bytes += len(p)
	if len(r.events) < 1000 {
		r.events = append(r.events, "out:"+string(p))
	}
}

func (r *recorder) Stderr(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bytes += len(p)
	r.events = append(r.events, "err:"+string(p))
}

func (r *recorder) Result(b map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "result:"+b["text/plain"])
}

// result returns the last text/plain result ("" when none).
func (r *recorder) result() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if s, ok := strings.CutPrefix(r.events[i], "result:"); ok {
			return s
		}
	}
	return ""
}

func (r *recorder) stdout() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		if s, ok := strings.CutPrefix(e, "out:"); ok {
			b.WriteString(s)
		}
	}
	return b.String()
}

func newManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	opts.Engine = wasmtest.Engine(t)
	m, err := NewManager(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newInterp(t testing.TB, m *Manager, root *os.Root, memLimit int64) execd.Interpreter {
	t.Helper()
	it, err := m.NewInterpreter(context.Background(), root, "/", memLimit, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = it.Close() })
	return it
}

// run runs code with a generous deadline and fails the test on a Go error.
func run(t *testing.T, it execd.Interpreter, code string) (*recorder, *execd.ExecError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &recorder{}
	ee, err := it.Run(ctx, code, rec)
	if err != nil {
		t.Fatalf("Run(%q): %v", code, err)
	}
	return rec, ee
}

func TestStateAcrossRuns(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	steps := []struct {
		name, code, want string
	}{
		{"declare", "var a = 1; let b = 2; const c = 3; function f() { return 4 } class K { v() { return 5 } }", ""},
		{"read back", "a + b + c + f() + new K().v()", "15"},
		{"mutate let", "b = 20; b", "20"},
		{"top-level await", "let d = await Promise.resolve(6); d", "6"},
		{"await keeps declarations", "d + b", "26"},
		{"function after await", "await 0; function g() { return 7 }", ""},
		{"function persists", "g()", "7"},
	}
	for _, s := range steps {
		rec, ee := run(t, it, s.code)
		if ee != nil {
			t.Fatalf("%s: exception %+v", s.name, ee)
		}
		if s.want != "" && rec.result() != s.want {
			t.Errorf("%s: result %q, want %q", s.name, rec.result(), s.want)
		}
	}
	// Re-declaring a lexical binding is an error, as in a browser console.
	if _, ee := run(t, it, "let b = 1"); ee == nil || ee.EName != "SyntaxError" {
		t.Errorf("redeclaring let: got %+v, want SyntaxError", ee)
	}
}

func TestResultRendering(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	tests := []struct {
		name, code, want string
		none             bool
	}{
		{name: "number", code: "1 + 1", want: "2"},
		{name: "negative zero", code: "-0", want: "-0"},
		{name: "string quoted", code: "'abc'", want: "'abc'"},
		{name: "string with quote", code: `"it's"`, want: `"it's"`},
		{name: "bigint", code: "10n ** 20n", want: "100000000000000000000n"},
		{name: "null", code: "null", want: "null"},
		{name: "undefined gives no result", code: "undefined", none: true},
		{name: "declaration gives no result", code: "var zz = 1", none: true},
		{name: "array", code: "[1, 'two', [3]]", want: "[ 1, 'two', [ 3 ] ]"},
		{name: "object", code: "({a: 1, 'b-c': 'x', d: {e: {f: {g: 1}}}})", want: "{ a: 1, 'b-c': 'x', d: { e: { f: [Object] } } }"},
		{name: "empty object", code: "({})", want: "{}"},
		{name: "map", code: "new Map([['k', 1]])", want: "Map(1) { 'k' => 1 }"},
		{name: "set", code: "new Set([1, 2])", want: "Set(2) { 1, 2 }"},
		{name: "function", code: "(function foo() {})", want: "[Function: foo]"},
		{name: "class", code: "(class Foo {})", want: "[class Foo]"},
		{name: "instance", code: "new (class Pt { constructor() { this.x = 1 } })()", want: "Pt { x: 1 }"},
		{name: "date", code: "new Date(0)", want: "1970-01-01T00:00:00.000Z"},
		{name: "regexp", code: "/a+/g", want: "/a+/g"},
		{name: "symbol", code: "Symbol('s')", want: "Symbol(s)"},
		{name: "circular", code: "(() => { const o = {n: 1}; o.self = o; return o })()", want: "<ref *1> { n: 1, self: [Circular *1] }"},
		{name: "typed array", code: "new Uint8Array([1, 2])", want: "Uint8Array(2) [ 1, 2 ]"},
		{name: "promise awaited", code: "Promise.resolve(42)", want: "42"},
		{name: "async function awaited", code: "(async () => { await null; return 'done' })()", want: "'done'"},
		{name: "pending promise", code: "new Promise(() => {})", want: "Promise { <pending> }"},
		{name: "long array breaks lines", code: "Array.from({length: 30}, (_, i) => i * 1000)", want: "[\n      0,  1000,  2000,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, ee := run(t, it, tt.code)
			if ee != nil {
				t.Fatalf("exception %+v", ee)
			}
			got := rec.result()
			if tt.none {
				if got != "" {
					t.Errorf("result %q, want none", got)
				}
				return
			}
			if !strings.HasPrefix(got, tt.want) || (!strings.Contains(tt.want, "\n") && got != tt.want) {
				t.Errorf("result %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConsoleStreamingOrder(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	rec, ee := run(t, it, `
		console.log('one', 2, {three: 3});
		console.error('warn-ish');
		console.info('%s=%d', 'x', 42);
		setTimeout(() => console.log('later'), 20);
		setTimeout(() => console.log('sooner'), 5);
		Promise.resolve().then(() => console.debug('micro'));
		console.warn(new Error('e').message);
		'end'`)
	if ee != nil {
		t.Fatalf("exception %+v", ee)
	}
	want := []string{
		"out:one 2 { three: 3 }\n", "err:warn-ish\n", "out:x=42\n", "err:e\n",
		"out:micro\n", "out:sooner\n", "out:later\n", "result:'end'",
	}
	if fmt.Sprint(rec.events) != fmt.Sprint(want) {
		t.Errorf("events\n got %q\nwant %q", rec.events, want)
	}
}

func TestExceptions(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	tests := []struct {
		name, code, ename, evalue, frame string
	}{
		{"type error", "function boom() { null.x }\nboom()", "TypeError", "cannot read property 'x' of null", "at boom (<repl>:1"},
		{"thrown error", "throw new RangeError('too far')", "RangeError", "too far", "<repl>:1"},
		{"custom error", "class MyErr extends Error { constructor(m) { super(m); this.name = 'MyErr' } }\nthrow new MyErr('mine')", "MyErr", "mine", "<repl>:2"},
		{"syntax error", "let = = 1", "SyntaxError", "", ""},
		{"thrown value", "throw 42", "Uncaught", "42", ""},
		{"rejected await", "await Promise.reject(new Error('async fail'))", "Error", "async fail", ""},
		{"rejected promise result", "Promise.reject(new TypeError('nope'))", "TypeError", "nope", ""},
		{"unhandled rejection", "(async () => { throw new Error('lost') })(); 1", "Error", "lost", ""},
		{"timer callback", "setTimeout(() => { throw new Error('in timer') }, 1)", "Error", "in timer", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ee := run(t, it, tt.code)
			if ee == nil {
				t.Fatal("no exception")
			}
			if ee.EName != tt.ename || (tt.evalue != "" && ee.EValue != tt.evalue) {
				t.Errorf("got %s: %s, want %s: %s", ee.EName, ee.EValue, tt.ename, tt.evalue)
			}
			if len(ee.Traceback) == 0 || !strings.HasPrefix(ee.Traceback[0], tt.ename) {
				t.Errorf("traceback %q should start with %s", ee.Traceback, tt.ename)
			}
			if tt.frame != "" && !strings.Contains(strings.Join(ee.Traceback, "\n"), tt.frame) {
				t.Errorf("traceback %q lacks %q", ee.Traceback, tt.frame)
			}
			if strings.Contains(strings.Join(ee.Traceback, "\n"), "prelude") {
				t.Errorf("traceback shows prelude frames: %q", ee.Traceback)
			}
		})
	}
	// The context is still usable.
	if rec, ee := run(t, it, "'alive'"); ee != nil || rec.result() != "'alive'" {
		t.Errorf("after exceptions: %v %q", ee, rec.result())
	}
}

func TestInterruptAndRecover(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	run(t, it, "var kept = 'still here'")
	tests := []struct {
		name    string
		code    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{"deadline", "while (true) {}", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, execd.ErrTimeout},
		{"catch cannot swallow", "for (;;) { try { while (true) {} } catch (e) {} }", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, execd.ErrTimeout},
		{"interval never ends", "setInterval(() => {}, 5)", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, execd.ErrTimeout},
		{"client interrupt", "while (true) {}", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(150*time.Millisecond, func() { cancel(execd.ErrInterrupted) })
			return ctx, func() { cancel(nil) }
		}, execd.ErrInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			ee, err := it.Run(ctx, tt.code, &recorder{})
			if ee != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, %v; want %v", ee, err, tt.wantErr)
			}
			if errors.Is(err, execd.ErrContextLost) {
				t.Errorf("context was lost: %v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("stopping took %v", d)
			}
			rec, ee := run(t, it, "kept")
			if ee != nil || rec.result() != "'still here'" {
				t.Errorf("after interrupt: %+v %q", ee, rec.result())
			}
		})
	}
}

// TestStuckInC: a call that loops in C never polls QuickJS's interrupt
// hook (Array.prototype.join over four billion holes would take minutes);
// the loop guard destroys the guest after killGrace, the error says so, and
// the context starts afresh.
func TestStuckInC(t *testing.T) {
	m := newManager(t, Options{})
	if !m.mod.Guarded {
		t.Fatal("QuickJS is not guarded (engine.Guard refused it or it did not compile)")
	}
	it := newInterp(t, m, nil, 0)
	run(t, it, "var kept = 1")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	ee, err := it.Run(ctx, "new Array(4e9).join('').length", &recorder{})
	if ee != nil || !errors.Is(err, execd.ErrTimeout) || !errors.Is(err, execd.ErrContextLost) ||
		!strings.Contains(err.Error(), "did not stop when interrupted") {
		t.Fatalf("got %v, %v; want a timeout that says the guest ignored it and lost the context", ee, err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the kill took %v", took)
	}
	if _, ee := run(t, it, "kept"); ee == nil || ee.EName != "ReferenceError" {
		t.Errorf("kept after the kill: %+v, want ReferenceError (a fresh context)", ee)
	}
	if rec, ee := run(t, it, "1 + 1"); ee != nil || rec.result() != "2" {
		t.Errorf("1 + 1 after the kill: %+v %q", ee, rec.result())
	}
}

// TestCloseStopsStuckRun: Close, also when it races a Run that is just
// starting a fresh vm (its context was lost), stops a run stuck in C at
// once (not at the run's timeout, ten minutes here), and the run reports
// ErrClosed.
func TestCloseStopsStuckRun(t *testing.T) {
	m := newManager(t, Options{})
	for i := range 40 {
		it := newInterp(t, m, nil, 0)
		ip := it.(*interpreter)
		ip.vm.close() // lost: the next Run starts a fresh vm
		ip.vm = nil
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err := it.Run(ctx, "new Array(4e9).join('').length", &recorder{})
			done <- err
		}()
		if i%2 == 1 {
			time.Sleep(time.Duration(i) * 50 * time.Microsecond) // some Closes land mid-run
		}
		closed := make(chan struct{})
		go func() { _ = it.Close(); close(closed) }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("try %d: the run ended with %v, want ErrClosed", i, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("try %d: the run still runs a minute after Close", i)
		}
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatalf("try %d: Close has not returned after a minute", i)
		}
	}
}

// TestRenderIsWatched: rendering a result runs the guest's code (here a
// proxy's ownKeys trap that never returns); the run's timeout stops it
// like any other code, and the context keeps its variables.
func TestRenderIsWatched(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	run(t, it, "var kept = 'still here'")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := it.Run(ctx, "new Proxy({}, { ownKeys() { for (;;) {} } })", &recorder{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, execd.ErrTimeout) || errors.Is(err, execd.ErrContextLost) {
			t.Fatalf("err %v, want a timeout that keeps the context", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("rendering the result still runs a minute after its timeout")
	}
	if rec, ee := run(t, it, "kept"); ee != nil || rec.result() != "'still here'" {
		t.Errorf("kept after the timeout: %+v %q", ee, rec.result())
	}
}

func TestMemoryBomb(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 16<<20)
	run(t, it, "var kept = 1")
	_, ee := run(t, it, "let hog = []; while (true) hog.push('x'.repeat(1000) + hog.length)")
	if ee == nil || ee.EName != "InternalError" || !strings.Contains(ee.EValue, "out of memory") {
		t.Fatalf("got %+v, want InternalError: out of memory", ee)
	}
	// A catch block cannot swallow it, and the context survives.
	_, ee = run(t, it, "try { const a = []; while (true) a.push(new Array(1e5).fill(1)) } catch (e) { 'swallowed' }")
	if ee == nil || !strings.Contains(ee.EValue, "out of memory") {
		t.Fatalf("caught OOM: %+v", ee)
	}
	if rec, ee := run(t, it, "kept + 1"); ee != nil || rec.result() != "2" {
		t.Errorf("after OOM: %+v %q", ee, rec.result())
	}
}

func TestOutputLimit(t *testing.T) {
	m := newManager(t, Options{OutputLimitBytes: 64 << 10})
	it := newInterp(t, m, nil, 0)
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ee, err := it.Run(ctx, "var n = 0; while (true) { try { console.log('flood line', n++) } catch (e) {} }", rec)
	if ee != nil || !errors.Is(err, execd.ErrOutputLimit) {
		t.Fatalf("got %+v, %v; want ErrOutputLimit", ee, err)
	}
	if rec.bytes != 64<<10 {
		t.Errorf("delivered %d bytes, want exactly the limit %d", rec.bytes, 64<<10)
	}
	// The limit is per run and the context survives.
	if rec, ee := run(t, it, "console.log('ok'); n > 100"); ee != nil || rec.result() != "true" || rec.stdout() != "ok\n" {
		t.Errorf("after flood: %+v %q %q", ee, rec.result(), rec.stdout())
	}
}

func TestFilesystem(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("héllo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m := newManager(t, Options{})
	it := newInterp(t, m, root, 0)

	ok := []struct{ name, code, want string }{
		{"read text", "require('fs').readFileSync('/in.txt', 'utf8')", "'héllo\\n'"},
		{"read buffer", "require('fs').readFileSync('in.txt').toString()", "'héllo\\n'"},
		{"write and read", "const fs = require('fs'); fs.mkdirSync('/a/b', {recursive: true}); fs.writeFileSync('/a/b/c.txt', 'one'); fs.appendFileSync('a/b/c.txt', '+two'); fs.readFileSync('/a/b/c.txt', 'utf8')", "'one+two'"},
		{"binary write", "fs.writeFileSync('bin', new Uint8Array([0, 255, 128])); Array.from(fs.readFileSync('bin'))", "[ 0, 255, 128 ]"},
		{"exists", "[fs.existsSync('/in.txt'), fs.existsSync('/nope'), fs.existsSync('/../in.txt')]", "[ true, false, true ]"},
		{"readdir", "fs.readdirSync('/a')", "[ 'b' ]"},
		{"readdir types", "fs.readdirSync('/', {withFileTypes: true}).filter(d => d.isDirectory()).map(d => d.name)", "[ 'a' ]"},
		{"stat", "const st = fs.statSync('/a/b/c.txt'); [st.size, st.isFile(), st.isDirectory()]", "[ 7, true, false ]"},
		{"chdir and relative", "process.chdir('/a'); [process.cwd(), fs.readFileSync('b/c.txt', 'utf8')]", "[ '/a', 'one+two' ]"},
		{"missing file code", "try { fs.readFileSync('/missing') } catch (e) { e.code }", "'ENOENT'"},
	}
	for _, tt := range ok {
		rec, ee := run(t, it, tt.code)
		if ee != nil {
			t.Fatalf("%s: %+v", tt.name, ee)
		}
		if rec.result() != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, rec.result(), tt.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a", "b", "c.txt")); err != nil || string(b) != "one+two" {
		t.Errorf("file on the host: %q, %v", b, err)
	}

	escapes := []struct{ name, code string }{
		{"dot-dot", "require('fs').readFileSync('/../../../../" + strings.TrimPrefix(filepath.Join(outside, "secret"), "/") + "', 'utf8')"},
		{"symlink to file outside", "require('fs').readFileSync('/link', 'utf8')"},
		{"symlink to dir outside", "require('fs').readFileSync('/dirlink/secret', 'utf8')"},
		{"write through symlink", "require('fs').writeFileSync('/dirlink/new', 'x')"},
		{"host absolute path", "require('fs').readFileSync('" + filepath.Join(outside, "secret") + "', 'utf8')"},
	}
	for _, tt := range escapes {
		rec, ee := run(t, it, tt.code)
		if ee == nil || strings.Contains(rec.result(), "s3cret") {
			t.Errorf("%s: not refused: result %q", tt.name, rec.result())
			continue
		}
		if !strings.Contains(ee.EValue, "ENOENT") && !strings.Contains(ee.EValue, "EACCES") {
			t.Errorf("%s: unexpected error %+v", tt.name, ee)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("a file was created outside the root")
	}
}

func TestGlobals(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	tests := []struct{ name, code, want string }{
		{"text codec", "new TextDecoder().decode(new TextEncoder().encode('h€llo 😀'))", "'h€llo 😀'"},
		{"buffer", "Buffer.from('hi').toString('hex') + Buffer.from('aGk=', 'base64').toString()", "'6869hi'"},
		{"path", "require('path').join('/a/b', '../c', 'd.js')", "'/a/c/d.js'"},
		{"util.format", "require('util').format('%s:%d', 'a', 1)", "'a:1'"},
		{"process", "[typeof process.env, process.argv.length > 0, process.platform]", "[ 'object', true, 'linux' ]"},
		{"random differs per VM", "typeof Math.random()", "'number'"},
	}
	for _, tt := range tests {
		rec, ee := run(t, it, tt.code)
		if ee != nil {
			t.Fatalf("%s: %+v", tt.name, ee)
		}
		if rec.result() != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, rec.result(), tt.want)
		}
	}
	// Clones of the same image must not share Math.random's sequence.
	other := newInterp(t, m, nil, 0)
	a, _ := run(t, it, "Math.random()")
	b, _ := run(t, other, "Math.random()")
	if a.result() == b.result() {
		t.Errorf("two VMs drew the same random number %s", a.result())
	}
}

func TestProcessExitInRun(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	rec, ee := run(t, it, "console.log('before'); process.exit(3); console.log('after')")
	if ee == nil || ee.EName != "ProcessExit" || rec.stdout() != "before\n" {
		t.Errorf("got %+v, stdout %q", ee, rec.stdout())
	}
	if rec, ee := run(t, it, "1"); ee != nil || rec.result() != "1" {
		t.Errorf("after exit: %+v %q", ee, rec.result())
	}
}

func TestConcurrentInterpreters(t *testing.T) {
	m := newManager(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := m.NewInterpreter(context.Background(), nil, "/", 0, nil)
			if err != nil {
				errs <- err
				return
			}
			defer it.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := it.Run(ctx, fmt.Sprintf("var id = %d; function fib(n) { return n < 2 ? n : fib(n-1) + fib(n-2) }", i), &recorder{}); err != nil {
				errs <- err
				return
			}
			rec := &recorder{}
			ee, err := it.Run(ctx, "console.log(id); [id, fib(15)]", rec)
			if err != nil || ee != nil {
				errs <- fmt.Errorf("vm %d: %v %+v", i, err, ee)
				return
			}
			if want := fmt.Sprintf("[ %d, 610 ]", i); rec.result() != want || rec.stdout() != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("vm %d: result %q stdout %q", i, rec.result(), rec.stdout())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestClosed(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := it.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := it.Run(context.Background(), "1", &recorder{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewInterpreter(context.Background(), nil, "/", 0, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("NewInterpreter after Close: %v", err)
	}
}

func TestStackOverflow(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	run(t, it, "var kept = 5")
	_, ee := run(t, it, "function down(n) { return down(n + 1) + 1 } down(0)")
	if ee == nil || !strings.Contains(strings.ToLower(ee.EValue), "stack") {
		t.Fatalf("got %+v, want a stack overflow error", ee)
	}
	if rec, ee := run(t, it, "kept"); ee != nil || rec.result() != "5" {
		t.Errorf("after stack overflow: %+v %q", ee, rec.result())
	}
}

func TestLostInstanceIsReplaced(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	run(t, it, "var kept = 5")
	// Simulate a crashed guest: its wasm instance is gone.
	ip := it.(*interpreter)
	if err := ip.vm.mod.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ee, err := it.Run(context.Background(), "kept", &recorder{})
	if ee != nil || !errors.Is(err, execd.ErrContextLost) {
		t.Fatalf("got %+v, %v; want ErrContextLost", ee, err)
	}
	// The next run gets a fresh interpreter.
	rec, ee := run(t, it, "typeof kept")
	if ee != nil || rec.result() != "'undefined'" {
		t.Errorf("fresh interpreter: %+v %q", ee, rec.result())
	}
}
