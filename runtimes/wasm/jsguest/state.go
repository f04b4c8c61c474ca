package jsguest

// Interpreter state as data. A JavaScript context's state is its linear
// memory as the pages that differ from the image it was cloned from (the
// pages it wrote, engine.ImageMemory.Diff), its stack pointer, and what
// the host keeps for the VM: the QuickJS runtime and context pointers, the
// prelude's box, the scratch buffer and the working directory. The image
// is the same in every process of the same build (see image), so a state
// names it by its digest and is refused against another. States saved
// before contexts were clones (whole memory as a diff against zeros, no
// base) are still restored, into a memory of their own.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/tetratelabs/wazero/api"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

const stateKind = "javascript"

// vmHost is the host data of a saved VM.
type vmHost struct {
	Cwd     string `json:"cwd"`
	Runtime uint32 `json:"runtime"`
	Context uint32 `json:"context"`
	Hy      uint32 `json:"hy"`
	Scratch uint32 `json:"scratch"`
}

// SaveState returns the state of it, a context of this Manager; its pages
// alias the live memory and stay valid until the context's next Run or
// Close. nil, nil: the context has no live VM (it will start fresh).
//
// # Errors
// ErrClosed (also after the Manager's Close); a failure of the VM.
func (m *Manager) SaveState(ctx context.Context, ei execd.Interpreter) (st *engine.State, err error) {
	it, ok := ei.(*interpreter)
	if !ok {
		return nil, errors.New("javascript: not a context of this manager")
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return nil, ErrClosed
	}
	v := it.vm
	if v == nil || v.dead {
		return nil, nil
	}
	defer onTrap(func(e error) {
		st, err = nil, e
	})
	h := vmHost{Cwd: v.cwd, Hy: v.hy, Scratch: v.scratch,
		Runtime: v.call32(v.mod.ExportedFunction("qjs_get_runtime_ptr")),
		Context: v.call32(v.mod.ExportedFunction("qjs_get_context_ptr"))}
	host, _ := json.Marshal(h)
	mem, ok := v.mem.Read(0, v.mem.Size())
	if !ok {
		return nil, fmt.Errorf("%w: cannot read memory", errTrap)
	}
	sp := v.mod.ExportedGlobal("__stack_pointer")
	st = &engine.State{Kind: stateKind, Size: uint64(len(mem)), Globals: []uint64{sp.Get()}, Host: host}
	if v.imem == nil { // restored from a state without a base
		st.Pages = engine.Diff(mem, nil)
		return st, nil
	}
	// The image stays mapped until the diff is taken: Close waits.
	m.viewMu.RLock()
	defer m.viewMu.RUnlock()
	if m.isClosed() {
		return nil, ErrClosed
	}
	if st.Pages, err = v.imem.Diff(m.img.mem, mem); err != nil {
		return nil, err
	}
	st.Base = m.img.id
	return st, nil
}

// RestoreInterpreter makes a context from st, saved by SaveState (in this
// process or before a restart), bound to root and eg, with a JS heap limit
// of memLimitBytes. With reseed the VM gets a new seed for Math.random (a
// fork must not repeat its parent's numbers).
//
// # Errors
// engine.ErrState when st is not a saved JavaScript context, was saved
// against another image of the interpreter, or does not fit
// memLimitBytes; ErrClosed.
func (m *Manager) RestoreInterpreter(ctx context.Context, root *os.Root, memLimitBytes int64, eg engine.Egress, st *engine.State, reseed bool) (_ execd.Interpreter, err error) {
	var h vmHost
	if st.Kind != stateKind || len(st.Globals) != 1 || json.Unmarshal(st.Host, &h) != nil {
		return nil, fmt.Errorf("%w: not a saved JavaScript context", engine.ErrState)
	}
	if memLimitBytes <= 0 {
		memLimitBytes = m.opts.MemoryLimitBytes
	}
	if lin := linearLimit(memLimitBytes); st.Size > uint64(lin) {
		return nil, fmt.Errorf("%w: the saved context needs %d bytes of memory, more than the limit of %d", engine.ErrState, st.Size, lin)
	}
	m.viewMu.RLock()
	defer m.viewMu.RUnlock()
	if m.isClosed() {
		return nil, ErrClosed
	}
	v := &vm{memLimit: memLimitBytes, cwd: cleanCwd(h.Cwd), root: root, egress: eg}
	switch st.Base {
	case m.img.id:
		err = m.clone(ctx, v, m.img, memLimitBytes)
	case "":
		err = m.instantiate(ctx, v, false, withLinearLimit(memLimitBytes))
	default:
		return nil, fmt.Errorf("%w: saved against another memory image of the interpreter (%.8s, this server runs %.8s)", engine.ErrState, st.Base, m.img.id)
	}
	if err != nil {
		return nil, err
	}
	defer onTrap(func(e error) {
		v.close()
		err = e
	})
	if have := uint64(v.mem.Size()); have < st.Size {
		if _, ok := v.mem.Grow(uint32((st.Size - have + 65535) / 65536)); !ok {
			v.close()
			return nil, fmt.Errorf("%w: the saved context needs %d bytes of memory, more than the limit allows", engine.ErrState, st.Size)
		}
	}
	// Mapped from the state's file copy-on-write when it was mapped
	// (engine.MapStateFile) over a clone, else copied.
	if v.imem == nil || !v.imem.Overlay(st) {
		buf, _ := v.mem.Read(0, v.mem.Size())
		if err := st.Apply(buf); err != nil {
			v.close()
			return nil, err
		}
	}
	sp, ok := v.mod.ExportedGlobal("__stack_pointer").(api.MutableGlobal)
	if !ok {
		v.close()
		return nil, fmt.Errorf("%w: __stack_pointer is not mutable", errTrap)
	}
	sp.Set(st.Globals[0])
	v.call(v.mod.ExportedFunction("qjs_set_runtime_and_context"), uint64(h.Runtime), uint64(h.Context))
	v.hy, v.scratch = h.Hy, h.Scratch
	v.setMemoryLimit(memLimitBytes)
	if reseed {
		if err := v.reseed(); err != nil {
			v.close()
			return nil, err
		}
	}
	return &interpreter{m: m, root: root, cwd: v.cwd, memLimit: memLimitBytes, egress: eg, vm: v}, nil
}
