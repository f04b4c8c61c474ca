// Package osbackend is the execd.Executor of container sandboxes: commands,
// shell sessions, code interpreters and terminals are real OS processes,
// run by hybox-execd inside the container. Output is copied from pipes as it
// is produced; every command runs in its own process group so that it can be
// interrupted or killed with everything it started.
//
// Paths named by clients (a command's cwd) are guest paths, resolved under
// Options.RootDir ("/" in a container, so they are the container's paths).
package osbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// Defaults applied by Options.Validate.
const (
	DefaultDrainTimeout   = 200 * time.Millisecond
	DefaultInterruptGrace = 2 * time.Second
	DefaultCgroupDir      = "/sys/fs/cgroup"
	DefaultProcDir        = "/proc"
)

// Options configures an Executor.
type Options struct {
	// RootDir is the sandbox filesystem: the files API's root and the base
	// of guest paths. Required ("/" in a container).
	RootDir string
	// Workdir is the host path where processes start when the request names
	// no cwd ("" = RootDir).
	Workdir string
	// Env is the base environment of every process ("KEY=VALUE"); request
	// variables are added to it. nil = PATH, HOME and LANG defaults.
	Env []string
	// Shell runs commands with -c ("" = /bin/bash, else /bin/sh).
	Shell string
	// Python names the interpreter of python contexts, looked up on the
	// PATH of Env ("" = python3).
	Python string
	// Node names the interpreter of javascript contexts ("" = node).
	Node string
	// Java names the JVM of java contexts ("" = java); JShell names the
	// JDK's jshell, whose presence tells that the jdk.jshell module is
	// installed ("" = jshell).
	Java, JShell string
	// Go names the toolchain of go contexts ("" = go, else
	// /usr/lib/go/bin/go when that exists).
	Go string
	// Reaper, when set, collects the exit status of every child (PID 1
	// mode). nil = the backend waits for its own children only.
	Reaper *Reaper
	// KillGrace, when positive, sends SIGTERM to a killed command's group
	// and SIGKILL only after this grace (default 0: SIGKILL at once).
	KillGrace time.Duration
	// DrainTimeout bounds how long Wait keeps reading output after a
	// command's main process exited while something it started in the
	// background still holds its stdout (default 200 ms).
	DrainTimeout time.Duration
	// InterruptGrace is how long an interrupted interpreter or session has
	// to return after SIGINT before it is killed (default 2 s).
	InterruptGrace time.Duration
	// CgroupDir is where the sandbox's cgroup is mounted (default /sys/fs/cgroup).
	CgroupDir string
	// ProcDir is the proc filesystem (default /proc).
	ProcDir string
	// Logger; nil = slog.Default().
	Logger *slog.Logger
	// WarmShell keeps one shell started ahead of time, which runs the next
	// command that needs no uid/gid switch: that saves the shell's
	// fork+exec on the request path. Only when Shell is bash.
	WarmShell bool
}

// Validate fills defaults and checks required fields.
//
// # Errors
// When RootDir is empty or not a directory, or Shell does not exist.
func (o *Options) Validate() error {
	if o.RootDir == "" {
		return errors.New("osbackend: RootDir is required")
	}
	st, err := os.Stat(o.RootDir)
	if err != nil {
		return fmt.Errorf("osbackend: RootDir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("osbackend: RootDir %s is not a directory", o.RootDir)
	}
	if o.Workdir == "" {
		o.Workdir = o.RootDir
	}
	if o.Env == nil {
		o.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	}
	if o.Shell == "" {
		o.Shell = "/bin/bash"
		if _, err := os.Stat(o.Shell); err != nil {
			o.Shell = "/bin/sh"
		}
	}
	if _, err := os.Stat(o.Shell); err != nil {
		return fmt.Errorf("osbackend: shell: %w", err)
	}
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.Node == "" {
		o.Node = "node"
	}
	if o.Java == "" {
		o.Java = "java"
	}
	if o.JShell == "" {
		o.JShell = "jshell"
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.InterruptGrace <= 0 {
		o.InterruptGrace = DefaultInterruptGrace
	}
	if o.CgroupDir == "" {
		o.CgroupDir = DefaultCgroupDir
	}
	if o.ProcDir == "" {
		o.ProcDir = DefaultProcDir
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Executor runs a sandbox's executions as OS processes.
type Executor struct {
	opts Options
	root *os.Root

	metrics metricsState

	mu     sync.Mutex
	live   map[closer]struct{} // sessions, interpreters, terminals
	closed bool

	javaMu       sync.Mutex
	javaDir      string // the java driver's private directory ("" = not written yet)
	javaCompiled bool   // javaDir holds the compiled driver

	leftMu    sync.Mutex
	leftovers map[int]struct{} // process groups of finished commands still running

	// env is the base environment (Options.Env until SetEnv replaces it).
	env          atomic.Pointer[[]string]
	warmOK       atomic.Bool // Options.WarmShell and the shell can have one
	warmMu       sync.Mutex
	warm         *warmShell  // idle, or nil
	warmStarting bool        // a warm shell is being started
	warmTimer    *time.Timer // starts the next warm shell once idle
}

type closer interface{ Close() error }

var (
	_ execd.Executor    = (*Executor)(nil)
	_ execd.PTYExecutor = (*Executor)(nil)
)

// New returns an Executor.
//
// # Errors
// When opts are invalid or the root cannot be opened.
func New(opts Options) (*Executor, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(opts.RootDir)
	if err != nil {
		return nil, fmt.Errorf("osbackend: open root: %w", err)
	}
	b := &Executor{opts: opts, root: root, live: map[closer]struct{}{}, leftovers: map[int]struct{}{}}
	env := opts.Env
	b.env.Store(&env)
	b.warmOK.Store(opts.WarmShell && warmCapable(opts.Shell, env))
	b.refillWarm()
	return b, nil
}

// SetEnv replaces the base environment of every process started from now
// on ("KEY=VALUE"): a pooled sandbox gets its own when it is claimed. An
// idle warm shell started with the old one is kept: the next command on
// it exports what changed before it runs.
func (b *Executor) SetEnv(env []string) {
	env = slices.Clone(env)
	b.env.Store(&env)
	ok := b.opts.WarmShell && warmCapable(b.opts.Shell, env)
	b.warmOK.Store(ok)
	if !ok {
		if w := b.claimWarm(); w != nil {
			_ = w.Close()
		}
	}
}

// baseEnv is the current base environment.
func (b *Executor) baseEnv() []string { return *b.env.Load() }

// Root implements execd.Executor.
func (b *Executor) Root() *os.Root { return b.root }

// Languages implements execd.Executor: the languages whose interpreter is
// installed now.
func (b *Executor) Languages() []string {
	var out []string
	if _, err := b.lookPath(b.opts.Python); err == nil {
		out = append(out, "python")
	}
	if _, err := b.lookPath(b.opts.Node); err == nil {
		out = append(out, "javascript")
	}
	if b.javaAvailable() {
		out = append(out, "java")
	}
	if _, err := b.goBinary(); err == nil {
		out = append(out, "go")
	}
	sort.Strings(out)
	return out
}

// Close kills every session, interpreter and terminal and closes the root.
func (b *Executor) Close() error {
	b.mu.Lock()
	b.closed = true
	live := b.live
	b.live = map[closer]struct{}{}
	b.mu.Unlock()
	for c := range live {
		_ = c.Close()
	}
	b.javaMu.Lock()
	if b.javaDir != "" {
		_ = os.RemoveAll(b.javaDir)
	}
	b.javaMu.Unlock()
	return b.root.Close()
}

// track remembers c until untrack, so that Close can stop it.
func (b *Executor) track(c closer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("osbackend: closed")
	}
	b.live[c] = struct{}{}
	return nil
}

func (b *Executor) untrack(c closer) {
	b.mu.Lock()
	delete(b.live, c)
	b.mu.Unlock()
}

// hostDir maps a guest directory to a host path ("" = Workdir) and checks
// that it is a directory.
func (b *Executor) hostDir(guest string) (string, error) {
	dir := b.opts.Workdir
	if guest != "" {
		if path.IsAbs(guest) {
			dir = filepath.Join(b.opts.RootDir, filepath.FromSlash(path.Clean(guest)))
		} else {
			dir = filepath.Join(b.opts.Workdir, filepath.FromSlash(guest))
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("working directory %s: %w", guest, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("working directory %s is not a directory: %w", guest, fs.ErrInvalid)
	}
	return dir, nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// environ returns the base environment with extra variables set.
func (b *Executor) environ(extra map[string]string) []string { return environ(b.baseEnv(), extra) }

// environ returns base with extra variables set.
func environ(base []string, extra map[string]string) []string {
	env := make([]string, 0, len(base)+len(extra))
	keys := sortedKeys(extra)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			env = append(env, kv)
		}
	}
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// getenv reads a variable of the base environment.
func (b *Executor) getenv(key string) string {
	for _, kv := range b.baseEnv() {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds an executable on the PATH of the base environment.
func (b *Executor) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if isExecutable(name) {
			return name, nil
		}
		return "", fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	for _, dir := range filepath.SplitList(b.getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH: %w", name, fs.ErrNotExist)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// stopErr is the error of an execution stopped because ctx ended: its
// cause when that names why (timeout, interrupt, output limit), else
// execd.ErrTimeout or execd.ErrInterrupted.
func stopErr(ctx context.Context) error {
	cause := context.Cause(ctx)
	for _, known := range []error{execd.ErrInterrupted, execd.ErrTimeout, execd.ErrOutputLimit} {
		if errors.Is(cause, known) {
			return cause
		}
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		return execd.ErrTimeout
	}
	return execd.ErrInterrupted
}

// errEOF is io.EOF (named here to keep the imports of pty.go small).
var errEOF = io.EOF
