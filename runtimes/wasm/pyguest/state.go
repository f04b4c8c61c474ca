package pyguest

// Interpreter state as data (source build only). A context's state is its
// linear memory as a diff against the memory image it was cloned from
// (the pages it wrote), its stack pointer, and what the host keeps for it
// (the working directory it was created with). The image itself is saved
// once (Options.ImageDir) so that a server started again clones from the
// same image and can apply the diffs saved before; a diff names the image
// it was taken against and is refused against any other.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/tetratelabs/wazero/api"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/pydriver"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// Kinds of saved state this package writes.
const (
	stateKind = "python"
	imageKind = "python-image"
)

// ErrNoState is returned by SaveState of an interpreter that cannot be
// saved (the npm build).
var ErrNoState = errors.New("pyguest: this interpreter cannot be saved (the npm build of CPython has no memory image)")

// imageHost is the host data of a saved image.
type imageHost struct {
	ID    string `json:"id"`
	Slots slots  `json:"slots"`
}

// contextHost is the host data of a saved context.
type contextHost struct {
	Cwd   string `json:"cwd"`
	Fresh bool   `json:"fresh"` // never ran: its init request is still due
}

// imageKey names the image file: the build and everything this binary
// runs in the image (driver, site files, state format).
func (r *reactor) imageKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", r.build.Wasm.SHA256, r.build.Stdlib.SHA256, engine.StateVersion)
	h.Write([]byte(pydriver.Source))
	for _, name := range sortedKeys(r.site) {
		fmt.Fprintf(h, "\x00%s\x00", name)
		h.Write(r.site[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// loadImage reads the image saved in dir, or boots one and saves it. A
// damaged image file is replaced.
func (r *reactor) loadImage(ctx context.Context) error {
	if r.imageDir == "" {
		if err := r.boot(ctx); err != nil {
			return err
		}
		r.imgID = randomID()
		return nil
	}
	path := filepath.Join(r.imageDir, "python-"+r.imageKey()+".img")
	if err := r.readImage(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		r.log("the saved Python image is unusable; booting a new one", "path", path, "err", err)
		_ = os.Remove(path)
	}
	if err := r.boot(ctx); err != nil {
		return err
	}
	r.imgID = randomID()
	mem, err := r.img.Bytes()
	if err != nil {
		return err
	}
	host, _ := json.Marshal(imageHost{ID: r.imgID, Slots: r.slots})
	st := &engine.State{Kind: imageKind, Size: r.img.Size(), Globals: []uint64{r.sp}, Host: host, Pages: engine.Diff(mem, nil)}
	if err := os.MkdirAll(r.imageDir, 0o755); err != nil {
		return nil // the image works; only saved contexts will not outlive the process
	}
	tmp := path + ".tmp-" + r.imgID
	if err := engine.WriteStateFile(tmp, st); err != nil {
		r.log("saving the Python image", "err", err)
		return nil
	}
	defer os.Remove(tmp)
	// Another process may have saved one first: then use that one, so
	// that the contexts of both are diffs against the same image.
	if err := os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		if err := r.readImage(path); err != nil {
			r.log("reading the Python image another process saved", "err", err)
		}
	} else if err == nil {
		// Images of other builds: contexts saved against them are
		// refused anyway (another image), so they are of no use.
		old, _ := filepath.Glob(filepath.Join(r.imageDir, "python-*.img"))
		for _, p := range old {
			if p != path {
				_ = os.Remove(p)
			}
		}
	}
	return nil
}

// readImage makes the image saved at path the reactor's.
func (r *reactor) readImage(path string) error {
	st, err := engine.ReadStateFile(path)
	if err != nil {
		return err
	}
	var h imageHost
	if st.Kind != imageKind || len(st.Globals) != 1 || json.Unmarshal(st.Host, &h) != nil || h.ID == "" {
		return fmt.Errorf("%w: %s is not a Python image", engine.ErrState, path)
	}
	mem := make([]byte, st.Size)
	if err := st.Apply(mem); err != nil {
		return err
	}
	img, err := engine.NewImage(mem)
	if err != nil {
		return err
	}
	if r.img != nil {
		_ = r.img.Close()
	}
	r.img, r.sp, r.slots, r.imgID = img, st.Globals[0], h.Slots, h.ID
	return nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SaveState returns the context's state; its pages alias the live memory
// and stay valid until the next Run or Close. nil, nil: the context has no
// live interpreter (it will start fresh).
//
// # Errors
// ErrNoState for the npm build (see Manager.SaveState); ErrClosed.
func (it *reactorInterp) SaveState(ctx context.Context) (*engine.State, error) {
	it.running.Lock()
	defer it.running.Unlock()
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return nil, ErrClosed
	}
	ri := it.inst
	if ri == nil {
		return nil, nil
	}
	ri.exitMu.Lock()
	defer ri.exitMu.Unlock()
	if ri.dead {
		return nil, nil
	}
	// The image stays mapped until the diff is taken: a Manager closing
	// meanwhile waits.
	it.m.rx.viewMu.RLock()
	defer it.m.rx.viewMu.RUnlock()
	it.m.rx.mu.Lock()
	img := it.m.rx.img
	it.m.rx.mu.Unlock()
	if img == nil || it.m.isClosed() {
		return nil, ErrClosed
	}
	mem, ok := ri.mod.Memory().Read(0, ri.mod.Memory().Size())
	if !ok {
		return nil, errors.New("pyguest: cannot read the context's memory")
	}
	pages, err := ri.mem.Diff(img, mem)
	if err != nil {
		return nil, err
	}
	sp := ri.mod.ExportedGlobal("__stack_pointer")
	host, _ := json.Marshal(contextHost{Cwd: it.cwd, Fresh: it.fresh})
	return &engine.State{Kind: stateKind, Base: it.m.rx.imageID(), Size: uint64(len(mem)),
		Globals: []uint64{sp.Get()}, Host: host, Pages: pages}, nil
}

// imageID returns the identity of the image (after image() succeeded).
func (r *reactor) imageID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.imgID
}

// RestoreInterpreter makes a context from st, saved by SaveState (in this
// process or before a restart), bound to root and eg, its memory capped at
// memLimitBytes. With reseed the context reseeds its random generator
// before its next cell (a fork must not repeat its parent's numbers).
//
// # Errors
// engine.ErrState when st is not a Python context saved against this
// Manager's image, or needs more memory than memLimitBytes; ErrNoState for
// the npm build; ErrClosed.
func (m *Manager) RestoreInterpreter(ctx context.Context, root *os.Root, memLimitBytes int64, eg engine.Egress, st *engine.State, reseed bool) (execd.Interpreter, error) {
	if m.rx == nil {
		return nil, ErrNoState
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	var h contextHost
	if st.Kind != stateKind || len(st.Globals) != 1 || json.Unmarshal(st.Host, &h) != nil {
		return nil, fmt.Errorf("%w: not a saved Python context", engine.ErrState)
	}
	if _, _, _, err := m.rx.image(ctx); err != nil {
		return nil, err
	}
	if id := m.rx.imageID(); st.Base != id {
		return nil, fmt.Errorf("%w: saved against another memory image of the interpreter (%.8s, this server runs %.8s)", engine.ErrState, st.Base, id)
	}
	limit := memLimitBytes
	if limit <= 0 {
		limit = m.opts.MemoryLimitBytes
	}
	if st.Size > uint64(limit) {
		return nil, fmt.Errorf("%w: the saved context needs %d bytes of memory, more than the limit of %d", engine.ErrState, st.Size, limit)
	}
	inst, err := m.rx.clone(ctx, m.base, wasmfs.New(root), eg, limit, m.opts.OutputLimitBytes)
	if err != nil {
		return nil, fmt.Errorf("pyguest: restore context: %w", err)
	}
	mem := inst.mod.Memory()
	if have := uint64(mem.Size()); have < st.Size {
		if _, ok := mem.Grow(uint32((st.Size - have) / 65536)); !ok {
			inst.close(ErrClosed)
			return nil, fmt.Errorf("%w: cannot grow the memory to the saved %d bytes", engine.ErrState, st.Size)
		}
	}
	// Mapped from the state's file copy-on-write when it was mapped
	// (engine.MapStateFile), else copied.
	if !inst.mem.Overlay(st) {
		buf, _ := mem.Read(0, mem.Size())
		if err := st.Apply(buf); err != nil {
			inst.close(ErrClosed)
			return nil, err
		}
	}
	inst.mod.ExportedGlobal("__stack_pointer").(api.MutableGlobal).Set(st.Globals[0])
	it := &reactorInterp{m: m, root: root, cwd: h.Cwd, memLimit: memLimitBytes, egress: eg, inst: inst, fresh: h.Fresh, reseed: reseed, restored: true}
	return it, nil
}

// SaveState returns the state of it, a context of this Manager.
//
// # Errors
// ErrNoState when it cannot be saved (the npm build); see
// reactorInterp.SaveState.
func (m *Manager) SaveState(ctx context.Context, it execd.Interpreter) (*engine.State, error) {
	ri, ok := it.(*reactorInterp)
	if !ok {
		return nil, ErrNoState
	}
	return ri.SaveState(ctx)
}

func sortedKeys(m memFS) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
