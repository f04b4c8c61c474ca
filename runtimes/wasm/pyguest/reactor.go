package pyguest

// The source-built CPython (scripts/guests/build-python.sh) is a WASI
// reactor. One instance is initialised once per Manager (hybox_init: the
// interpreter, site, the driver and its kernel) and its linear memory becomes
// an engine.Image; every context is a new instance whose memory starts as
// that image, mapped copy-on-write, so creating one costs an instantiation
// and a few page faults instead of an interpreter start.
//
// An execution queues its requests (framed as in internal/pydriver) on the
// instance's stdin and calls hybox_run, which answers them and returns. To
// stop a running cell the host writes an exception type into CPython's
// async-exception slot and sets the eval breaker (see reactor.c), so the
// cell gets a KeyboardInterrupt or TimeoutError and the context keeps its
// variables. Only a guest that does not return within interruptGrace is
// killed.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/pydriver"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// Guest paths of the source build's read-only mounts.
const (
	stdlibDir  = "/usr/local/lib"  // holds the stdlib zip
	driverFile = "hybox_driver.py" // in siteDir
	driverPath = siteDir + "/" + driverFile
)

// Interrupt timing: a stop request is repeated every interruptEvery (a cell
// may catch one) and the guest is killed when it has not returned after
// interruptGrace.
const (
	interruptEvery = 50 * time.Millisecond
	interruptGrace = 2 * time.Second
)

// errOutputLimit is the cause of killing a guest whose run passed its
// output cap.
var errOutputLimit = errors.New("output limit")

// errIgnoredInterrupt is the cause of killing a guest that did not stop.
var errIgnoredInterrupt = errors.New("the interpreter did not stop when interrupted and was destroyed")

// reactor is what every context of the source build shares.
type reactor struct {
	eng    *engine.Engine
	mod    *engine.ImageModule
	build  engine.PythonBuild
	site   memFS      // site files and the driver
	stdlib memFS      // the stdlib zip
	tree   *pycacheFS // the same as a directory tree, for commands

	imageDir string // where the image is saved; "" = nowhere
	log      func(msg string, args ...any)

	viewMu sync.RWMutex // held (read) while a save reads the image; close waits

	mu     sync.Mutex
	img    *engine.Image // nil until the first context
	imgID  string        // identity of img, named by the contexts saved from it
	closed bool          // close was called: no image is made again
	sp     uint64        // __stack_pointer at rest
	slots  slots
}

// slots are the addresses and values the host writes to interrupt a cell.
type slots struct {
	AsyncExc, PendingAsync, EvalBreaker uint32
	KeyboardInterrupt, TimeoutError     uint32
}

func newReactor(ctx context.Context, eng *engine.Engine, b engine.PythonBuild, site fs.FS) (*reactor, error) {
	mod, err := eng.CompileForImages(ctx, b.Wasm)
	if err != nil {
		return nil, err
	}
	zip, err := eng.ReadGuest(b.Stdlib)
	if err != nil {
		return nil, err
	}
	files := memFS{driverFile: []byte(pydriver.Source)}
	err = fs.WalkDir(site, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[p], err = fs.ReadFile(site, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	tree, err := newPycacheFS(zip)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Stdlib.Name, err)
	}
	return &reactor{eng: eng, mod: mod, build: b, site: files, stdlib: memFS{b.Stdlib.Name: zip}, tree: tree}, nil
}

// guestIO is what one instance is wired to.
type guestIO struct {
	root   experimentalsys.FS
	net    *netFS
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	sleep  func(ns int64)
	tree   bool // the stdlib as a directory tree (commands), not the zip
}

// config returns the module configuration shared by the image's instance
// and its clones: the same mounts in the same order (so the same preopened
// descriptors, which wasi-libc remembers in memory) and the same
// environment.
func (r *reactor) config(g guestIO) wazero.ModuleConfig {
	fsc := wazero.NewFSConfig().(sysfs.FSConfig).
		WithSysFSMount(g.root, "/").(sysfs.FSConfig).
		WithSysFSMount(g.net, netDir).
		WithFSMount(r.site, siteDir)
	if g.tree {
		fsc = fsc.WithFSMount(r.tree, stdlibDir+"/python3.11")
	} else {
		fsc = fsc.WithFSMount(r.stdlib, stdlibDir)
	}
	return wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // a reactor: _initialize is called explicitly
		WithArgs("python3").
		WithEnv("HOME", "/").
		WithEnv("PYTHONDONTWRITEBYTECODE", "1").
		WithEnv("PYTHONUNBUFFERED", "1").
		WithEnv("PYTHONPATH", siteDir).
		WithEnv("HYBOX_DRIVER", driverPath).
		WithEnv("HYBOX_STDLIB", stdlibDir+"/"+r.build.Stdlib.Name).
		WithStdin(g.stdin).
		WithStdout(g.stdout).
		WithStderr(g.stderr).
		WithFSConfig(fsc).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(g.sleep).
		WithRandSource(rand.Reader)
}

// image returns the memory image, booting an interpreter on first use.
func (r *reactor) image(ctx context.Context) (*engine.Image, uint64, slots, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.img != nil {
		return r.img, r.sp, r.slots, nil
	}
	if r.closed {
		return nil, 0, slots{}, ErrClosed
	}
	if err := r.loadImage(ctx); err != nil {
		return nil, 0, slots{}, err
	}
	return r.img, r.sp, r.slots, nil
}

// boot initialises one interpreter from scratch and keeps its memory.
func (r *reactor) boot(ctx context.Context) error {
	var errBuf bytes.Buffer
	g := guestIO{
		root:   wasmfs.NewSwitch(), // unbound: nothing of any sandbox is visible
		net:    &netFS{ctx: ctx, egress: func() engine.Egress { return nil }},
		stdin:  bytes.NewReader(nil),
		stdout: &errBuf,
		stderr: &errBuf,
		sleep:  ctxSleep(ctx),
	}
	mod, err := r.mod.Instantiate(ctx, r.config(g))
	if err != nil {
		return fmt.Errorf("instantiate python: %w", err)
	}
	defer mod.Close(context.WithoutCancel(ctx))
	if err := engine.WriteData(mod.Memory(), r.mod.Data); err != nil {
		return fmt.Errorf("python image: %w", err)
	}
	for _, name := range []string{"_initialize", "hybox_init"} {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			return fmt.Errorf("python image: the guest does not export %s", name)
		}
		res, err := fn.Call(ctx)
		if err != nil {
			return fmt.Errorf("python image: %s: %w: %s", name, err, tail(errBuf.Bytes()))
		}
		if len(res) == 1 && res[0] != 0 {
			return fmt.Errorf("python image: %s returned %d: %s", name, int32(res[0]), tail(errBuf.Bytes()))
		}
	}
	sp := mod.ExportedGlobal("__stack_pointer")
	fn := mod.ExportedFunction("hybox_slots")
	if sp == nil || fn == nil {
		return errors.New("python image: the guest exports no __stack_pointer or hybox_slots")
	}
	res, err := fn.Call(ctx)
	if err != nil {
		return fmt.Errorf("python image: hybox_slots: %w", err)
	}
	raw, ok := mod.Memory().Read(uint32(res[0]), 24)
	if !ok || binary.LittleEndian.Uint32(raw) != 1 {
		return errors.New("python image: unknown hybox_slots layout")
	}
	u := func(i int) uint32 { return binary.LittleEndian.Uint32(raw[4*i:]) }
	s := slots{AsyncExc: u(1), PendingAsync: u(2), EvalBreaker: u(3), KeyboardInterrupt: u(4), TimeoutError: u(5)}
	mem, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		return errors.New("python image: cannot read memory")
	}
	img, err := engine.NewImage(mem)
	if err != nil {
		return fmt.Errorf("python image: %w", err)
	}
	r.img, r.sp, r.slots = img, sp.Get(), s
	return nil
}

func (r *reactor) close() {
	r.viewMu.Lock()
	defer r.viewMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.img != nil {
		_ = r.img.Close()
		r.img = nil
	}
}

// tail returns the last 2 KiB of b as text, for error messages.
func tail(b []byte) string {
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(bytes.TrimSpace(b))
}

// rinstance is one context of the source build: an instance cloned from
// the image.
type rinstance struct {
	sink
	mod   api.Module
	run   api.Function
	mem   *engine.ImageMemory
	slots slots
	limit *engine.MemoryLimit
	stdin *requestQueue

	// sw is a ready clone's filesystem, bound when a sandbox takes it;
	// nil for a clone made for its sandbox.
	sw     *wasmfs.Switch
	egress egressSlot // where its HTTP requests go; empty = no network

	life   context.Context // cancelling it kills the guest
	kill   context.CancelCauseFunc
	wake   chan struct{} // capacity 1: an interrupt wakes a sleeping guest
	dead   bool          // the instance failed or was killed; only the caller of exec sets it
	exitMu sync.Mutex    // serialises exec and close
}

// clone starts a context from the image, bound to root and eg, with its
// linear memory capped at memLimit bytes.
func (r *reactor) clone(ctx context.Context, base context.Context, root experimentalsys.FS, eg engine.Egress, memLimit int64, outLimit int64) (*rinstance, error) {
	// The image stays open until the new memory has mapped it.
	r.viewMu.RLock()
	defer r.viewMu.RUnlock()
	img, sp, sl, err := r.image(ctx)
	if err != nil {
		return nil, err
	}
	if memLimit > 0 && uint64(memLimit) < img.Size() {
		return nil, fmt.Errorf("pyguest: a memory limit of %d bytes is below the interpreter's %d", memLimit, img.Size())
	}
	ri := &rinstance{slots: sl, limit: &engine.MemoryLimit{}, stdin: &requestQueue{}, wake: make(chan struct{}, 1)}
	ri.limit.Set(memLimit)
	ri.egress.set(eg)
	ri.life, ri.kill = context.WithCancelCause(base)
	dm := &pydriver.Demuxer{
		Stdout:   func(p []byte) { ri.output(p, false) },
		Frame:    ri.onFrame,
		MaxFrame: int(outLimit) + 1<<16,
		TooLong:  ri.frameTooLong,
	}
	g := guestIO{
		root:   root,
		net:    &netFS{ctx: ri.life, egress: ri.egress.get},
		stdin:  ri.stdin,
		stdout: dm,
		stderr: writerFunc(func(p []byte) { ri.output(p, true) }),
		sleep:  ri.sleep,
	}
	ictx, mem := engine.WithImage(ri.life, img, ri.limit)
	mod, err := r.mod.Instantiate(ictx, r.config(g))
	if err != nil {
		ri.kill(err)
		return nil, fmt.Errorf("instantiate python: %w", err)
	}
	ri.mod, ri.mem = mod, mem
	fail := func(err error) (*rinstance, error) {
		ri.close(err)
		return nil, err
	}
	if have := mod.Memory().Size() / 65536; have < img.Pages() {
		if _, ok := mod.Memory().Grow(img.Pages() - have); !ok {
			return fail(fmt.Errorf("pyguest: a memory limit of %d bytes is below the interpreter's %d", memLimit, img.Size()))
		}
	}
	spg, ok := mod.ExportedGlobal("__stack_pointer").(api.MutableGlobal)
	if !ok {
		return fail(errors.New("pyguest: __stack_pointer is not mutable"))
	}
	spg.Set(sp)
	ri.run = mod.ExportedFunction("hybox_run")
	if ri.run == nil {
		return fail(errors.New("pyguest: the guest does not export hybox_run"))
	}
	return ri, nil
}

// exec queues reqs and runs the driver until it has answered them. When
// ctx ends first, the running cell is interrupted (KeyboardInterrupt, or
// TimeoutError when ctx's cause is a timeout) until the guest returns; a
// guest still running after interruptGrace is killed. e receives output
// and frames. stopped reports that ctx ended during the call; err is set
// when the guest died (it is then unusable).
func (ri *rinstance) exec(ctx context.Context, reqs []byte, e *execution) (stopped bool, err error) {
	ri.exitMu.Lock()
	defer ri.exitMu.Unlock()
	if ri.dead {
		return false, errExited
	}
	select {
	case <-ri.wake:
	default:
	}
	// An interrupt of the previous run may have been raised just after
	// its hybox_run had returned: it must not land in this one.
	ri.mem.StoreUint32(ri.slots.AsyncExc, 0)
	ri.mem.StoreUint32(ri.slots.PendingAsync, 0)
	ri.stdin.set(reqs)
	// An output overflow stops the run by killing the guest.
	e.onOverflow = func() { ri.kill(errOutputLimit) }
	ri.begin(e)
	defer ri.detach()

	done := make(chan struct{})     // the call returned
	loopDone := make(chan struct{}) // the interrupt loop returned
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(loopDone)
		ri.interruptLoop(ctx, done)
	})
	_, err = ri.run.Call(ri.life)
	close(done)
	if stopped = !stopWatch(); stopped {
		<-loopDone
	}
	if err != nil {
		ri.dead = true
		ri.kill(err)
	}
	return stopped, err
}

// interruptLoop raises the stop exception in the guest until done is
// closed, and kills the guest after interruptGrace.
func (ri *rinstance) interruptLoop(ctx context.Context, done <-chan struct{}) {
	exc := ri.slots.KeyboardInterrupt
	if stopReason(ctx) == execd.ErrTimeout {
		exc = ri.slots.TimeoutError
	}
	t := time.NewTicker(interruptEvery)
	defer t.Stop()
	grace := time.NewTimer(interruptGrace)
	defer grace.Stop()
	for {
		ri.raise(exc)
		select {
		case <-done:
			return
		case <-t.C:
		case <-grace.C:
			ri.kill(errIgnoredInterrupt)
			return
		}
	}
}

// raise asks the running interpreter to raise exception type exc at its
// next eval-breaker check, and wakes it from a sleep.
func (ri *rinstance) raise(exc uint32) {
	ri.mem.StoreUint32(ri.slots.AsyncExc, exc)
	ri.mem.StoreUint32(ri.slots.PendingAsync, 1)
	ri.mem.StoreUint32(ri.slots.EvalBreaker, 1)
	select {
	case ri.wake <- struct{}{}:
	default:
	}
}

// sleep is the guest's nanosleep: it wakes early when the guest is
// interrupted or killed.
func (ri *rinstance) sleep(ns int64) {
	if ns <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ri.wake:
		// Keep the wake-up for the sleeps that follow until the cell ends.
		select {
		case ri.wake <- struct{}{}:
		default:
		}
	case <-ri.life.Done():
	}
}

// close kills the guest and releases its memory.
func (ri *rinstance) close(cause error) {
	ri.kill(cause)
	ri.exitMu.Lock()
	defer ri.exitMu.Unlock()
	ri.dead = true
	if ri.mod != nil {
		_ = ri.mod.Close(context.WithoutCancel(ri.life))
	}
}

// linearMemoryBytes returns the size of the guest's linear memory.
func (ri *rinstance) linearMemoryBytes() uint64 {
	if mem := ri.mod.Memory(); mem != nil {
		return uint64(mem.Size())
	}
	return 0
}

// requestQueue is a reactor guest's stdin: the requests of one hybox_run,
// then end of input, so the driver returns when it has answered them.
type requestQueue struct {
	mu  sync.Mutex
	buf []byte
}

func (q *requestQueue) set(b []byte) {
	q.mu.Lock()
	q.buf = b
	q.mu.Unlock()
}

func (q *requestQueue) Read(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, q.buf)
	q.buf = q.buf[n:]
	return n, nil
}

// command runs CPython's main (hybox_main) in a new instance started from
// scratch, for `python3 ...` shell commands. A non-zero status is returned
// as a *sys.ExitError, like a WASI command's exit.
func (r *reactor) command(ctx context.Context, cmd engine.Command, args []string, cwd string) error {
	g := guestIO{
		root:   wasmfs.New(cmd.Root),
		net:    &netFS{ctx: ctx, egress: func() engine.Egress { return cmd.Egress }},
		stdin:  cmd.Stdin,
		stdout: cmd.Stdout,
		stderr: cmd.Stderr,
		sleep:  ctxSleep(ctx),
		tree:   true,
	}
	if g.stdin == nil {
		g.stdin = bytes.NewReader(nil)
	}
	cfg := r.config(g).WithArgs(args...).WithEnv("PYTHONHOME", "/usr/local")
	for k, v := range commandEnv(cmd.Env, cwd) {
		cfg = cfg.WithEnv(k, v)
	}
	mod, err := r.mod.Instantiate(ctx, cfg)
	if err != nil {
		return err
	}
	defer mod.Close(context.WithoutCancel(ctx))
	if err := engine.WriteData(mod.Memory(), r.mod.Data); err != nil {
		return err
	}
	if _, err := mod.ExportedFunction("_initialize").Call(ctx); err != nil {
		return err
	}
	main := mod.ExportedFunction("hybox_main")
	if main == nil {
		return errors.New("the guest does not export hybox_main")
	}
	res, err := main.Call(ctx)
	if err != nil {
		return err
	}
	if code := uint32(res[0]); code != 0 {
		return sys.NewExitError(code)
	}
	return nil
}
