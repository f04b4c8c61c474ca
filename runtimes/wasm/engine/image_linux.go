//go:build linux

package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// imageImpl is a memfd holding the image.
type imageImpl struct {
	f    *os.File
	view *imageView
}

// imageView is a read-only shared mapping of the image, made on first use.
type imageView struct {
	once sync.Once
	b    []byte
	err  error
}

func (i imageImpl) bytes(size uint64) ([]byte, error) {
	i.view.once.Do(func() {
		i.view.b, i.view.err = unix.Mmap(int(i.f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	})
	return i.view.b, i.view.err
}

func newImageImpl(mem []byte) (imageImpl, error) {
	fd, err := unix.MemfdCreate("hybox-memory-image", unix.MFD_CLOEXEC)
	if err != nil {
		return imageImpl{}, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "hybox-memory-image")
	if _, err := f.WriteAt(mem, 0); err != nil {
		_ = f.Close()
		return imageImpl{}, fmt.Errorf("write image: %w", err)
	}
	return imageImpl{f: f, view: &imageView{}}, nil
}

func (i imageImpl) close() error {
	if i.view.b != nil {
		_ = unix.Munmap(i.view.b)
	}
	return i.f.Close()
}

func (i imageImpl) allocate(size, max uint64, l *MemoryLimit, mu *sync.Mutex) imageMemory {
	return &cowMemory{img: i, imgSize: size, max: max, l: l, mu: mu}
}

// cowMemory reserves the memory's whole maximum as one anonymous mapping
// (no swap reserved, so untouched pages cost nothing) and maps the image
// over its start, MAP_PRIVATE: reads see the image's pages, the first write
// to a page copies it. The address never changes, so growth only lengthens
// the slice.
type cowMemory struct {
	img      imageImpl
	imgSize  uint64
	max      uint64
	l        *MemoryLimit
	mu       *sync.Mutex // guards region against store32
	region   []byte
	size     uint64      // current length
	overlays [][2]uint64 // (offset, length) mapped from saved states: always compared
}

func (m *cowMemory) Reallocate(size uint64) []byte {
	if size > limitFor(m.max, m.l) {
		return nil
	}
	if m.region == nil {
		reserve := max(m.max, m.imgSize)
		r, err := unix.Mmap(-1, 0, int(reserve), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return nil
		}
		if _, err := unix.MmapPtr(int(m.img.f.Fd()), 0, unsafe.Pointer(&r[0]), uintptr(m.imgSize),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
			_ = unix.Munmap(r)
			return nil
		}
		m.mu.Lock()
		m.region = r
		m.mu.Unlock()
	}
	if size > uint64(len(m.region)) {
		return nil
	}
	m.mu.Lock()
	m.size = size
	m.mu.Unlock()
	return m.region[:size:size]
}

func (m *cowMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.region != nil {
		_ = unix.Munmap(m.region)
		m.region = nil
	}
}

func (m *cowMemory) store32(off uint64, v uint32) bool {
	if m.region == nil || off+4 > m.size {
		return false
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.region[off])), v)
	return true
}

// Page-map bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61
)

// written reads the process's page map for the memory's first n bytes: a
// page was written when it is an anonymous page (the private copy a write
// made, or a page past the image) that is present or swapped out. Pages
// of the image never written are file pages or absent. An anonymous page
// that was only read maps the zero page and is reported too; Diff drops
// it by comparing.
func (m *cowMemory) written(n uint64) ([]bool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.region == nil || n > uint64(len(m.region)) || n%PageSize != 0 || os.Getpagesize() != PageSize {
		return nil, false
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	pages := n / PageSize
	base := uint64(uintptr(unsafe.Pointer(&m.region[0]))) / PageSize
	out := make([]bool, pages)
	buf := make([]byte, 8*4096)
	for done := uint64(0); done < pages; {
		k := min(pages-done, uint64(len(buf)/8))
		if _, err := f.ReadAt(buf[:k*8], int64((base+done)*8)); err != nil {
			return nil, false
		}
		for j := uint64(0); j < k; j++ {
			e := binary.LittleEndian.Uint64(buf[j*8:])
			out[done+j] = e&pmSwapped != 0 || (e&pmPresent != 0 && e&pmFile == 0)
		}
		done += k
	}
	for _, o := range m.overlays {
		for p := o[0] / PageSize; p < (o[0]+o[1])/PageSize && p < pages; p++ {
			out[p] = true
		}
	}
	return out, true
}

// mapFile maps f read-only (an empty file is an empty slice).
func mapFile(f *os.File) ([]byte, func(), error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, func() {}, nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// overlay maps the pages of st, from its file, over the memory,
// copy-on-write.
func (m *cowMemory) overlay(st *State) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.region == nil {
		return false
	}
	off := st.mapped.data
	for _, p := range st.Pages {
		n := uint64(len(p.Data))
		if p.Off+n > m.size {
			return false
		}
		// Counted as written before it is mapped: Diff must compare it.
		m.overlays = append(m.overlays, [2]uint64{p.Off, n})
		if _, err := unix.MmapPtr(int(st.mapped.f.Fd()), int64(off), unsafe.Pointer(&m.region[p.Off]), uintptr(n),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
			return false
		}
		off += n
	}
	return true
}
