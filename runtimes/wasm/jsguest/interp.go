package jsguest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// interpreter is a persistent JavaScript context (execd.Interpreter).
type interpreter struct {
	m        *Manager
	root     *os.Root
	cwd      string
	memLimit int64
	egress   engine.Egress

	mu      sync.Mutex
	vm      *vm // nil after the state was lost; recreated by the next Run
	closed  bool
	running atomic.Pointer[vm] // the vm of the Run in progress, for Close
	closing atomic.Bool        // Close has begun
}

var _ execd.Interpreter = (*interpreter)(nil)

// start creates the VM.
func (it *interpreter) start(ctx context.Context) error {
	v, err := it.m.newConfiguredVM(ctx, it.root, it.cwd, it.memLimit, it.egress, []string{"/usr/local/bin/node"}, nil)
	if err != nil {
		return err
	}
	it.vm = v
	return nil
}

// outputSink adapts execd.Output to the guest's write functions.
func outputSink(out execd.Output) (stdout, stderr func([]byte) error) {
	return func(p []byte) error { out.Stdout(p); return nil },
		func(p []byte) error { out.Stderr(p); return nil }
}

// Run implements execd.Interpreter. A process.exit(n) ends the run; n != 0
// is reported as an ExecError named "ProcessExit".
//
// # Errors
// See execd.Interpreter. ErrClosed after Close.
func (it *interpreter) Run(ctx context.Context, code string, out execd.Output) (*execd.ExecError, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return nil, ErrClosed
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("javascript: %w", stopCause(ctx))
	}
	if it.vm == nil {
		if err := it.start(ctx); err != nil {
			return nil, err
		}
	}
	v := it.vm
	it.running.Store(v)
	defer it.running.Store(nil)
	if it.closing.Load() {
		// Close began before it could see this Run: it waits for it.mu.
		return nil, ErrClosed
	}
	stdout, stderr := outputSink(out)
	rio := &runIO{stdout: stdout, stderr: stderr, limit: it.m.opts.OutputLimitBytes}
	flags := uint32(evalGlobal)
	async := mayAwait(code)
	if async {
		flags |= evalAsync
	}
	res, err := v.exec(ctx, rio, true, func() uint32 {
		val := v.eval(code, "<repl>", flags)
		if async && !v.isException(val) {
			// An async script's promise resolves to {value: completion}.
			return v.hyCallValue("unwrapAsync", val)
		}
		return val
	}, func(val uint32) (string, bool) {
		if v.call32(v.x.isUndefined, uint64(val)) != 0 {
			return "", false
		}
		return v.render(val, true), true
	})
	if res.lost {
		it.vm = nil
		if errors.Is(err, ErrClosed) {
			return nil, fmt.Errorf("javascript: %w: %w", ErrClosed, execd.ErrContextLost)
		}
		return nil, lostError(ctx, res.stopped, err)
	}
	switch res.stopped {
	case stopContext:
		return nil, fmt.Errorf("javascript: %w", stopCause(ctx))
	case stopOutput:
		return nil, fmt.Errorf("javascript: %w (%d bytes)", execd.ErrOutputLimit, it.m.opts.OutputLimitBytes)
	case stopExit:
		if rio.exitCode != 0 {
			v := fmt.Sprintf("process.exit(%d)", rio.exitCode)
			return &execd.ExecError{EName: "ProcessExit", EValue: v, Traceback: []string{"ProcessExit: " + v}}, nil
		}
		return nil, nil
	}
	if res.exc != nil {
		return toExecError(res.exc), nil
	}
	if res.rendered {
		out.Result(map[string]string{"text/plain": res.text})
	}
	return nil, nil
}

// Close implements execd.Interpreter. A Run in progress is stopped at once
// (vm.destroy), since the interpreter goes away with it and a call stuck in
// C would never poll the interrupt hook.
func (it *interpreter) Close() error {
	it.closing.Store(true)
	if v := it.running.Load(); v != nil {
		v.stop.CompareAndSwap(uint32(stopNone), uint32(stopContext))
		v.destroy(ErrClosed)
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return nil
	}
	it.closed = true
	if it.vm != nil {
		it.vm.close()
		it.vm = nil
	}
	return nil
}

// mayAwait reports whether code may use top-level await, which needs the
// async evaluation mode.
func mayAwait(code string) bool { return strings.Contains(code, "await") }

// toExecError converts a guest error.
func toExecError(ge *guestError) *execd.ExecError {
	tb := strings.Split(strings.TrimRight(ge.Text, "\n"), "\n")
	return &execd.ExecError{EName: ge.Name, EValue: ge.Message, Traceback: tb}
}

// stopCause maps the context's cause to ErrTimeout or ErrInterrupted.
func stopCause(ctx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, execd.ErrTimeout), errors.Is(cause, context.DeadlineExceeded):
		return execd.ErrTimeout
	case errors.Is(cause, execd.ErrInterrupted):
		return execd.ErrInterrupted
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return execd.ErrTimeout
	}
	return execd.ErrInterrupted
}

// lostError describes an execution that destroyed the interpreter.
func lostError(ctx context.Context, stopped stopReason, err error) error {
	if stopped == stopContext || ctx.Err() != nil {
		return fmt.Errorf("javascript: %w: %w (%v)", stopCause(ctx), execd.ErrContextLost, err)
	}
	return fmt.Errorf("javascript: %w: %w", execd.ErrContextLost, err)
}

func jsonMarshal(x any) (string, error) {
	b, err := json.Marshal(x)
	return string(b), err
}
