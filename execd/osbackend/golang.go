package osbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/gocell"
)

// Go code contexts keep their state as declarations, not as live values
// (gonb's model, the Go kernel of OpenSandbox's code interpreter): each cell
// is turned by internal/gocell into a whole program (the remembered imports
// and declarations, the cell's statements as main), which the image's go
// toolchain builds in the context's private module directory and which then
// runs once. A var's initializer runs again in every cell; its value does
// not carry over.

// goFallback is where Debian's golang-go keeps the toolchain when go is not
// on PATH.
const goFallback = "/usr/lib/go/bin/go"

// maxCompileOutput bounds the compiler output kept for an error.
const maxCompileOutput = 1 << 20

// goBinary finds the go command.
func (b *Executor) goBinary() (string, error) {
	if p, err := b.lookPath(b.opts.Go); err == nil {
		return p, nil
	}
	if b.opts.Go == "go" && isExecutable(goFallback) {
		return goFallback, nil
	}
	return "", fmt.Errorf("%w: go: %s is not installed in this sandbox", execd.ErrUnknownLanguage, b.opts.Go)
}

// newGoInterpreter makes the private module directory of a Go context.
//
// # Errors
// ErrUnknownLanguage without a go toolchain; when cwd does not exist or
// the toolchain does not answer `go env GOVERSION`.
func (b *Executor) newGoInterpreter(ctx context.Context, cwd string) (execd.Interpreter, error) {
	goBin, err := b.goBinary()
	if err != nil {
		return nil, err
	}
	if _, err := b.hostDir(cwd); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hybox-go-")
	if err != nil {
		return nil, fmt.Errorf("osbackend: go module dir: %w", err)
	}
	g := &goInterpreter{b: b, goBin: goBin, dir: dir, cwd: cwd, env: b.goEnv(dir)}
	var ver bytes.Buffer
	code, out, err := g.command(ctx, shellQuote(goBin)+" env GOVERSION", "", &ver, nil)
	if err != nil || code != 0 {
		_ = g.Close()
		return nil, fmt.Errorf("osbackend: %s env GOVERSION (exit code %d): %v %s", goBin, code, err, out)
	}
	// "go1.19.8" -> "go 1.19": the language version of the toolchain.
	v := strings.TrimPrefix(strings.TrimSpace(ver.String()), "go")
	if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
		v = parts[0] + "." + parts[1]
	}
	mod := "module hyboxcell\n\ngo " + v + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o600); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("osbackend: go.mod: %w", err)
	}
	if err := b.track(g); err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// goEnv is the environment of go builds: no network, no toolchain
// download, no cgo unless asked for, the build cache under HOME (warm after
// the first build).
func (b *Executor) goEnv(dir string) map[string]string {
	env := map[string]string{}
	set := func(k, v string) {
		if b.getenv(k) == "" {
			env[k] = v
		}
	}
	home := b.getenv("HOME")
	if home == "" {
		home = dir
	}
	set("GOCACHE", filepath.Join(home, ".cache", "go-build"))
	set("GOPATH", filepath.Join(home, "go"))
	set("GOFLAGS", "-mod=mod")
	set("GOPROXY", "off")
	set("GOTOOLCHAIN", "local")
	set("GOTELEMETRY", "off")
	set("CGO_ENABLED", "0")
	return env
}

// goInterpreter runs the cells of one Go context.
type goInterpreter struct {
	b     *Executor
	goBin string
	dir   string // private module directory (host path)
	cwd   string // the programs' working directory (guest path)
	env   map[string]string

	running   sync.Mutex
	s         gocell.Session
	closeOnce sync.Once
}

var _ execd.Interpreter = (*goInterpreter)(nil)

// command runs a shell command line to its end (or until ctx ends) and
// returns its exit code and, when stdout or stderr is nil, what it wrote
// there (at most maxCompileOutput bytes).
func (g *goInterpreter) command(ctx context.Context, line, cwd string, stdout, stderr io.Writer) (int, string, error) {
	var captured bytes.Buffer
	capture := &cappedWriter{b: &captured, max: maxCompileOutput}
	if stdout == nil {
		stdout = capture
	}
	if stderr == nil {
		stderr = capture
	}
	p, err := g.b.StartCommand(ctx, execd.ProcessSpec{Command: line, Cwd: cwd, Env: g.env, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return 0, "", err
	}
	code, err := p.Wait()
	return code, captured.String(), err
}

// Run implements execd.Interpreter: the cell's program is built (a cell
// that does not compile is a CompilationError at the cell's lines and
// changes nothing) and, when it has statements or a main, run. A panic is
// an error named "panic"; another non-zero exit status an ExitError.
//
// # Errors
// ErrBusy during another Run; the stop reason when ctx ends (the program
// is killed; the context's declarations are kept).
func (g *goInterpreter) Run(ctx context.Context, code string, out execd.Output) (*execd.ExecError, error) {
	if !g.running.TryLock() {
		return nil, fmt.Errorf("osbackend: %w", execd.ErrBusy)
	}
	defer g.running.Unlock()
	prog, err := g.s.Prepare(code)
	if err != nil {
		return &execd.ExecError{EName: "CompilationError", EValue: err.Error(), Traceback: []string{err.Error()}}, nil
	}
	bin := filepath.Join(g.dir, "cell")
	build := "cd " + shellQuote(g.dir) + " && exec " + shellQuote(g.goBin) + " build -o cell ."
	for attempt := 0; ; attempt++ {
		if err := os.WriteFile(filepath.Join(g.dir, "main.go"), prog.Source, 0o600); err != nil {
			return nil, fmt.Errorf("osbackend: write the cell's program: %w", err)
		}
		status, msg, err := g.command(ctx, build, "", nil, nil)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("osbackend: %w", stopErr(ctx))
		}
		if err != nil {
			return nil, fmt.Errorf("osbackend: go build: %w", err)
		}
		if status == 0 {
			break
		}
		// An import the generator kept though nothing uses it (its package
		// name is not its path's last element): drop it and build again.
		if p, err := gocell.ImportNotUsed(msg); err == nil && attempt < 8 && prog.DropImport(p) {
			continue
		}
		return compileError(msg), nil
	}
	prog.Commit()
	if !prog.HasMain {
		return nil, nil
	}
	stdout := outputWriter(out.Stdout)
	stderr := &panicWriter{out: out.Stderr}
	status, _, err := g.command(ctx, "exec "+shellQuote(bin), g.cwd, stdout, stderr)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("osbackend: %w; the program was killed (the context's declarations are kept)", stopErr(ctx))
	}
	if err != nil && !errors.Is(err, ErrOOMKilled) {
		return nil, fmt.Errorf("osbackend: run the cell's program: %w", err)
	}
	if ee := stderr.finish(status); ee != nil {
		return ee, nil
	}
	if status != 0 {
		msg := fmt.Sprintf("exit status %d", status)
		if err != nil {
			msg += ": " + err.Error()
		}
		return &execd.ExecError{EName: "ExitError", EValue: msg, Traceback: []string{msg}}, nil
	}
	return nil, nil
}

// compileError turns the go command's output into the cell's error: one
// traceback line per compiler message, without the package headers.
func compileError(msg string) *execd.ExecError {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		if strings.HasPrefix(l, "# ") || strings.TrimSpace(l) == "" {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		lines = []string{"go build failed"}
	}
	return &execd.ExecError{EName: "CompilationError", EValue: strings.TrimSpace(lines[0]), Traceback: lines}
}

// Close implements execd.Interpreter: the module directory is removed.
func (g *goInterpreter) Close() error {
	g.closeOnce.Do(func() {
		g.b.untrack(g)
		_ = os.RemoveAll(g.dir)
	})
	return nil
}

// outputWriter adapts an Output callback to io.Writer (copying: the
// caller may reuse its buffer).
func outputWriter(f func([]byte)) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		f(bytes.Clone(p))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// cappedWriter keeps the first max bytes written to it.
type cappedWriter struct {
	mu  sync.Mutex
	b   *bytes.Buffer
	max int
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// panicMarkers start the Go runtime's report of a crash.
var panicMarkers = []string{"panic: ", "fatal error: "}

// panicWriter passes a program's stderr on as it is written, except the
// Go runtime's crash report: from a line starting with "panic: " or "fatal
// error: " on, stderr is kept for the execution's error. (A line that may
// still become such a start is held back until it is decided.)
type panicWriter struct {
	mu      sync.Mutex
	out     func([]byte)
	midLine bool         // the last byte passed on was not a newline
	pending []byte       // the start of a line that may be a marker
	trapped bytes.Buffer // the crash report
}

func (w *panicWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if w.trapped.Len() > 0 {
		if w.trapped.Len() < maxCompileOutput {
			w.trapped.Write(p)
		}
		return n, nil
	}
	data := append(w.pending, p...)
	w.pending = nil
	for len(data) > 0 {
		if !w.midLine {
			if startsMarker(data) {
				w.trapped.Write(data)
				return n, nil
			}
			if i := bytes.IndexByte(data, '\n'); i < 0 && mayStartMarker(data) {
				w.pending = data
				return n, nil
			}
		}
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			w.out(bytes.Clone(data))
			w.midLine = true
			return n, nil
		}
		w.out(bytes.Clone(data[:i+1]))
		w.midLine = false
		data = data[i+1:]
	}
	return n, nil
}

func startsMarker(b []byte) bool {
	for _, m := range panicMarkers {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

func mayStartMarker(b []byte) bool {
	for _, m := range panicMarkers {
		if len(b) < len(m) && strings.HasPrefix(m, string(b)) {
			return true
		}
	}
	return false
}

// finish ends the stream of a program that exited with status: a crash
// report becomes the error (exit status 2 is the runtime's); otherwise
// what was held back is passed on.
func (w *panicWriter) finish(status int) *execd.ExecError {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 {
		w.out(w.pending)
		w.pending = nil
	}
	if w.trapped.Len() == 0 {
		return nil
	}
	report := w.trapped.String()
	w.trapped.Reset()
	if status != 2 {
		w.out([]byte(report))
		return nil
	}
	lines := strings.Split(strings.TrimRight(report, "\n"), "\n")
	name, value, _ := strings.Cut(lines[0], ": ")
	return &execd.ExecError{EName: name, EValue: strings.TrimSuffix(value, " [recovered]"), Traceback: lines}
}
