package pyguest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/pydriver"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// reactorInterp is a persistent Python context of the source build. A
// timeout or an interrupt stops the running cell and keeps the context's
// state; after its guest was killed (it ignored the interrupt, its output
// passed the cap, it crashed) the next Run starts a fresh clone.
type reactorInterp struct {
	m        *Manager
	root     *os.Root
	cwd      string
	memLimit int64
	egress   engine.Egress

	running sync.Mutex // held for the whole of Run

	mu       sync.Mutex
	inst     *rinstance // nil after a kill, until the next Run
	fresh    bool       // inst has not had its init request yet
	reseed   bool       // inst is a fork: reseed its random generator first
	restored bool       // inst was restored: the files it had open are gone
	closed   bool
}

var _ execd.Interpreter = (*reactorInterp)(nil)

// newReactorInterp clones a context for root, working in cwd.
func (m *Manager) newReactorInterp(ctx context.Context, root *os.Root, cwd string, memLimit int64, eg engine.Egress) (*reactorInterp, error) {
	it := &reactorInterp{m: m, root: root, cwd: cwd, memLimit: memLimit, egress: eg}
	if _, err := it.current(ctx); err != nil {
		return nil, err
	}
	return it, nil
}

// current returns the live guest, cloning a fresh one when there is none.
func (it *reactorInterp) current(ctx context.Context) (*rinstance, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed || it.m.isClosed() {
		return nil, ErrClosed
	}
	if it.inst != nil {
		return it.inst, nil
	}
	limit := it.memLimit
	if limit <= 0 {
		limit = it.m.opts.MemoryLimitBytes
	}
	inst := it.m.takeReady(it.root, limit, it.egress)
	if inst == nil {
		var err error
		if inst, err = it.m.rx.clone(ctx, it.m.base, wasmfs.New(it.root), it.egress, limit, it.m.opts.OutputLimitBytes); err != nil {
			return nil, fmt.Errorf("pyguest: new context: %w", err)
		}
	}
	it.inst, it.fresh = inst, true
	return inst, nil
}

// Run implements execd.Interpreter.
func (it *reactorInterp) Run(ctx context.Context, code string, out execd.Output) (*execd.ExecError, error) {
	if !it.running.TryLock() {
		return nil, fmt.Errorf("pyguest: %w", execd.ErrBusy)
	}
	defer it.running.Unlock()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("pyguest: not started: %w", stopReason(ctx))
	}
	inst, err := it.current(ctx)
	if err != nil {
		return nil, err
	}
	var reqs []byte
	it.mu.Lock()
	switch {
	case it.fresh && inst.sw != nil && it.cwd == it.m.opts.ReadyCwd && !it.reseed:
		// A ready clone warmed where this context starts: reseeded,
		// in its directory, HOME set.
		it.fresh = false
	case it.fresh:
		it.fresh, it.reseed = false, false
		// A ready clone was reseeded when it was warmed.
		init, err := json.Marshal(map[string]any{"cwd": it.cwd, "env": map[string]string{"HOME": it.cwd}, "clone": inst.sw == nil})
		if err != nil {
			it.mu.Unlock()
			return nil, err
		}
		reqs = pydriver.AppendRequest(reqs, pydriver.RequestInit, init)
	case it.reseed || it.restored:
		init, _ := json.Marshal(map[string]any{"clone": it.reseed, "restored": it.restored})
		it.reseed, it.restored = false, false
		reqs = pydriver.AppendRequest(reqs, pydriver.RequestInit, init)
	}
	it.mu.Unlock()
	reqs = pydriver.AppendRequest(reqs, pydriver.RequestExec, []byte(code))
	e := &execution{
		out:      out,
		limit:    it.m.opts.OutputLimitBytes,
		done:     make(chan struct{}),
		overflow: make(chan struct{}),
	}
	stopped, err := inst.exec(ctx, reqs, e)
	if err != nil {
		it.lose(inst, err)
		return nil, it.lostError(ctx, inst, e, stopped, err)
	}
	if stopped {
		// The cell got the exception and the driver returned: the
		// context lives on.
		return nil, fmt.Errorf("pyguest: %w", stopReason(ctx))
	}
	select {
	case <-e.done:
		return e.execErr, nil
	default:
		err := errors.New("the driver returned without finishing the execution")
		it.lose(inst, err)
		select {
		case <-e.overflow:
			// The output cap stopped the cell while the driver was
			// returning: that, not the early return, is the reason.
			return nil, fmt.Errorf("pyguest: %w: %w", execd.ErrOutputLimit, execd.ErrContextLost)
		default:
		}
		return nil, fmt.Errorf("pyguest: %w: %w", err, execd.ErrContextLost)
	}
}

// lostError describes a run whose guest died.
func (it *reactorInterp) lostError(ctx context.Context, inst *rinstance, e *execution, stopped bool, err error) error {
	cause := context.Cause(inst.life)
	select {
	case <-e.overflow:
		return fmt.Errorf("pyguest: %w: %w", execd.ErrOutputLimit, execd.ErrContextLost)
	default:
	}
	switch {
	case errors.Is(cause, errIgnoredInterrupt):
		return fmt.Errorf("pyguest: %w: %w: %w", stopReason(ctx), errIgnoredInterrupt, execd.ErrContextLost)
	case stopped || ctx.Err() != nil:
		return fmt.Errorf("pyguest: %w: %w", stopReason(ctx), execd.ErrContextLost)
	case errors.Is(cause, ErrClosed) || it.isClosed():
		return fmt.Errorf("pyguest: %w: %w", ErrClosed, execd.ErrContextLost)
	}
	return fmt.Errorf("pyguest: interpreter died (%v): %w", exitReason(err), execd.ErrContextLost)
}

func (it *reactorInterp) isClosed() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.closed
}

// lose closes inst and forgets it.
func (it *reactorInterp) lose(inst *rinstance, cause error) {
	inst.close(cause)
	it.mu.Lock()
	if it.inst == inst {
		it.inst = nil
	}
	it.mu.Unlock()
}

// Close implements execd.Interpreter: it kills the guest and releases its
// memory. A Run in progress returns an error wrapping ErrClosed and
// execd.ErrContextLost.
func (it *reactorInterp) Close() error {
	it.mu.Lock()
	if it.closed {
		it.mu.Unlock()
		return nil
	}
	it.closed = true
	inst := it.inst
	it.inst = nil
	it.mu.Unlock()
	if inst != nil {
		inst.close(ErrClosed)
	}
	return nil
}

// LinearMemoryBytes returns the size of the context's linear memory (0
// when it has no live guest).
func (it *reactorInterp) LinearMemoryBytes() uint64 {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.inst == nil {
		return 0
	}
	return it.inst.linearMemoryBytes()
}
