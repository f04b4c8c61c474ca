package osbackend

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/pydriver"
)

// jsDriver is the javascript counterpart of the python driver: the same
// requests and frames, code run with node's vm module in one context.
//
//go:embed jsdriver.js
var jsDriver string

// startTimeout bounds an interpreter's start-up.
const startTimeout = 30 * time.Second

// maxFrameBytes bounds one control frame (a result's MIME bundle).
const maxFrameBytes = 64 << 20

// errInterpExited is returned by Run on an interpreter whose process ended.
var errInterpExited = errors.New("interpreter process exited")

// NewInterpreter implements execd.Executor: "python" runs python3 with the
// shared driver (internal/pydriver); "javascript" runs node with a vm
// driver, when node is installed; "java" a JShell driver (java.go) in the
// image's JDK; "go" builds and runs each cell with the image's go
// toolchain (golang.go).
//
// # Errors
// ErrUnknownLanguage for other languages or when the interpreter is not
// installed; when cwd does not exist or the interpreter fails to start.
func (b *Executor) NewInterpreter(ctx context.Context, language, cwd string) (execd.Interpreter, error) {
	var exe string
	var args []string
	switch language {
	case "python":
		p, err := b.lookPath(b.opts.Python)
		if err != nil {
			return nil, fmt.Errorf("%w: python: %s is not installed in this sandbox", execd.ErrUnknownLanguage, b.opts.Python)
		}
		exe, args = p, []string{"-u", "-c", pydriver.Source}
	case "javascript":
		p, err := b.lookPath(b.opts.Node)
		if err != nil {
			return nil, fmt.Errorf("%w: javascript: %s is not installed in this sandbox", execd.ErrUnknownLanguage, b.opts.Node)
		}
		exe, args = p, []string{"-e", jsDriver}
	case "java":
		if !b.javaAvailable() {
			return nil, fmt.Errorf("%w: java: %s with %s (a JDK) is not installed in this sandbox", execd.ErrUnknownLanguage, b.opts.Java, b.opts.JShell)
		}
		p, _ := b.lookPath(b.opts.Java)
		if _, err := b.hostDir(cwd); err != nil {
			return nil, err
		}
		a, err := b.javaArgs(ctx)
		if err != nil {
			return nil, err
		}
		exe, args = p, a
	case "go":
		return b.newGoInterpreter(ctx, cwd)
	default:
		return nil, fmt.Errorf("%w: %q (available: %v)", execd.ErrUnknownLanguage, language, b.Languages())
	}
	dir, err := b.hostDir(cwd)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = dir
	cmd.Env = b.environ(map[string]string{"PYTHONUNBUFFERED": "1"})
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("osbackend: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("osbackend: pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return nil, fmt.Errorf("osbackend: pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	pid, exitc, err := b.spawn(cmd, cmd.Start)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("osbackend: start %s: %w", language, err)
	}
	it := &interpreter{
		b: b, lang: language, pgid: pid, stdin: inW,
		ready: make(chan struct{}), exited: make(chan struct{}),
	}
	dm := &pydriver.Demuxer{
		Stdout:   func(p []byte) { it.output(p, false) },
		Frame:    it.onFrame,
		MaxFrame: maxFrameBytes,
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go it.read(outR, dm.Write, &readers)
	go it.read(errR, func(p []byte) (int, error) { it.output(p, true); return len(p), nil }, &readers)
	go func() {
		ws := <-exitc
		it.code = exitCode(ws)
		waitTimeout(&readers, time.Second) // let the last frames arrive
		close(it.exited)
	}()

	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-it.ready:
	case <-it.exited:
		it.mu.Lock()
		msg := it.startErr.String()
		it.mu.Unlock()
		_ = it.Close()
		return nil, fmt.Errorf("osbackend: %s exited at start-up (exit code %d): %s", language, it.code, msg)
	case <-ctx.Done():
		_ = it.Close()
		return nil, fmt.Errorf("osbackend: starting %s: %w", language, context.Cause(ctx))
	case <-t.C:
		_ = it.Close()
		return nil, fmt.Errorf("osbackend: %s did not start within %s", language, startTimeout)
	}
	if err := b.track(it); err != nil {
		_ = it.Close()
		return nil, err
	}
	return it, nil
}

// interpreter is one persistent interpreter process running a driver.
type interpreter struct {
	b     *Executor
	lang  string
	pgid  int
	stdin *os.File

	ready  chan struct{} // closed on the ready frame
	exited chan struct{} // closed when the process ended and its output was read
	code   int           // exit code; read after exited

	running sync.Mutex // held for the whole of Run

	mu        sync.Mutex // guards cur and startErr; held while calling Output
	cur       *execution
	startErr  bytes.Buffer
	readyOnce sync.Once
	closeOnce sync.Once
}

// execution is one Run in progress.
type execution struct {
	out     execd.Output
	done    chan struct{} // closed on the done frame
	execErr *execd.ExecError
}

var _ execd.Interpreter = (*interpreter)(nil)

func (it *interpreter) read(r *os.File, sink func([]byte) (int, error), wg *sync.WaitGroup) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = sink(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// output forwards user output to the current execution (copied: the
// buffer is reused).
func (it *interpreter) output(p []byte, stderr bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	e := it.cur
	if e == nil {
		if stderr && it.startErr.Len() < 4096 {
			it.startErr.Write(p[:min(len(p), 4096)])
		}
		return
	}
	c := bytes.Clone(p)
	if stderr {
		e.out.Stderr(c)
	} else {
		e.out.Stdout(c)
	}
}

func (it *interpreter) onFrame(b []byte) {
	var f pydriver.Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return
	}
	if f.Type == pydriver.FrameReady {
		it.readyOnce.Do(func() { close(it.ready) })
		return
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	e := it.cur
	if e == nil {
		return
	}
	switch f.Type {
	case pydriver.FrameResult:
		if len(f.Data) > 0 {
			e.out.Result(f.Data)
		}
	case pydriver.FrameError:
		tb := f.Traceback
		if tb == nil {
			tb = []string{}
		}
		e.execErr = &execd.ExecError{EName: f.EName, EValue: f.EValue, Traceback: tb}
	case pydriver.FrameDone:
		it.cur = nil
		close(e.done)
	}
}

// Run implements execd.Interpreter. When ctx ends the running code gets
// SIGINT (repeated until it returns): Python raises KeyboardInterrupt and
// node's vm stops the script, and the state is kept. Code that does not
// return within InterruptGrace is killed with its interpreter.
//
// # Errors
// ErrBusy during another Run; the stop reason (ErrTimeout, ErrInterrupted,
// ErrOutputLimit from ctx's cause), wrapping execd.ErrContextLost too when
// the interpreter was killed or had died.
func (it *interpreter) Run(ctx context.Context, code string, out execd.Output) (*execd.ExecError, error) {
	if !it.running.TryLock() {
		return nil, fmt.Errorf("osbackend: %w", execd.ErrBusy)
	}
	defer it.running.Unlock()
	select {
	case <-it.exited:
		return nil, fmt.Errorf("osbackend: %s: %w (exit code %d): %w", it.lang, errInterpExited, it.code, execd.ErrContextLost)
	default:
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("osbackend: not started: %w", stopErr(ctx))
	}
	e := &execution{out: out, done: make(chan struct{})}
	it.mu.Lock()
	it.cur = e
	it.mu.Unlock()
	defer it.detach(e)
	if _, err := it.stdin.Write(pydriver.AppendRequest(nil, pydriver.RequestExec, []byte(code))); err != nil {
		_ = it.Close()
		return nil, fmt.Errorf("osbackend: %s not reading requests: %w: %w", it.lang, err, execd.ErrContextLost)
	}
	select {
	case <-e.done:
		return e.execErr, nil
	case <-it.exited:
		return it.died(e)
	case <-ctx.Done():
	}
	reason := stopErr(ctx)
	deadline := time.NewTimer(it.b.opts.InterruptGrace)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = syscall.Kill(-it.pgid, syscall.SIGINT)
		select {
		case <-e.done:
			return nil, fmt.Errorf("osbackend: %w", reason)
		case <-it.exited:
			if _, err := it.died(e); err != nil {
				return nil, fmt.Errorf("osbackend: %w: %w", reason, execd.ErrContextLost)
			}
			return nil, fmt.Errorf("osbackend: %w", reason)
		case <-tick.C:
		case <-deadline.C:
			_ = it.Close()
			return nil, fmt.Errorf("osbackend: %w; the code did not stop on SIGINT within %s and was killed: %w",
				reason, it.b.opts.InterruptGrace, execd.ErrContextLost)
		}
	}
}

// died reports an interpreter that ended during e.
func (it *interpreter) died(e *execution) (*execd.ExecError, error) {
	select {
	case <-e.done: // finished, then exited (exit() in the last line)
		return e.execErr, nil
	default:
	}
	_ = it.Close()
	return nil, fmt.Errorf("osbackend: %s: %w (exit code %d): %w", it.lang, errInterpExited, it.code, execd.ErrContextLost)
}

// detach forgets e; its Output is not called afterwards.
func (it *interpreter) detach(e *execution) {
	it.mu.Lock()
	if it.cur == e {
		it.cur = nil
	}
	it.mu.Unlock()
}

// Close implements execd.Interpreter: the interpreter and everything it
// started are killed.
func (it *interpreter) Close() error {
	it.closeOnce.Do(func() {
		_ = syscall.Kill(-it.pgid, syscall.SIGKILL)
		_ = it.stdin.Close()
		it.b.untrack(it)
	})
	return nil
}

// waitTimeout waits for wg at most d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
