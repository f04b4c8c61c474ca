package pyguest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/pydriver"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// errExited is the cancellation cause of an instance whose guest ended.
var errExited = errors.New("python guest exited")

// killWait bounds how long a kill waits for the guest goroutine to return.
const killWait = 10 * time.Second

// instance is one live CPython guest running driver.py.
type instance struct {
	name   string
	sw     *wasmfs.Switch
	limit  *engine.MemoryLimit
	ctx    context.Context // lifetime of the guest; cancelling it kills the guest
	cancel context.CancelCauseFunc
	stdin  *inbox
	rt     wazero.Runtime
	egress egressSlot // set when a sandbox claims the guest

	exited chan struct{} // closed when the guest has stopped
	runErr error         // InstantiateModule's error; read after exited

	sink
}

// sink routes a guest's output and control frames to the current
// execution; both builds of the guest use it.
type sink struct {
	ready    chan struct{} // closed on the driver's ready frame (npm build)
	mu       sync.Mutex
	cur      *execution   // nil between executions
	startErr bytes.Buffer // stderr outside executions (diagnostics)
	readyOne sync.Once
}

// execution is the state of one Run on an instance.
type execution struct {
	out      execd.Output
	limit    int64 // output cap in bytes; <= 0 = none
	written  int64
	done     chan struct{} // closed on the done frame
	overflow chan struct{} // closed when output passed limit
	over     bool
	execErr  *execd.ExecError // set before done is closed
	// onOverflow, when set, is called once overflow is closed, on the
	// goroutine that wrote the output (the reactor kills its guest).
	onOverflow func()
}

// overflowed marks e over its output cap. The sink's mutex is held.
func (e *execution) overflowed() {
	e.over = true
	close(e.overflow)
	if e.onOverflow != nil {
		e.onOverflow()
	}
}

// frame is a control frame from driver.py.
type frame struct {
	Type      string            `json:"type"`
	Data      map[string]string `json:"data"`
	EName     string            `json:"ename"`
	EValue    string            `json:"evalue"`
	Traceback []string          `json:"traceback"`
}

// start instantiates a guest running the driver and waits until it is ready.
// The guest lives until kill or until base is done; ctx only bounds start-up.
func (m *Manager) start(ctx context.Context) (*instance, error) {
	inst := &instance{
		name:   m.nextName(),
		sw:     wasmfs.NewSwitch(),
		limit:  &engine.MemoryLimit{},
		rt:     m.opts.Engine.Runtime(),
		exited: make(chan struct{}),
		sink:   sink{ready: make(chan struct{})},
	}
	inst.limit.Set(m.opts.MemoryLimitBytes)
	inst.ctx, inst.cancel = context.WithCancelCause(m.base)
	in := newInbox()
	inst.stdin = in

	dm := &pydriver.Demuxer{
		Stdout:   func(p []byte) { inst.output(p, false) },
		Frame:    inst.onFrame,
		MaxFrame: int(m.opts.OutputLimitBytes) + 1<<16,
		TooLong:  inst.frameTooLong,
	}
	fsc := wazero.NewFSConfig().(sysfs.FSConfig).
		WithSysFSMount(inst.sw, "/").(sysfs.FSConfig).
		WithSysFSMount(&netFS{ctx: inst.ctx, egress: inst.egress.get}, netDir).
		WithFSMount(m.site, siteDir)
	cfg := wazero.NewModuleConfig().
		WithName(inst.name).
		WithArgs("python3", "-u", "-c", pydriver.Source).
		WithEnv("HOME", "/").
		WithEnv("PYTHONDONTWRITEBYTECODE", "1").
		WithEnv("PYTHONUNBUFFERED", "1").
		WithEnv("PYTHONPATH", siteDir).
		WithStdin(in).
		WithStdout(dm).
		WithStderr(writerFunc(func(p []byte) { inst.output(p, true) })).
		WithFSConfig(fsc).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(ctxSleep(inst.ctx)).
		WithRandSource(rand.Reader)

	// A guest blocked reading stdin does not see its context end; closing
	// its stdin wakes it.
	context.AfterFunc(inst.ctx, func() { _ = in.CloseWithError(context.Cause(inst.ctx)) })
	go func() {
		mod, err := inst.rt.InstantiateModule(engine.WithMemoryLimiter(inst.ctx, inst.limit), m.cm, cfg)
		if mod != nil {
			_ = mod.Close(context.WithoutCancel(inst.ctx))
		}
		inst.runErr = err
		_ = in.CloseWithError(errExited)
		inst.cancel(errExited)
		close(inst.exited)
	}()

	select {
	case <-inst.ready:
		return inst, nil
	case <-inst.exited:
		inst.mu.Lock()
		msg := inst.startErr.String()
		inst.mu.Unlock()
		return nil, fmt.Errorf("python guest failed to start: %v: %s", inst.runErr, msg)
	case <-ctx.Done():
		inst.kill(context.Cause(ctx))
		return nil, fmt.Errorf("starting python guest: %w", context.Cause(ctx))
	}
}

// alive reports whether the guest is still running.
func (inst *instance) alive() bool {
	select {
	case <-inst.exited:
		return false
	default:
		return true
	}
}

// kill stops the guest and waits (bounded) until it has stopped.
func (inst *instance) kill(cause error) {
	inst.cancel(cause)
	_ = inst.stdin.CloseWithError(cause)
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-inst.exited:
	case <-t.C:
	}
}

// send writes one request to the driver: "<kind> <length>\n<payload>".
func (inst *instance) send(kind string, payload []byte) error {
	msg := make([]byte, 0, len(kind)+len(payload)+16)
	msg = append(msg, kind...)
	msg = append(msg, ' ')
	msg = strconv.AppendInt(msg, int64(len(payload)), 10)
	msg = append(msg, '\n')
	msg = append(msg, payload...)
	if _, err := inst.stdin.Write(msg); err != nil {
		return fmt.Errorf("python guest not reading: %w", err)
	}
	return nil
}

// begin makes e the current execution.
func (inst *sink) begin(e *execution) {
	inst.mu.Lock()
	inst.cur = e
	inst.mu.Unlock()
}

// detach forgets the current execution; its Output is not called again.
func (inst *sink) detach() {
	inst.mu.Lock()
	inst.cur = nil
	inst.mu.Unlock()
}

// linearMemoryBytes returns the size of the guest's linear memory, or 0.
func (inst *instance) linearMemoryBytes() uint64 {
	mod := inst.rt.Module(inst.name)
	if mod == nil {
		return 0
	}
	var mem api.Memory = mod.Memory()
	if mem == nil {
		return 0
	}
	return uint64(mem.Size())
}

// output is called on the guest goroutine with user stdout or stderr.
func (inst *sink) output(p []byte, stderr bool) {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	e := inst.cur
	if e == nil {
		if stderr && inst.startErr.Len() < 4096 {
			inst.startErr.Write(p[:min(len(p), 4096)])
		}
		return
	}
	if e.over {
		return
	}
	if e.limit > 0 && e.written+int64(len(p)) > e.limit {
		p = p[:e.limit-e.written]
		e.over = true
	}
	e.written += int64(len(p))
	if len(p) > 0 {
		c := bytes.Clone(p) // p aliases guest memory
		if stderr {
			e.out.Stderr(c)
		} else {
			e.out.Stdout(c)
		}
	}
	if e.over {
		e.overflowed()
	}
}

// frameTooLong is called when a control frame exceeds the demuxer's cap.
func (inst *sink) frameTooLong() {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if e := inst.cur; e != nil && !e.over {
		e.overflowed()
	}
}

// onFrame handles one control frame on the guest goroutine.
func (inst *sink) onFrame(b []byte) {
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return // not ours after all; the magic makes this practically impossible
	}
	if f.Type == "ready" {
		inst.readyOne.Do(func() { close(inst.ready) })
		return
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	e := inst.cur
	if e == nil || e.over {
		return
	}
	switch f.Type {
	case "result":
		if len(f.Data) == 0 {
			return
		}
		n := int64(0)
		for _, v := range f.Data {
			n += int64(len(v))
		}
		if e.limit > 0 && e.written+n > e.limit {
			e.overflowed()
			return
		}
		e.written += n
		e.out.Result(f.Data)
	case "error":
		tb := f.Traceback
		if tb == nil {
			tb = []string{}
		}
		e.execErr = &execd.ExecError{EName: f.EName, EValue: f.EValue, Traceback: tb}
	case "done":
		inst.cur = nil
		close(e.done)
	}
}

// ctxSleep returns a nanosleep that wakes early when ctx is done, so a guest
// in time.sleep can be killed promptly.
func ctxSleep(ctx context.Context) func(ns int64) {
	return func(ns int64) {
		if ns <= 0 {
			return
		}
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// writerFunc adapts a function to io.Writer; it never fails.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) {
	f(p)
	return len(p), nil
}
