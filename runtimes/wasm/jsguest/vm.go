package jsguest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// Flags of qjs_eval (the JS_EVAL_* constants of QuickJS).
const (
	evalGlobal = 0
	evalStrict = 1 << 3
	evalAsync  = 1 << 7
)

// States returned by qjs_promise_state.
const (
	promisePending   = 0
	promiseFulfilled = 1
	promiseRejected  = 2
)

// maxStackSize is the JS stack limit: half of the guest's 1 MiB stack.
const maxStackSize = 512 << 10

// stopReason says why the host asked the guest to stop.
type stopReason uint32

const (
	stopNone stopReason = iota
	stopContext
	stopOutput
	stopExit
)

// errTrap marks a failure of the wasm instance itself (a trap, or the module
// being closed): the interpreter's state is gone.
var errTrap = errors.New("quickjs instance failed")

// trap carries a wasm-level failure through panics inside the vm helpers; it
// is recovered at the entry points (Run, RunCommand, NewInterpreter).
type trap struct{ err error }

// onTrap, deferred, hands the error of a trap the guest raised to handle;
// any other panic goes on.
func onTrap(handle func(error)) {
	if r := recover(); r != nil {
		t, ok := r.(trap)
		if !ok {
			panic(r)
		}
		handle(t.err)
	}
}

// vmKey is the context key under which host functions find their vm.
type vmKey struct{}

// exports are the guest functions the host drives.
type exports struct {
	malloc, free                        api.Function
	eval, call                          api.Function
	getException, isException           api.Function
	isUncatchable                       api.Function
	freeValue, dupValue                 api.Function
	getStringLen, freeCString           api.Function
	newString, newUint8Array, newNumber api.Function
	getPropString, setPropString        api.Function
	getGlobal, getUndefined             api.Function
	isUndefined, isString               api.Function
	isPromise, promiseState             api.Function
	promiseResult, promiseMarkHandled   api.Function
	isJobPending, executePendingJob     api.Function
	newHostFunction                     api.Function
	newError, throw                     api.Function
	getVersion                          api.Function
	getArrayBuffer                      api.Function
}

// vm is one QuickJS runtime and context inside one wasm instance. It is used
// by one goroutine at a time.
type vm struct {
	mod  api.Module
	mem  api.Memory
	imem *engine.ImageMemory // the memory's handle when it started from the image
	x    exports

	// ctx is passed to every call into the guest; it carries the vm for the
	// host functions and, during a run, can be cancelled to kill the module.
	ctx context.Context
	// scratch is an 8-byte guest buffer for out-parameters.
	scratch uint32
	// hy is the box of the prelude's internal object.
	hy uint32

	stop atomic.Uint32 // a stopReason; non-zero makes host_interrupt stop the guest
	io   *runIO        // the current run's I/O, nil between runs
	// destroyOnce sets the loop guard once; destroyed holds why (see
	// destroy). cancel cancels the running execution's calls.
	destroyOnce sync.Once
	destroyed   atomic.Pointer[error]
	cancel      atomic.Pointer[context.CancelFunc]

	rejections []rejection // unhandled promise rejections seen during the run
	dead       bool

	root     *os.Root      // the guest filesystem; nil = none
	egress   engine.Egress // carries fetch; nil = no network
	cwd      string        // guest working directory (absolute)
	memLimit int64         // JS heap cap in bytes
}

// rejection is a promise rejected without a handler.
type rejection struct{ promise, reason uint32 }

// hostModule builds the "env" functions every QuickJS instance imports. They
// find their vm through the call context, so one anonymous instance of the
// module serves all vms of a Manager.
func hostModule(ctx context.Context, rt wazero.Runtime) (api.Module, error) {
	i32 := api.ValueTypeI32
	b := rt.NewHostModuleBuilder("env")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostCall),
		[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}).Export("host_call")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostInterrupt),
		nil, []api.ValueType{i32}).Export("host_interrupt")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostPromiseRejection),
		[]api.ValueType{i32, i32, i32}, nil).Export("host_promise_rejection")
	// Modules are not supported: import statements fail in the guest.
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
		stack[0] = 0
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("host_module_normalize")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
		stack[0] = 0
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("host_module_load")
	// Sandboxes run in UTC.
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
		stack[0] = 0
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("host_get_timezone_offset")
	cm, err := b.Compile(ctx)
	if err != nil {
		return nil, fmt.Errorf("compile host module: %w", err)
	}
	return rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
}

// image is the memory of a fully initialised VM (QuickJS runtime and
// context created, host functions and prelude installed) and the pointers
// the host keeps for it. A new VM is an instance whose memory starts as
// this image, mapped copy-on-write (engine.WithImage): it costs an
// instantiation and the pages the VM writes, not a parse of the prelude
// nor a copy of the heap. The image is booted on wazero's fake clocks and
// random source, so every process of a build makes the same bytes; id, a
// digest of them, names the image in the states saved against it.
type image struct {
	mem           *engine.Image
	id            string
	stackPointer  uint64
	rtPtr, ctxPtr uint32
	hy, scratch   uint32
}

// linearLimit is the cap of the linear memory of a VM whose JS heap is
// capped at memLimit bytes.
func linearLimit(memLimit int64) int64 { return memLimit + memLimit/4 + 16<<20 }

// instantiate creates a wasm instance of the guest for v. memory, when
// not nil, sets up the instance's linear memory on the context of the
// instantiation (engine.WithImage, engine.WithMemoryLimit). Only the
// image's boot instance (boot) runs on wazero's deterministic clocks and
// random source; every VM has the real ones.
func (m *Manager) instantiate(ctx context.Context, v *vm, boot bool, memory func(context.Context) context.Context) error {
	v.ctx = context.WithValue(context.WithoutCancel(ctx), vmKey{}, v)
	ictx := experimental.WithImportResolver(v.ctx, func(name string) api.Module {
		if name == "env" {
			return m.env
		}
		return nil
	})
	if memory != nil {
		ictx = memory(ictx)
	}
	cfg := wazero.NewModuleConfig().WithName("").
		WithStartFunctions() // a reactor: _initialize is called explicitly
	if !boot {
		// QuickJS takes performance.now()'s origin at boot, where the
		// fake clock read about 0; counting the VMs' monotonic clock from
		// the Manager's start makes performance.now() the time since then.
		cfg = cfg.WithSysWalltime().WithNanotime(m.nanotime, 1).WithSysNanosleep().
			WithRandSource(rand.Reader)
	}
	mod, err := m.mod.Instantiate(ictx, cfg)
	if err != nil {
		return fmt.Errorf("instantiate quickjs: %w", err)
	}
	v.mod = mod
	v.mem = mod.Memory()
	if err := v.bind(); err != nil {
		v.close()
		return err
	}
	return nil
}

// nanotime is the VMs' monotonic clock: nanoseconds since the Manager
// was made.
func (m *Manager) nanotime() int64 { return int64(time.Since(m.started)) }

// withLinearLimit caps the linear memory of a VM whose JS heap is capped
// at memLimit bytes (0 = no cap). The linear memory gets headroom over the
// JS heap limit for the allocator, the stack and static data, so QuickJS's
// own limit is the one that normally fires.
func withLinearLimit(memLimit int64) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context {
		if memLimit <= 0 {
			return ctx
		}
		return engine.WithMemoryLimit(ctx, linearLimit(memLimit))
	}
}

// boot builds the image: it initialises a VM from scratch.
func (m *Manager) boot(ctx context.Context) (img *image, err error) {
	v := &vm{cwd: "/"}
	if err := m.instantiate(ctx, v, true, nil); err != nil {
		return nil, err
	}
	defer v.close()
	defer onTrap(func(e error) {
		img, err = nil, e
	})
	if err := engine.WriteData(v.mem, m.mod.Data); err != nil {
		return nil, fmt.Errorf("%w: %w", errTrap, err)
	}
	v.call(v.mod.ExportedFunction("_initialize"))
	if rc := int32(v.call(v.mod.ExportedFunction("qjs_init"))); rc != 0 {
		return nil, fmt.Errorf("%w: qjs_init returned %d", errTrap, rc)
	}
	// The wasm build has a 1 MiB stack; QuickJS must report a stack
	// overflow well before the guest runs off its end.
	v.call(v.mod.ExportedFunction("qjs_set_max_stack_size"), maxStackSize)
	v.call(v.mod.ExportedFunction("qjs_set_interrupt_handler"), 1)
	v.call(v.mod.ExportedFunction("qjs_set_promise_rejection_handler"), 1)
	v.scratch = v.call32(v.x.malloc, 8)
	if v.scratch == 0 {
		return nil, fmt.Errorf("%w: out of memory", errTrap)
	}
	if err := v.installPrelude(m.prelude); err != nil {
		return nil, err
	}
	// Settle the heap so the image carries no garbage.
	v.call(v.mod.ExportedFunction("qjs_run_gc"))
	sp := v.mod.ExportedGlobal("__stack_pointer")
	if sp == nil {
		return nil, fmt.Errorf("%w: quickjs.wasm does not export __stack_pointer", errTrap)
	}
	img = &image{
		stackPointer: sp.Get(),
		rtPtr:        v.call32(v.mod.ExportedFunction("qjs_get_runtime_ptr")),
		ctxPtr:       v.call32(v.mod.ExportedFunction("qjs_get_context_ptr")),
		hy:           v.hy,
		scratch:      v.scratch,
	}
	b, ok := v.mem.Read(0, v.mem.Size())
	if !ok {
		return nil, fmt.Errorf("%w: cannot read memory", errTrap)
	}
	sum := sha256.Sum256(b)
	img.id = hex.EncodeToString(sum[:16])
	if img.mem, err = engine.NewImage(b); err != nil {
		return nil, fmt.Errorf("quickjs image: %w", err)
	}
	return img, nil
}

// clone instantiates v with its memory started from img, copy-on-write,
// and capped for a JS heap of memLimit bytes (0 = none), at rest: the
// stack pointer is the image's. The caller holds m.viewMu (read) so that
// the image stays open until the instance has mapped it.
func (m *Manager) clone(ctx context.Context, v *vm, img *image, memLimit int64) error {
	lim := &engine.MemoryLimit{}
	if memLimit > 0 {
		lim.Set(linearLimit(memLimit))
	}
	err := m.instantiate(ctx, v, false, func(ictx context.Context) context.Context {
		ictx, v.imem = engine.WithImage(ictx, img.mem, lim)
		return ictx
	})
	if err != nil {
		return err
	}
	if have := v.mem.Size() / 65536; have < img.mem.Pages() {
		if _, ok := v.mem.Grow(img.mem.Pages() - have); !ok {
			v.close()
			return fmt.Errorf("jsguest: a JS heap limit of %d bytes caps the memory at %d bytes, below the interpreter's image of %d", memLimit, lim.Get(), img.mem.Size())
		}
	}
	sp, ok := v.mod.ExportedGlobal("__stack_pointer").(api.MutableGlobal)
	if !ok {
		v.close()
		return fmt.Errorf("%w: __stack_pointer is not mutable", errTrap)
	}
	sp.Set(img.stackPointer)
	return nil
}

// newVM returns a fresh VM cloned from the Manager's image, with a JS heap
// limit of memLimit bytes (0 = none).
func (m *Manager) newVM(ctx context.Context, memLimit int64) (v *vm, err error) {
	m.viewMu.RLock()
	defer m.viewMu.RUnlock()
	if m.isClosed() {
		return nil, ErrClosed
	}
	img, err := m.image(ctx)
	if err != nil {
		return nil, err
	}
	v = &vm{memLimit: memLimit, cwd: "/"}
	if err := m.clone(ctx, v, img, memLimit); err != nil {
		return nil, err
	}
	defer onTrap(func(e error) {
		v.close()
		v, err = nil, e
	})
	v.call(v.mod.ExportedFunction("qjs_set_runtime_and_context"), uint64(img.rtPtr), uint64(img.ctxPtr))
	v.hy, v.scratch = img.hy, img.scratch
	if memLimit > 0 {
		v.setMemoryLimit(memLimit)
	}
	if err := v.reseed(); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

// setMemoryLimit sets QuickJS's own heap limit.
func (v *vm) setMemoryLimit(memLimit int64) {
	v.call(v.mod.ExportedFunction("qjs_set_memory_limit"), uint64(uint32(min(memLimit, 1<<32-1))))
}

// reseed gives Math.random a new seed: clones share the image's generator
// state, and a fork must not repeat its parent's numbers.
func (v *vm) reseed() error {
	var seed [16]byte
	_, _ = rand.Read(seed[:])
	r := v.hyCall("seed", hex.EncodeToString(seed[:]))
	if v.isException(r) {
		return v.initError("seed")
	}
	v.freeValue(r)
	return nil
}

// bind looks up the exports.
func (v *vm) bind() error {
	var missing []string
	get := func(name string) api.Function {
		f := v.mod.ExportedFunction(name)
		if f == nil {
			missing = append(missing, name)
		}
		return f
	}
	v.x = exports{
		malloc: get("wasm_malloc"), free: get("wasm_free"),
		eval: get("qjs_eval"), call: get("qjs_call"),
		getException: get("qjs_get_exception"), isException: get("qjs_is_exception"),
		isUncatchable: get("qjs_is_uncatchable_error"),
		freeValue:     get("qjs_free_value"), dupValue: get("qjs_dup_value"),
		getStringLen: get("qjs_get_string_len"), freeCString: get("qjs_free_cstring"),
		newString: get("qjs_new_string"), newUint8Array: get("qjs_new_uint8_array"),
		newNumber:     get("qjs_new_number"),
		getPropString: get("qjs_get_prop_string"), setPropString: get("qjs_set_prop_string"),
		getGlobal: get("qjs_get_global"), getUndefined: get("qjs_get_undefined"),
		isUndefined: get("qjs_is_undefined"), isString: get("qjs_is_string"),
		isPromise: get("qjs_is_promise"), promiseState: get("qjs_promise_state"),
		promiseResult: get("qjs_promise_result"), promiseMarkHandled: get("qjs_promise_mark_as_handled"),
		isJobPending: get("qjs_is_job_pending"), executePendingJob: get("qjs_execute_pending_job"),
		newHostFunction: get("qjs_new_host_function"),
		newError:        get("qjs_new_error"), throw: get("qjs_throw"),
		getVersion:     get("qjs_get_quickjs_version"),
		getArrayBuffer: get("qjs_get_array_buffer"),
	}
	for _, n := range []string{"_initialize", "qjs_init", "qjs_set_memory_limit", "qjs_set_interrupt_handler", "qjs_set_max_stack_size",
		"qjs_set_promise_rejection_handler", "qjs_run_gc", "qjs_get_runtime_ptr", "qjs_get_context_ptr", "qjs_set_runtime_and_context"} {
		get(n)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: quickjs.wasm lacks exports %v", errTrap, missing)
	}
	return nil
}

// close releases the wasm instance.
func (v *vm) close() {
	if v.mod != nil {
		_ = v.mod.Close(context.WithoutCancel(v.ctx))
	}
	v.dead = true
}

// destroy stops the guest wherever it runs, also in a C loop that polls
// no interrupt, by setting its loop guard (engine.Stop), or, in a module
// the guard refused, by cancelling the running calls' context (wazero then
// closes the module). The call running traps and the vm is lost, with why
// as the error its run reports. Only the first call counts; it may come
// from any goroutine.
func (v *vm) destroy(why error) {
	v.destroyOnce.Do(func() {
		v.destroyed.Store(&why)
		if !engine.Stop(v.mod) {
			if cancel := v.cancel.Load(); cancel != nil {
				(*cancel)()
			}
		}
	})
}

// call calls f and returns its first result. A wasm failure panics with
// trap, and so does a call into a closed instance: QuickJS runs without
// wazero's closed-module checks, and a closed instance's memory may be
// unmapped (engine.WithImage).
func (v *vm) call(f api.Function, args ...uint64) uint64 {
	if v.mod.IsClosed() {
		v.dead = true
		panic(trap{fmt.Errorf("%w: the instance is closed", errTrap)})
	}
	res, err := f.Call(v.ctx, args...)
	if err != nil {
		v.dead = true
		panic(trap{fmt.Errorf("%w: %w", errTrap, err)})
	}
	if len(res) == 0 {
		return 0
	}
	return res[0]
}

func (v *vm) call32(f api.Function, args ...uint64) uint32 { return uint32(v.call(f, args...)) }

// freeValue releases a value box.
func (v *vm) freeValue(box uint32) {
	if box != 0 {
		v.call(v.x.freeValue, uint64(box))
	}
}

// cstring copies s into a malloc'd, NUL-terminated guest buffer.
func (v *vm) cstring(s []byte) (ptr uint32) {
	ptr = v.call32(v.x.malloc, uint64(len(s)+1))
	if ptr == 0 {
		panic(trap{fmt.Errorf("%w: wasm_malloc(%d) failed", errTrap, len(s)+1)})
	}
	if !v.mem.Write(ptr, s) || !v.mem.WriteByte(ptr+uint32(len(s)), 0) {
		panic(trap{fmt.Errorf("%w: write out of range", errTrap)})
	}
	return ptr
}

// newString returns a box holding a JS string with the UTF-8 text s.
func (v *vm) newString(s []byte) uint32 {
	p := v.cstring(s)
	box := v.call32(v.x.newString, uint64(p), uint64(len(s)))
	v.call(v.x.free, uint64(p))
	return box
}

// newBytes returns a box holding a Uint8Array copy of b.
func (v *vm) newBytes(b []byte) uint32 {
	p := v.cstring(b)
	box := v.call32(v.x.newUint8Array, uint64(p), uint64(len(b)))
	v.call(v.x.free, uint64(p))
	return box
}

// str converts the value in box to a string (running toString for
// non-strings) and returns its UTF-8 (WTF-8) bytes. ok is false when the
// conversion threw; the exception is then pending.
func (v *vm) str(box uint32) (s string, ok bool) {
	cp := v.call32(v.x.getStringLen, uint64(box), uint64(v.scratch))
	if cp == 0 {
		return "", false
	}
	n, _ := v.mem.ReadUint32Le(v.scratch)
	b, _ := v.mem.Read(cp, n)
	s = string(b)
	v.call(v.x.freeCString, uint64(cp))
	return s, true
}

// isException reports whether box holds the exception marker.
func (v *vm) isException(box uint32) bool { return v.call32(v.x.isException, uint64(box)) != 0 }

// takeException returns a box with the pending exception, clearing it.
func (v *vm) takeException() uint32 { return v.call32(v.x.getException) }

// getProp returns a box with obj[name].
func (v *vm) getProp(obj uint32, name string) uint32 {
	p := v.cstring([]byte(name))
	box := v.call32(v.x.getPropString, uint64(obj), uint64(p))
	v.call(v.x.free, uint64(p))
	return box
}

// setProp sets obj[name] = val; val stays owned by the caller.
func (v *vm) setProp(obj uint32, name string, val uint32) {
	p := v.cstring([]byte(name))
	v.call(v.x.setPropString, uint64(obj), uint64(p), uint64(val))
	v.call(v.x.free, uint64(p))
}

// callFn calls fn with this = undefined and the given argument boxes (still
// owned by the caller). It returns the result box, which may be the
// exception marker.
func (v *vm) callFn(fn uint32, args ...uint32) uint32 {
	var argv uint32
	if len(args) > 0 {
		argv = v.call32(v.x.malloc, uint64(4*len(args)))
		if argv == 0 {
			panic(trap{fmt.Errorf("%w: wasm_malloc failed", errTrap)})
		}
		for i, a := range args {
			v.mem.WriteUint32Le(argv+uint32(4*i), a)
		}
	}
	undef := v.call32(v.x.getUndefined)
	res := v.call32(v.x.call, uint64(fn), uint64(undef), uint64(len(args)), uint64(argv))
	v.freeValue(undef)
	if argv != 0 {
		v.call(v.x.free, uint64(argv))
	}
	return res
}

// hyCall calls the prelude's internal method name with string arguments and
// returns the result box (possibly the exception marker).
func (v *vm) hyCall(name string, args ...string) uint32 {
	fn := v.getProp(v.hy, name)
	boxes := make([]uint32, len(args))
	for i, a := range args {
		boxes[i] = v.newString([]byte(a))
	}
	res := v.callFn(fn, boxes...)
	for _, b := range boxes {
		v.freeValue(b)
	}
	v.freeValue(fn)
	return res
}

// hyCallValue calls the prelude's internal method name with one value box.
func (v *vm) hyCallValue(name string, arg uint32) uint32 {
	fn := v.getProp(v.hy, name)
	res := v.callFn(fn, arg)
	v.freeValue(fn)
	return res
}

// hyString calls a prelude method and returns its result as a string; ok is
// false when the method threw (the exception is left pending).
func (v *vm) hyString(name string, arg uint32) (string, bool) {
	res := v.hyCallValue(name, arg)
	defer v.freeValue(res)
	if v.isException(res) {
		return "", false
	}
	return v.str(res)
}

// eval evaluates code as a global script and returns the result box.
func (v *vm) eval(code, filename string, flags uint32) uint32 {
	cp := v.cstring([]byte(code))
	fp := v.cstring([]byte(filename))
	box := v.call32(v.x.eval, uint64(cp), uint64(len(code)), uint64(fp), uint64(flags))
	v.call(v.x.free, uint64(cp))
	v.call(v.x.free, uint64(fp))
	return box
}

// runJobs executes pending promise jobs until none is left. It returns the
// exception box when a job failed uncatchably (interrupt, out of memory), 0
// otherwise.
func (v *vm) runJobs() uint32 {
	for v.call32(v.x.isJobPending) != 0 {
		if int32(v.call32(v.x.executePendingJob)) < 0 {
			return v.takeException()
		}
	}
	return 0
}

// sameValue reports whether the two boxes hold the same JSValue (for objects:
// the same object). A JSValue is NaN-boxed into 8 bytes on wasm32.
func (v *vm) sameValue(a, b uint32) bool {
	x, ok1 := v.mem.ReadUint64Le(a)
	y, ok2 := v.mem.ReadUint64Le(b)
	return ok1 && ok2 && x == y
}

// dropRejection forgets a tracked rejection of promise.
func (v *vm) dropRejection(promise uint32) {
	for i, r := range v.rejections {
		if v.sameValue(r.promise, promise) {
			v.freeValue(r.promise)
			v.freeValue(r.reason)
			v.rejections = append(v.rejections[:i], v.rejections[i+1:]...)
			return
		}
	}
}

// clearRejections frees all tracked rejections.
func (v *vm) clearRejections() {
	for _, r := range v.rejections {
		v.freeValue(r.promise)
		v.freeValue(r.reason)
	}
	v.rejections = v.rejections[:0]
}

// vmOf returns the vm a host function was called for.
func vmOf(ctx context.Context) *vm {
	v, _ := ctx.Value(vmKey{}).(*vm)
	return v
}

// hostInterrupt is polled by QuickJS while it runs bytecode.
func hostInterrupt(ctx context.Context, _ api.Module, stack []uint64) {
	if v := vmOf(ctx); v != nil && v.stop.Load() != 0 {
		stack[0] = 1
		return
	}
	stack[0] = 0
}

// hostPromiseRejection is QuickJS's promise rejection tracker. It owns both
// boxes.
func hostPromiseRejection(ctx context.Context, _ api.Module, stack []uint64) {
	v := vmOf(ctx)
	promise, reason, handled := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
	if v == nil {
		return
	}
	if handled != 0 {
		v.dropRejection(promise)
		v.freeValue(promise)
		v.freeValue(reason)
		return
	}
	v.rejections = append(v.rejections, rejection{promise: promise, reason: reason})
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
