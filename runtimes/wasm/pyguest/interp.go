package pyguest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// interpreter is a persistent Python context. After its guest is killed
// (timeout, interrupt, output limit, crash) the next Run transparently claims
// a fresh guest, so state starts over.
type interpreter struct {
	m        *Manager
	root     *os.Root
	cwd      string
	memLimit int64
	egress   engine.Egress

	running sync.Mutex // held for the whole of Run

	mu     sync.Mutex
	inst   *instance // nil after a kill, until the next Run
	closed bool
}

var _ execd.Interpreter = (*interpreter)(nil)

// Run implements execd.Interpreter.
func (it *interpreter) Run(ctx context.Context, code string, out execd.Output) (*execd.ExecError, error) {
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
	e := &execution{
		out:      out,
		limit:    it.m.opts.OutputLimitBytes,
		done:     make(chan struct{}),
		overflow: make(chan struct{}),
	}
	inst.begin(e)
	if err := inst.send("exec", []byte(code)); err != nil {
		it.lose(inst, err)
		return nil, fmt.Errorf("pyguest: %w: %w", execd.ErrContextLost, err)
	}
	select {
	case <-e.done:
		return e.execErr, nil
	case <-e.overflow:
		it.lose(inst, execd.ErrOutputLimit)
		return nil, fmt.Errorf("pyguest: %w: %w", execd.ErrOutputLimit, execd.ErrContextLost)
	case <-inst.exited:
		select {
		case <-e.done:
			it.lose(inst, errExited)
			return e.execErr, nil
		default:
		}
		it.lose(inst, errExited)
		it.mu.Lock()
		closed := it.closed
		it.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("pyguest: %w: %w", ErrClosed, execd.ErrContextLost)
		}
		return nil, fmt.Errorf("pyguest: interpreter died (%v): %w", exitReason(inst.runErr), execd.ErrContextLost)
	case <-ctx.Done():
		reason := stopReason(ctx)
		it.lose(inst, reason)
		return nil, fmt.Errorf("pyguest: %w: %w", reason, execd.ErrContextLost)
	}
}

// current returns the live guest, claiming a fresh one after a kill.
func (it *interpreter) current(ctx context.Context) (*instance, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed || it.m.isClosed() {
		return nil, ErrClosed
	}
	if it.inst != nil && it.inst.alive() {
		return it.inst, nil
	}
	inst, err := it.m.claim(ctx, it.root, it.cwd, it.memLimit, it.egress)
	if err != nil {
		return nil, fmt.Errorf("pyguest: fresh interpreter: %w", err)
	}
	it.inst = inst
	return inst, nil
}

// lose kills inst and forgets it; its Output is not called afterwards.
func (it *interpreter) lose(inst *instance, cause error) {
	inst.detach()
	inst.kill(cause)
	it.mu.Lock()
	if it.inst == inst {
		it.inst = nil
	}
	it.mu.Unlock()
}

// Close implements execd.Interpreter: it kills the guest. A Run in progress
// returns an error wrapping ErrClosed and execd.ErrContextLost.
func (it *interpreter) Close() error {
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
		inst.kill(ErrClosed)
	}
	return nil
}

// stopReason maps a done ctx to execd.ErrInterrupted or execd.ErrTimeout.
func stopReason(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), execd.ErrInterrupted) {
		return execd.ErrInterrupted
	}
	return execd.ErrTimeout
}

// exitReason describes why a guest stopped.
func exitReason(err error) string {
	if err == nil {
		return "guest exited"
	}
	return err.Error()
}
