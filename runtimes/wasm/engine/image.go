package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// ErrImage marks a memory image that cannot be used.
var ErrImage = errors.New("memory image")

// Image is a snapshot of a guest's linear memory from which new instances
// start. On Linux it lives in a memory file (memfd) and each instance maps
// it privately, copy-on-write: an instance's pages stay shared with the
// image, and with every other instance, until the instance writes them.
// An Image is safe for concurrent use; Close it only after every instance
// started from it has been closed.
type Image struct {
	size   uint64 // bytes, a multiple of the wasm page size
	impl   imageImpl
	closed atomic.Bool
}

// NewImage stores mem (a linear memory, its length a multiple of 64 KiB)
// as an image.
//
// # Errors
// ErrImage when mem's length is not a whole number of wasm pages, or the
// memory file cannot be created or written.
func NewImage(mem []byte) (*Image, error) {
	if len(mem) == 0 || len(mem)%wasmPage != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of wasm pages", ErrImage, len(mem))
	}
	impl, err := newImageImpl(mem)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrImage, err)
	}
	return &Image{size: uint64(len(mem)), impl: impl}, nil
}

// Size returns the image's length in bytes.
func (img *Image) Size() uint64 { return img.size }

// Pages returns the image's length in wasm pages.
func (img *Image) Pages() uint32 { return uint32(img.size / wasmPage) }

// Close releases the image.
func (img *Image) Close() error {
	if img.closed.Swap(true) {
		return nil
	}
	return img.impl.close()
}

const wasmPage = 65536

// WithImage returns a context that, passed to InstantiateModule, gives that
// one instance a linear memory whose first Size() bytes are the image, and
// zeroes after it, capped by l (a nil l or a zero limit: only the module's
// maximum). The module must not write data segments at instantiation (see
// SplitData), and the caller grows the memory to at least Pages() pages
// before the guest runs. Growth past the cap fails inside the guest.
//
// The returned ImageMemory writes into that memory from other goroutines
// while the guest runs (to raise a flag the guest polls).
//
// Closing the instance unmaps its memory: a caller must never call into an
// instance after closing it (on a runtime without close-on-context-done
// checks wazero would run the call, and the guest would fault the process).
func WithImage(ctx context.Context, img *Image, l *MemoryLimit) (context.Context, *ImageMemory) {
	h := &ImageMemory{}
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
		m := img.impl.allocate(img.size, max, l, &h.mu)
		h.mu.Lock()
		h.m = m
		h.mu.Unlock()
		return m
	})), h
}

// ImageMemory is a handle on the linear memory of an instance started by
// WithImage.
type ImageMemory struct {
	mu sync.Mutex // held by the memory while it moves or is freed
	m  storer
}

type storer interface {
	store32(off uint64, v uint32) bool
	overlay(st *State) bool
}

// Overlay maps the pages of st (from MapStateFile) into the instance's memory, which must
// already be at least st.Size long, copy-on-write from the state's file:
// the instance reads them from the page cache and copies a page only when
// it writes it. It reports false when it could not (on systems without
// such mappings, or a failed mapping); the caller then writes the pages
// with Apply. Call it before the guest runs.
func (h *ImageMemory) Overlay(st *State) bool {
	h.mu.Lock()
	m := h.m
	h.mu.Unlock()
	return m != nil && st.mapped != nil && m.overlay(st)
}

// imageMemory is a linear memory started from an image.
type imageMemory interface {
	experimental.LinearMemory
	storer
}

// StoreUint32 atomically stores v at byte offset off (4-byte aligned) of
// the memory. It reports false when the memory is gone, not yet allocated,
// or off is outside it. It is safe to call while the guest runs.
func (h *ImageMemory) StoreUint32(off uint32, v uint32) bool {
	if h == nil || off%4 != 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m != nil && h.m.store32(uint64(off), v)
}

// limitFor returns the effective cap of a memory with maximum max.
func limitFor(max uint64, l *MemoryLimit) uint64 {
	if l == nil {
		return max
	}
	if b := l.Get(); b > 0 && uint64(b) < max {
		return uint64(b)
	}
	return max
}

// Bytes returns the image's contents, read-only (a shared mapping on
// Linux). Writing to the result faults.
//
// # Errors
// ErrImage when the image is closed or cannot be mapped.
func (img *Image) Bytes() ([]byte, error) {
	if img.closed.Load() {
		return nil, fmt.Errorf("%w: closed", ErrImage)
	}
	b, err := img.impl.bytes(img.size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrImage, err)
	}
	return b, nil
}

// Diff returns the pages of the instance's memory (mem, its current
// contents) that differ from img, the image it was started from. On Linux
// only the pages the instance has written are compared (the kernel's page
// map says which); elsewhere every page is. The result aliases mem: the
// guest must not run while it is used.
//
// # Errors
// ErrImage when img cannot be read.
func (h *ImageMemory) Diff(img *Image, mem []byte) ([]Page, error) {
	base, err := img.Bytes()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	m := h.m
	h.mu.Unlock()
	if w, ok := m.(writtenPager); ok {
		if written, ok := w.written(uint64(len(mem))); ok {
			return diffPages(mem, base, written), nil
		}
	}
	return Diff(mem, base), nil
}

// writtenPager is a memory that can tell which of its pages were written.
type writtenPager interface {
	// written returns, per PageSize page of the first n bytes, whether it
	// may have been written; false when it cannot tell.
	written(n uint64) ([]bool, bool)
}

// diffPages is Diff over the pages that written marks.
func diffPages(mem, base []byte, written []bool) []Page {
	var zero [PageSize]byte
	var out []Page
	for i, w := range written {
		off := i * PageSize
		if !w || off+PageSize > len(mem) {
			continue
		}
		ref := zero[:]
		if off+PageSize <= len(base) {
			ref = base[off : off+PageSize]
		}
		if string(mem[off:off+PageSize]) == string(ref) {
			continue
		}
		out = appendRun(out, mem, uint64(off))
	}
	return out
}
