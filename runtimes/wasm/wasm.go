// Package wasm is the in-process WebAssembly backend: each sandbox is a
// workspace directory (its guests' only filesystem, through an os.Root),
// persistent CPython and QuickJS interpreters running under wazero, and a
// POSIX shell interpreter whose programs resolve to those guests and to
// built-in utilities. Nothing of the host is reachable: no host process is
// ever started and guests have no sockets. Their only way out is HTTP(S)
// through the sandbox's runtimes.Egress (fetch in JavaScript, hybox_http and
// urllib.request in Python), under its policy.
package wasm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
	"github.com/hybox-dev/hybox/runtimes/wasm/wsh"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Guest runs one interpreter language: persistent contexts and one-shot
// commands. pyguest.Manager and jsguest.Manager implement it. Guests have
// no sockets: their HTTP requests go through eg (NewInterpreter) or
// cmd.Egress (RunCommand), the sandbox's runtimes.Egress; nil means none.
// SaveState and RestoreInterpreter turn a context into data and back
// (SaveState returns nil, nil for a context with nothing live to save).
type Guest interface {
	NewInterpreter(ctx context.Context, root *os.Root, cwd string, memLimitBytes int64, eg engine.Egress) (execd.Interpreter, error)
	RunCommand(ctx context.Context, cmd engine.Command) (int, error)
	SaveState(ctx context.Context, it execd.Interpreter) (*engine.State, error)
	RestoreInterpreter(ctx context.Context, root *os.Root, memLimitBytes int64, eg engine.Egress, st *engine.State, reseed bool) (execd.Interpreter, error)
}

// Options configures the backend.
type Options struct {
	Python     Guest // required
	JavaScript Guest // required
	// Exec configures every sandbox's execd handler; Backend is set per
	// sandbox.
	Exec execd.Options
	// DefaultMemoryBytes caps a guest instance's memory when the sandbox
	// asks for none (default 512 MiB).
	DefaultMemoryBytes int64
	// MaxMemoryBytes caps what a sandbox may ask for (default 4 GiB, the
	// wasm32 limit).
	MaxMemoryBytes int64
	// AllowedHostPaths are the host directories under which host volumes
	// may lie (named volumes are the server's and need none).
	AllowedHostPaths []string
	// SaveDelay is how long a context stays idle after an execution
	// before its state is written to the sandbox's directory (default
	// 100 ms; see state.go).
	SaveDelay time.Duration
}

// Validate fills defaults.
//
// # Errors
// When a guest is missing.
func (o *Options) Validate() error {
	if o.Python == nil || o.JavaScript == nil {
		return errors.New("wasm: Python and JavaScript guests are required")
	}
	if o.DefaultMemoryBytes <= 0 {
		o.DefaultMemoryBytes = 512 << 20
	}
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = 4 << 30
	}
	if o.SaveDelay <= 0 {
		o.SaveDelay = 100 * time.Millisecond
	}
	return nil
}

// Runtime is the wasm backend.
type Runtime struct {
	opts   Options
	python string // which CPython Setup chose
}

// PythonGuest describes the Python guest chosen by Setup ("" when the
// Runtime was built by New).
func (r *Runtime) PythonGuest() string { return r.python }

var _ runtimes.Runtime = (*Runtime)(nil)
var _ runtimes.CodeRunner = (*Sandbox)(nil)

// New returns the backend.
//
// # Errors
// When opts are invalid.
func New(opts Options) (*Runtime, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Runtime{opts: opts}, nil
}

// Name is "wasm".
func (r *Runtime) Name() string { return "wasm" }

// Validate refuses what a wasm sandbox cannot do.
func (r *Runtime) Validate(spec runtimes.Spec) error {
	if spec.MemoryBytes > r.opts.MaxMemoryBytes {
		return fmt.Errorf("%w: memory %d bytes exceeds the wasm limit of %d bytes", runtimes.ErrInvalid, spec.MemoryBytes, r.opts.MaxMemoryBytes)
	}
	switch v := spec.Extensions[ExtensionIsolation]; v {
	case "", IsolationPerCall, IsolationPerCallWorkspace:
	default:
		return fmt.Errorf("%w: extensions[%q] = %q is not known (%q: every code execution starts from a fresh interpreter; %q: and the workspace is put back after each)",
			runtimes.ErrInvalid, ExtensionIsolation, v, IsolationPerCall, IsolationPerCallWorkspace)
	}
	if err := r.checkVolumes(spec.Volumes); err != nil {
		return err
	}
	if img := spec.Image; strings.HasPrefix(img, "wasm://") {
		switch strings.TrimPrefix(img, "wasm://") {
		case "default", "python", "javascript", "":
		default:
			return fmt.Errorf("%w: unknown wasm image %q (available: wasm://default)", runtimes.ErrInvalid, img)
		}
	}
	return nil
}

// Directories created in every workspace.
var workspaceDirs = []string{"workspace", "tmp", "home/user"}

const defaultCwd = "/workspace"

func fsDir(spec runtimes.Spec) string { return filepath.Join(spec.Dir, "fs") }

// Create makes the workspace and starts the sandbox.
func (r *Runtime) Create(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	dir := fsDir(spec)
	for _, d := range workspaceDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	if os.Geteuid() == 0 {
		// The user's home is the user's, as on any Linux box.
		_ = os.Chown(filepath.Join(dir, "home", "user"), wasmfs.GuestUID, wasmfs.GuestGID)
	}
	return r.open(spec)
}

// Restore re-opens an existing workspace.
func (r *Runtime) Restore(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	if _, err := os.Stat(fsDir(spec)); err != nil {
		return nil, fmt.Errorf("%w: workspace of %s: %v", runtimes.ErrNotFound, spec.ID, err)
	}
	return r.open(spec)
}

// Destroy detaches the volumes and removes the workspace and the saved
// state of its contexts.
func (r *Runtime) Destroy(ctx context.Context, spec runtimes.Spec) error {
	unlockSystemFiles(fsDir(spec))
	if err := mounts.RemoveAll(fsDir(spec)); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	if err := mounts.RemoveAll(filepath.Join(spec.Dir, "state")); err != nil {
		return fmt.Errorf("remove saved state: %w", err)
	}
	return nil
}

func (r *Runtime) open(spec runtimes.Spec) (*Sandbox, error) {
	root, err := os.OpenRoot(fsDir(spec))
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	if err := r.mountVolumes(root, spec); err != nil {
		root.Close()
		return nil, err
	}
	mem := spec.MemoryBytes
	if mem <= 0 {
		mem = r.opts.DefaultMemoryBytes
	}
	env := map[string]string{
		"HOME": "/home/user", "USER": "user", "PATH": "/usr/local/bin:/usr/bin:/bin",
		"LANG": "C.UTF-8", "PWD": defaultCwd, "TMPDIR": "/tmp",
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	var eg engine.Egress = spec.Egress // nil stays nil: no network
	s := &Sandbox{rt: r, root: root, dir: spec.Dir, mem: mem, env: env, egress: eg, created: time.Now(),
		hostname: hostnameOf(spec.ID, spec.Env), isolation: spec.Extensions[ExtensionIsolation]}
	s.shell = wsh.Options{
		Root: root,
		Programs: map[string]wsh.Program{
			"python":  withEgress(r.opts.Python.RunCommand, eg),
			"python3": withEgress(r.opts.Python.RunCommand, eg),
			"node":    withEgress(r.opts.JavaScript.RunCommand, eg),
		},
		Env:              env,
		MemoryLimitBytes: mem,
		HTTP:             eg,
		UnknownHint:      "(this is a wasm sandbox: only python, python3, node and built-in utilities run here; to run other programs, create the sandbox from a container image with `hybox sandbox create --image IMAGE --runtime runc` (in the API: extensions {\"hybox.io/runtime\":\"runc\"}))",
	}
	return s, nil
}

// withEgress returns prog with its commands' HTTP requests going through eg.
func withEgress(prog wsh.Program, eg engine.Egress) wsh.Program {
	return func(ctx context.Context, cmd engine.Command) (int, error) {
		cmd.Egress = eg
		return prog(ctx, cmd)
	}
}

// handler returns the execd handler, building it on first use: an idle
// sandbox holds no routes, contexts or buffers.
func (s *Sandbox) handler() (*execd.Handler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.execd == nil {
		if err := s.systemFiles(); err != nil {
			return nil, err
		}
		eo := s.rt.opts.Exec
		eo.Executor = s
		h, err := execd.New(eo)
		if err != nil {
			return nil, err
		}
		s.adoptSaved(h) // contexts saved before a restart, or by a fork
		s.execd = h
	}
	return s.execd, nil
}

// Sandbox is one wasm sandbox.
type Sandbox struct {
	rt      *Runtime
	root    *os.Root
	dir     string // the sandbox's own directory (runtimes.Spec.Dir)
	mem     int64
	env     map[string]string
	egress  engine.Egress // nil = no network
	shell   wsh.Options
	execd   *execd.Handler
	created time.Time
	// hostname and sysDone: the system files, written on first use (etc.go).
	hostname string
	sysMu    sync.Mutex
	sysDone  bool

	isolation string     // ExtensionIsolation's value
	isoMu     sync.Mutex // per-call+workspace: one execution at a time
	isoSaved  bool       // the workspace snapshot exists
	persistMu sync.Mutex // one manifest write at a time

	mu      sync.Mutex
	paused  bool
	closing bool
	discard bool // Close saves nothing: the sandbox is being destroyed
}

var (
	_ runtimes.Sandbox = (*Sandbox)(nil)
	_ execd.Executor   = (*Sandbox)(nil)
)

// Execd serves the execd API; while paused it answers 409.
func (s *Sandbox) Execd() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if paused && r.URL.Path != "/ping" {
			errdefs.Write(w, runtimes.ErrPaused)
			return
		}
		h, err := s.handler()
		if err != nil {
			errdefs.Write(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// RunCode runs code in the sandbox's contexts without an HTTP request
// (runtimes.CodeRunner).
func (s *Sandbox) RunCode(ctx context.Context, req api.CodeRunRequest, sink execd.Sink) error {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused {
		return runtimes.ErrPaused
	}
	h, err := s.handler()
	if err != nil {
		return err
	}
	return h.RunCode(ctx, req, sink)
}

// Proxy is not supported: wasm guests have no sockets.
func (s *Sandbox) Proxy(port int) (http.Handler, error) {
	return nil, fmt.Errorf("%w: wasm sandboxes have no network ports; create the sandbox with extensions {\"hybox.io/runtime\":\"runc\"} to serve port %d", runtimes.ErrNotSupported, port)
}

// Pause refuses new executions until Resume, and writes every code
// context's state to the sandbox's directory and frees its instance (a
// context whose execution is running does so when it ends). Resume brings
// them back on their next execution.
//
// # Errors
// When a context's state cannot be written; the sandbox stays paused and
// that context in memory.
func (s *Sandbox) Pause(ctx context.Context) error {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	return s.parkAll(ctx, true)
}

// Resume allows executions again.
func (s *Sandbox) Resume(ctx context.Context) error {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	return nil
}

// Close writes out the state of contexts that ran since their last save,
// stops everything running, detaches the volumes and closes the workspace
// root.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	h, discard := s.execd, s.discard
	s.mu.Unlock()
	if !discard {
		if err := s.parkAll(ctx, false); err != nil {
			slog.Warn("save code contexts at close", "err", err)
		}
	}
	if h != nil {
		h.Close()
	}
	// The volumes leave with the server: nothing of theirs stays mounted
	// in a data directory nobody serves (Restore mounts them again).
	_, err := mounts.DetachAll(filepath.Join(s.dir, "fs"))
	return errors.Join(err, s.root.Close())
}

// Discard tells a sandbox about to be destroyed that Close need not save
// its contexts.
func (s *Sandbox) Discard() {
	s.mu.Lock()
	s.discard = true
	s.mu.Unlock()
}

// Root is the workspace.
func (s *Sandbox) Root() *os.Root { return s.root }

// Languages lists python and javascript.
func (s *Sandbox) Languages() []string { return []string{"python", "javascript"} }

// LanguageHint implements execd.LanguageHinter: java and go contexts run
// in the container tier only.
func (s *Sandbox) LanguageHint(language string) string {
	need := map[string]string{"java": "a JDK (java and jshell)", "go": "the go toolchain"}[language]
	if need == "" {
		return ""
	}
	return language + " contexts run in the container tier, not in a wasm sandbox: create the sandbox with extensions {\"hybox.io/runtime\":\"runc\"} (or \"runsc\") and an image with " + need + ", e.g. localhost/hybox/code-interpreter:bookworm"
}

var _ execd.LanguageHinter = (*Sandbox)(nil)

// NewInterpreter starts a persistent context.
func (s *Sandbox) NewInterpreter(ctx context.Context, language, cwd string) (execd.Interpreter, error) {
	if cwd == "" {
		cwd = defaultCwd
	}
	switch language {
	case "python", "javascript":
		if err := s.checkCwd(cwd); err != nil {
			return nil, err
		}
	}
	if err := s.systemFiles(); err != nil {
		return nil, err
	}
	switch language {
	case "python", "javascript":
		w := s.newCtxInterp(s.guest(language), cwd)
		if s.isolation == "" {
			// (Under per-call isolation every execution starts a fresh one.)
			if _, err := w.ensure(ctx); err != nil {
				return nil, err
			}
		}
		w.mu.Lock()
		w.scheduleLocked() // the manifest gets the new context
		w.mu.Unlock()
		return w, nil
	case "typescript":
		return nil, fmt.Errorf("%w: typescript is not available in a wasm sandbox; use javascript, or create the sandbox with extensions {\"hybox.io/runtime\":\"runc\"} and an image with a TypeScript runtime", execd.ErrUnknownLanguage)
	case "java", "go":
		return nil, fmt.Errorf("%w: %s", execd.ErrUnknownLanguage, s.LanguageHint(language))
	default:
		return nil, fmt.Errorf("%w: %q is not available in a wasm sandbox (available: python, javascript, bash)", execd.ErrUnknownLanguage, language)
	}
}

// checkCwd reports a working directory that is not an absolute path to a
// directory of the sandbox as fs.ErrNotExist: the caller named it, it is
// not a failure of the sandbox.
func (s *Sandbox) checkCwd(cwd string) error {
	rel := "."
	if c := path.Clean(cwd); c != "/" {
		rel = strings.TrimPrefix(c, "/")
	}
	if !strings.HasPrefix(cwd, "/") {
		return fmt.Errorf("%w: cwd %q is not an absolute path", fs.ErrNotExist, cwd)
	}
	if fi, err := s.root.Stat(rel); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: cwd %q is not a directory of the sandbox", fs.ErrNotExist, cwd)
	}
	return nil
}

// StartCommand runs src in the wasm shell.
func (s *Sandbox) StartCommand(ctx context.Context, spec execd.ProcessSpec) (execd.Process, error) {
	if spec.UID != nil || spec.GID != nil {
		return nil, fmt.Errorf("%w: uid/gid are not available in a wasm sandbox", execd.ErrNotSupported)
	}
	if err := s.systemFiles(); err != nil {
		return nil, err
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = defaultCwd
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &process{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.code, p.err = wsh.Run(ctx, s.shell, spec.Command, cwd, spec.Env, nil, spec.Stdout, spec.Stderr)
		if p.err != nil && ctx.Err() != nil {
			p.err = nil // the caller knows why it was stopped
		}
	}()
	return p, nil
}

// NewSession starts a persistent shell.
func (s *Sandbox) NewSession(ctx context.Context, cwd string, env map[string]string) (execd.Session, error) {
	if err := s.systemFiles(); err != nil {
		return nil, err
	}
	if cwd == "" {
		cwd = defaultCwd
	}
	sess, err := wsh.NewSession(s.shell, cwd, env)
	if errors.Is(err, wsh.ErrBadCwd) {
		// The caller named a working directory that is not one: not a
		// failure of the sandbox.
		return nil, fmt.Errorf("%w: cwd %q is not a directory of the sandbox", fs.ErrNotExist, cwd)
	}
	return sess, err
}

// Metrics reports the host's CPU count and the Go heap as a stand-in for
// the sandbox's memory (wasm guests share the server process).
func (s *Sandbox) Metrics(ctx context.Context) (execd.Metrics, error) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return execd.Metrics{
		CPUCount:    float64(runtime.NumCPU()),
		MemTotalMiB: float64(s.mem) / (1 << 20),
		MemUsedMiB:  float64(ms.HeapInuse) / (1 << 20),
		Timestamp:   time.Now().UnixMilli(),
	}, nil
}

type process struct {
	cancel context.CancelFunc
	done   chan struct{}
	code   int
	err    error
}

func (p *process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

func (p *process) Kill() error {
	p.cancel()
	return nil
}
