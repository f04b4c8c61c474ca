//go:build !linux

package engine

import (
	"bytes"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// imageImpl keeps the image on the heap; each instance gets a copy.
type imageImpl struct{ mem []byte }

func newImageImpl(mem []byte) (imageImpl, error) { return imageImpl{mem: bytes.Clone(mem)}, nil }

func (i imageImpl) close() error { return nil }

func (i imageImpl) bytes(uint64) ([]byte, error) { return i.mem, nil }

func (i imageImpl) allocate(size, max uint64, l *MemoryLimit, mu *sync.Mutex) imageMemory {
	return &copyMemory{img: i.mem, inner: limitedMemory{limit: limitFor(max, l), max: max}, mu: mu}
}

type copyMemory struct {
	img    []byte
	inner  limitedMemory
	copied bool
	mu     *sync.Mutex
	cur    []byte
}

func (m *copyMemory) store32(off uint64, v uint32) bool {
	if off+4 > uint64(len(m.cur)) {
		return false
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.cur[off])), v)
	return true
}

func (m *copyMemory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.inner.Reallocate(max(size, uint64(len(m.img))))
	if b == nil {
		return nil
	}
	if !m.copied {
		copy(b, m.img)
		m.copied = true
	}
	m.cur = b[:size]
	return m.cur
}

func (m *copyMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inner.Free()
	m.cur = nil
}

// mapFile reads f into memory.
func mapFile(f *os.File) ([]byte, func(), error) {
	b, err := io.ReadAll(f)
	return b, func() {}, err
}

func (m *copyMemory) overlay(*State) bool { return false }
