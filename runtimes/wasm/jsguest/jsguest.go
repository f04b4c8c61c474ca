// Package jsguest runs JavaScript in QuickJS-NG compiled to WebAssembly
// (the quickjs-wasi reactor): persistent interpreter contexts for the execd
// code API and `node`-style commands for the wasm shell. The host side of
// the guest's ABI (its env.host_* imports and qjs_* exports) is implemented
// here; a small JavaScript prelude adds node-like globals (console, process,
// require('fs') over the sandbox's os.Root, timers, TextEncoder, Buffer).
package jsguest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

//go:embed prelude.js
var preludeJS string

// Defaults for Options.
const (
	// DefaultMemoryLimitBytes is the JS heap cap of a VM without a limit.
	DefaultMemoryLimitBytes = 256 << 20
	// DefaultOutputLimitBytes is the output cap of one Interpreter.Run.
	DefaultOutputLimitBytes = 10 << 20
)

// ErrClosed is returned by calls on a closed Manager or Interpreter.
var ErrClosed = errors.New("jsguest: closed")

// Options configures a Manager.
type Options struct {
	// Engine provides the wazero runtime and the compiled QuickJS guest.
	Engine *engine.Engine
	// MemoryLimitBytes caps the JavaScript heap of each VM when the caller
	// gives no limit; 0 = DefaultMemoryLimitBytes.
	MemoryLimitBytes int64
	// OutputLimitBytes caps stdout+stderr of one Interpreter.Run;
	// 0 = DefaultOutputLimitBytes.
	OutputLimitBytes int64
}

// Validate reports whether o can be used.
//
// # Errors
// When Engine is nil or a limit is negative.
func (o Options) Validate() error {
	switch {
	case o.Engine == nil:
		return errors.New("jsguest: Options.Engine is required")
	case o.MemoryLimitBytes < 0 || o.OutputLimitBytes < 0:
		return errors.New("jsguest: limits must not be negative")
	}
	return nil
}

// Manager creates JavaScript VMs. It is safe for concurrent use; each VM it
// creates is independent.
type Manager struct {
	opts    Options
	eng     *engine.Engine
	mod     *engine.ImageModule // QuickJS without its data segments
	env     api.Module
	prelude string
	started time.Time // the origin of the VMs' monotonic clock

	ver versionCache

	// viewMu is held (read) while an instance maps the image or a save
	// reads it; Close takes it to close the image.
	viewMu  sync.RWMutex
	imgOnce sync.Once
	img     *image
	imgErr  error

	mu     sync.Mutex
	closed bool
}

// NewManager compiles (or takes from the engine's cache) the QuickJS guest
// and prepares the host functions it imports.
//
// # Errors
// Invalid options; engine.ErrGuestMissing when quickjs.wasm is absent or
// corrupt; a compile or instantiation failure.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.MemoryLimitBytes == 0 {
		opts.MemoryLimitBytes = DefaultMemoryLimitBytes
	}
	if opts.OutputLimitBytes == 0 {
		opts.OutputLimitBytes = DefaultOutputLimitBytes
	}
	mod, err := opts.Engine.CompileForImages(ctx, engine.QuickJS)
	if err != nil {
		return nil, err
	}
	env, err := hostModule(ctx, mod.Runtime())
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, eng: opts.Engine, mod: mod, env: env, prelude: preludeJS, started: time.Now()}
	if _, err := m.image(ctx); err != nil {
		_ = env.Close(ctx)
		return nil, err
	}
	return m, nil
}

// Close releases the Manager's memory image and host module. Interpreters
// it created should be closed first (on Linux those still open keep the
// image's pages they map, but can no longer be saved). It is safe to call
// more than once.
func (m *Manager) Close() error {
	m.viewMu.Lock()
	defer m.viewMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if m.img != nil {
		_ = m.img.mem.Close()
	}
	return m.env.Close(context.Background())
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// NewInterpreter returns a fresh persistent JavaScript context whose
// filesystem is root (guest "/" = root) with working directory cwd (a guest
// path; "" = "/"). memLimitBytes caps its heap (0 = the Manager default).
//
// Run evaluates code as a global script, so top-level var, let, const,
// function and class declarations persist between runs (re-declaring a
// let/const name is a SyntaxError, as in a browser console). Top-level
// await is supported. The text/plain result is rendered like node's REPL:
// strings are quoted ('abc'), objects use util.inspect style. fetch sends
// HTTP requests through eg (nil = the sandbox has no network).
//
// # Errors
// ErrClosed after Close; a failure to instantiate or initialise the guest.
func (m *Manager) NewInterpreter(ctx context.Context, root *os.Root, cwd string, memLimitBytes int64, eg engine.Egress) (execd.Interpreter, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	if memLimitBytes <= 0 {
		memLimitBytes = m.opts.MemoryLimitBytes
	}
	it := &interpreter{m: m, root: root, cwd: cleanCwd(cwd), memLimit: memLimitBytes, egress: eg}
	if err := it.start(ctx); err != nil {
		return nil, err
	}
	return it, nil
}

// image returns the initialised VM image, building it on first use.
func (m *Manager) image(ctx context.Context) (*image, error) {
	m.imgOnce.Do(func() { m.img, m.imgErr = m.boot(ctx) })
	return m.img, m.imgErr
}

// cleanCwd returns cwd as an absolute, clean guest path.
func cleanCwd(cwd string) string {
	if cwd == "" {
		return "/"
	}
	return path.Clean("/" + cwd)
}

// newConfiguredVM creates a VM bound to root, cwd and eg with the given
// process setup (argv, env).
func (m *Manager) newConfiguredVM(ctx context.Context, root *os.Root, cwd string, memLimit int64, eg engine.Egress, argv []string, env map[string]string) (*vm, error) {
	v, err := m.newVM(ctx, memLimit)
	if err != nil {
		return nil, err
	}
	v.root = root
	v.cwd = cwd
	v.egress = eg
	if env == nil {
		env = map[string]string{}
	}
	if err := v.setup(argv, env); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

// setup passes argv, env and cwd to the prelude.
func (v *vm) setup(argv []string, env map[string]string) (err error) {
	defer onTrap(func(e error) {
		err = e
	})
	cfg, err := jsonMarshal(map[string]any{"argv": argv, "env": env, "cwd": v.cwd})
	if err != nil {
		return err
	}
	r := v.hyCall("setup", cfg)
	defer v.freeValue(r)
	if v.isException(r) {
		return fmt.Errorf("%w: %w", errTrap, v.initError("setup"))
	}
	return nil
}
