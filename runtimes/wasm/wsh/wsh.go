// Package wsh is the POSIX shell of wasm sandboxes: shell source is parsed
// and interpreted in-process by mvdan.cc/sh, every file the shell touches
// (redirections, globs, cd, test, the built-in utilities) goes through the
// sandbox workspace's os.Root, whose "/" is the guest "/", and no host
// process is ever started: commands are either small utilities written in Go
// over that root (ls, cat, grep, sed, ...) or guest programs (python3, node)
// injected by the caller.
package wsh

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// Exit statuses reported when the context stops a script.
const (
	// ExitTimeout is the status of a script stopped by its context's
	// deadline (as if killed by SIGKILL).
	ExitTimeout = 137
	// ExitInterrupted is the status of a script whose context was cancelled
	// (as if interrupted by SIGINT).
	ExitInterrupted = 130
	// ExitNotFound is the status of an unknown command.
	ExitNotFound = 127
	// ExitUsage is the status of a script that does not parse.
	ExitUsage = 2
)

// ErrNoRoot is returned when Options.Root is nil.
var ErrNoRoot = errors.New("wsh: no workspace root")

// ErrBadCwd is returned when the working directory is not a directory of the
// workspace.
var ErrBadCwd = errors.New("wsh: bad working directory")

// Program runs one guest program (python3, node...) as a command.
//
// # Errors
// A non-nil error means the program could not be run at all (or was stopped
// by ctx); a program that ran and failed reports its exit code with a nil
// error.
type Program func(ctx context.Context, cmd engine.Command) (exitCode int, err error)

// Options configures the shell. Root is required.
type Options struct {
	// Root is the sandbox workspace, the guest's "/".
	Root *os.Root
	// Programs maps command names ("python3", "node") to guest programs.
	// Absolute program paths (/usr/bin/python3) resolve by base name.
	Programs map[string]Program
	// Env is the base environment (PATH, HOME, ...).
	Env map[string]string
	// MemoryLimitBytes is passed to every Program in engine.Command.
	MemoryLimitBytes int64
	// UnknownHint is appended to "command not found" messages.
	UnknownHint string
	// HTTP is the sandbox's egress, which curl and wget send their
	// requests through (nil: no network).
	HTTP engine.Egress
}

// Validate reports whether the options can be used.
//
// # Errors
// ErrNoRoot when Root is nil.
func (o Options) Validate() error {
	if o.Root == nil {
		return ErrNoRoot
	}
	return nil
}

// shell is the configuration shared by every runner of one Run or Session.
type shell struct {
	root wasmfs.GuestRoot // opts.Root: /etc read-only, new files the user's
	opts Options
}

// Run parses and runs src with working directory cwd (a guest path) and
// returns the exit status. env is layered over Options.Env. A stdin that is
// not an *os.File is copied into a pipe by a goroutine that ends when stdin
// does or when the script has ended and the copy would block; an *os.File
// stdin is read directly, and gets a read deadline when ctx ends. A script that
// does not parse exits with status 2 and the message on stderr. Output is
// written to stdout and stderr as it is produced; the writers are used under
// a lock, so they need not be safe for concurrent use.
//
// # Errors
// ErrNoRoot, ErrBadCwd; when ctx ends the script is stopped, the status is
// ExitTimeout (deadline) or ExitInterrupted (cancel) and the error wraps
// ctx.Err() and its cause.
func Run(ctx context.Context, opts Options, src, cwd string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if err := opts.Validate(); err != nil {
		return 1, err
	}
	sh := &shell{root: wasmfs.GuestRoot{Root: opts.Root}, opts: opts}
	stdout, stderr = lockWriters(stdout, stderr)
	if stdin != nil {
		if _, ok := stdin.(*os.File); !ok {
			// Feed stdin through a pipe that is closed when the script
			// ends, so that a copier blocked on a script that never read
			// its input fails with EPIPE instead of leaking.
			pr, pw, err := os.Pipe()
			if err != nil {
				return 1, fmt.Errorf("wsh: stdin pipe: %w", err)
			}
			defer pr.Close()
			go func(src io.Reader) {
				_, _ = io.Copy(pw, src)
				pw.Close()
			}(stdin)
			stdin = pr
		}
	}
	r, err := sh.newRunner(cwd, sh.baseEnv(env), stdin, stdout, stderr)
	if err != nil {
		return 1, err
	}
	return sh.runSource(ctx, r, src, "", stderr)
}

// runSource parses src and runs it with r, mapping the outcome to a status.
func (sh *shell) runSource(ctx context.Context, r *interp.Runner, src, name string, stderr io.Writer) (int, error) {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), name)
	if err != nil {
		fmt.Fprintf(stderr, "wsh: %v\n", err)
		return ExitUsage, nil
	}
	if err := ctx.Err(); err != nil {
		return stopped(ctx)
	}
	rewriteExecFDs(file)
	return sh.status(ctx, r.Run(ctx, file), stderr)
}

// rewriteExecFDs turns `exec N<>path` (N >= 3, no command) into `: <>path`:
// the interpreter supports only descriptors 0-2, and scripts use this form
// to check that a path opens (the OpenSandbox code-interpreter SDK's
// readiness probe does). The path is still opened, through the same
// confined handler; only the descriptor is not kept.
func rewriteExecFDs(file *syntax.File) {
	syntax.Walk(file, func(n syntax.Node) bool {
		st, ok := n.(*syntax.Stmt)
		if !ok || len(st.Redirs) == 0 {
			return true
		}
		call, ok := st.Cmd.(*syntax.CallExpr)
		if !ok || len(call.Args) != 1 || call.Args[0].Lit() != "exec" {
			return true
		}
		for _, rd := range st.Redirs {
			if rd.N == nil || len(rd.N.Value) == 0 || rd.N.Value[0] < '3' || rd.N.Value[0] > '9' {
				return true
			}
		}
		call.Args[0] = &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: ":"}}}
		for _, rd := range st.Redirs {
			switch rd.Op {
			case syntax.RdrOut, syntax.AppOut, syntax.ClbOut:
				rd.N = &syntax.Lit{Value: "1"}
			case syntax.RdrInOut: // unsupported by the interpreter; opening to read checks the same
				rd.N, rd.Op = &syntax.Lit{Value: "0"}, syntax.RdrIn
			default:
				rd.N = &syntax.Lit{Value: "0"}
			}
		}
		return true
	})
}

// status maps the error of interp.Runner.Run to an exit status.
func (sh *shell) status(ctx context.Context, err error, stderr io.Writer) (int, error) {
	if ctx.Err() != nil {
		return stopped(ctx)
	}
	if err == nil {
		return 0, nil
	}
	var es interp.ExitStatus
	if errors.As(err, &es) {
		return int(es), nil
	}
	// A fatal interpreter error (for example an unsupported feature) ends
	// the script like a shell error would.
	fmt.Fprintf(stderr, "wsh: %v\n", err)
	return 1, nil
}

// stopped is the outcome of a script stopped by its context.
func stopped(ctx context.Context) (int, error) {
	code := ExitInterrupted
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = ExitTimeout
	}
	cause := context.Cause(ctx)
	if cause == nil || cause == ctx.Err() {
		return code, fmt.Errorf("wsh: script stopped: %w", ctx.Err())
	}
	return code, fmt.Errorf("wsh: script stopped: %w: %w", ctx.Err(), cause)
}

// baseEnv merges the configured environment, env and the defaults that keep
// the interpreter from consulting the host (HOME, UID...).
func (sh *shell) baseEnv(env map[string]string) map[string]string {
	m := map[string]string{
		"PATH":    "/usr/local/bin:/usr/bin:/bin",
		"HOME":    "/",
		"USER":    "user",
		"LOGNAME": "user",
		"SHELL":   "/bin/sh",
		"TMPDIR":  "/tmp",
		"UID":     "1000",
		"EUID":    "1000",
		"GID":     "1000",
	}
	maps.Copy(m, sh.opts.Env)
	maps.Copy(m, env)
	return m
}

// environ turns a map into the interpreter's environment (all exported).
func environ(m map[string]string) expand.Environ {
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+m[k])
	}
	return expand.ListEnviron(pairs...)
}

// newRunner builds an interpreter whose every file access and command goes
// through sh. cwd is a guest path.
func (sh *shell) newRunner(cwd string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer, params ...string) (*interp.Runner, error) {
	cwd = guestAbs("/", cwd)
	rel, err := sh.resolve("/", cwd, true)
	if err == nil {
		var fi fs.FileInfo
		if fi, err = sh.root.Stat(rel); err == nil && !fi.IsDir() {
			err = fmt.Errorf("not a directory")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadCwd, cwd, err)
	}
	// The interpreter opens files named "<TMPDIR>/sh-interp-*" on the host
	// directly (they are its process-substitution FIFOs), bypassing the
	// open handler. It reads TMPDIR once, at its first reset: give it a
	// secret path that no guest can spell and that the host cannot open
	// (it holds a NUL byte), then swap in the guest's environment.
	secret := "/\x00wsh-" + rand.Text()
	opts := []interp.RunnerOption{
		interp.Env(expand.ListEnviron("TMPDIR="+secret, "HOME=/", "UID=1000", "EUID=1000", "GID=1000")),
		func(r *interp.Runner) error { r.Dir = cwd; return nil }, // interp.Dir would stat the host
		interp.StdIO(stdin, stdout, stderr),
		interp.OpenHandler(sh.openHandler),
		interp.ReadDirHandler2(sh.readDirHandler),
		interp.StatHandler(sh.statHandler),
		interp.AccessHandler(sh.accessHandler),
		interp.CallHandler(sh.callHandler),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return sh.execHandler }),
	}
	if len(params) > 0 {
		opts = append(opts, interp.Params(params...))
	}
	r, err := interp.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("wsh: %w", err)
	}
	r.Reset()
	if err := interp.Env(environ(env))(r); err != nil {
		return nil, fmt.Errorf("wsh: %w", err)
	}
	r.Reset()
	return r, nil
}

// Session is a persistent shell: the working directory, variables,
// functions and exported environment carry over between Run calls. It is
// safe for concurrent use; runs are serialized.
type Session struct {
	sh *shell

	mu     sync.Mutex
	r      *interp.Runner
	closed bool
}

// NewSession starts a session in cwd (a guest path) with env layered over
// Options.Env.
//
// # Errors
// ErrNoRoot, ErrBadCwd.
func NewSession(opts Options, cwd string, env map[string]string) (*Session, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	sh := &shell{root: wasmfs.GuestRoot{Root: opts.Root}, opts: opts}
	r, err := sh.newRunner(cwd, sh.baseEnv(env), nil, io.Discard, io.Discard)
	if err != nil {
		return nil, err
	}
	return &Session{sh: sh, r: r}, nil
}

// ErrClosed is returned by Session.Run after Close.
var ErrClosed = errors.New("wsh: session closed")

// Run runs src in the session, with no standard input, and returns its exit
// status. `exit N` ends the run with status N; the session stays usable.
//
// # Errors
// ErrClosed after Close; the context errors described at the package-level
// Run.
func (s *Session) Run(ctx context.Context, src string, stdout, stderr io.Writer) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 1, ErrClosed
	}
	stdout, stderr = lockWriters(stdout, stderr)
	if err := interp.StdIO(nil, stdout, stderr)(s.r); err != nil {
		return 1, fmt.Errorf("wsh: %w", err)
	}
	defer func() { _ = interp.StdIO(nil, io.Discard, io.Discard)(s.r) }()
	return s.sh.runSource(ctx, s.r, src, "", stderr)
}

// Cwd returns the session's current working directory (a guest path).
func (s *Session) Cwd() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Dir
}

// Close ends the session. Later runs fail with ErrClosed.
//
// # Errors
// None today; the signature leaves room for sessions holding resources.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// lockedWriter serializes writes to a writer shared by concurrent commands
// (pipeline stages, background jobs).
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lockWriters wraps stdout and stderr, sharing one lock when they are the
// same writer. A nil writer discards.
func lockWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	mu := &sync.Mutex{}
	out := lockedWriter{mu: mu, w: stdout}
	if sameWriter(stdout, stderr) {
		return out, out
	}
	return out, lockedWriter{mu: &sync.Mutex{}, w: stderr}
}

// sameWriter reports whether a and b are the same comparable writer.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// guestAbs returns the clean absolute guest path of p, relative to dir.
// ".." never climbs above "/".
func guestAbs(dir, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(dir, p)
	}
	return path.Clean("/" + p)
}
