package engine

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"unsafe"
)

// ErrState marks saved state that cannot be used: truncated, corrupted,
// of another format version, or saved against another base.
var ErrState = errors.New("saved state")

// PageSize is the granularity of a State's memory diff (the host's page).
const PageSize = 4096

// StateVersion is the format version WriteState writes and ReadState
// accepts.
const StateVersion = 1

// maxStateBody bounds what ReadState allocates: a wasm32 memory and the
// host's data.
const maxStateBody = 4<<30 + 64<<20

var (
	stateMagic = [8]byte{'H', 'Y', 'B', 'X', 'S', 'T', 'A', 'T'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// State is a guest instance's state as data: its linear memory as the
// pages that differ from a base (a memory image, or zeros), the values of
// the mutable globals the host restores, and what the host keeps for the
// instance (Host, owned by the guest package that saved it).
type State struct {
	Kind    string   // who saved it ("python", "javascript", ...)
	Base    string   // identity of the base the pages differ from; "" = zeros
	Size    uint64   // length of the linear memory in bytes
	Globals []uint64 // mutable globals, in an order the guest package defines
	Host    []byte   // the guest package's own data
	Pages   []Page   // sorted, not overlapping, inside Size

	mapped *mapping // set by MapStateFile
}

// Page is a run of memory: Data is written at byte offset Off. Off and
// len(Data) are multiples of PageSize.
type Page struct {
	Off  uint64
	Data []byte
}

// DirtyBytes returns the total length of s's pages.
func (s *State) DirtyBytes() uint64 {
	var n uint64
	for _, p := range s.Pages {
		n += uint64(len(p.Data))
	}
	return n
}

// Diff returns the runs of mem that differ from base (a missing tail of
// base counts as zeros), PageSize at a time, adjacent pages merged. The
// pages alias mem. len(mem) must be a multiple of PageSize.
func Diff(mem, base []byte) []Page {
	var zero [PageSize]byte
	var out []Page
	for off := 0; off+PageSize <= len(mem); off += PageSize {
		cur := mem[off : off+PageSize]
		var ref []byte
		if off+PageSize <= len(base) {
			ref = base[off : off+PageSize]
		} else {
			ref = zero[:]
		}
		if string(cur) == string(ref) { // compiled to a memcmp, no copy
			continue
		}
		out = appendRun(out, mem, uint64(off))
	}
	return out
}

// appendRun adds the page at off of mem to runs, extending the last run
// when it ends there.
func appendRun(runs []Page, mem []byte, off uint64) []Page {
	if n := len(runs); n > 0 {
		last := &runs[n-1]
		if last.Off+uint64(len(last.Data)) == off {
			last.Data = mem[last.Off : off+PageSize]
			return runs
		}
	}
	return append(runs, Page{Off: off, Data: mem[off : off+PageSize]})
}

// Apply writes s's pages into mem, which must be at least s.Size long.
//
// # Errors
// ErrState when a page lies outside mem.
func (s *State) Apply(mem []byte) error {
	for _, p := range s.Pages {
		if p.Off+uint64(len(p.Data)) > uint64(len(mem)) {
			return fmt.Errorf("%w: a page at %d is outside the %d-byte memory", ErrState, p.Off, len(mem))
		}
		copy(mem[p.Off:], p.Data)
	}
	return nil
}

// The format (little endian): magic [8]byte, version u32, body length
// u64, crc32c of the preceding 20 bytes u32; the body; crc32c of the body
// u32. The body: kind (u16 length + bytes), base (u16 + bytes), size u64,
// globals (u32 count + u64 each), host (u32 length + bytes), pages (u32
// count + (offset u64, length u32) each), then the pages' bytes in order.

// WriteState writes s to w in the checksummed, versioned format.
//
// # Errors
// ErrState when s is malformed (pages not aligned, unsorted or outside
// Size); w's errors.
func WriteState(w io.Writer, s *State) error {
	if err := s.check(); err != nil {
		return err
	}
	var meta []byte
	meta = appendStr16(meta, s.Kind)
	meta = appendStr16(meta, s.Base)
	meta = binary.LittleEndian.AppendUint64(meta, s.Size)
	meta = binary.LittleEndian.AppendUint32(meta, uint32(len(s.Globals)))
	for _, g := range s.Globals {
		meta = binary.LittleEndian.AppendUint64(meta, g)
	}
	meta = binary.LittleEndian.AppendUint32(meta, uint32(len(s.Host)))
	meta = append(meta, s.Host...)
	meta = binary.LittleEndian.AppendUint32(meta, uint32(len(s.Pages)))
	for _, p := range s.Pages {
		meta = binary.LittleEndian.AppendUint64(meta, p.Off)
		meta = binary.LittleEndian.AppendUint32(meta, uint32(len(p.Data)))
	}
	// The pages start at a multiple of PageSize in the file, so that a
	// reader may map them instead of reading them.
	meta = append(meta, make([]byte, pagePad(len(meta)))...)
	body := uint64(len(meta)) + s.DirtyBytes()
	hdr := make([]byte, 0, 24)
	hdr = append(hdr, stateMagic[:]...)
	hdr = binary.LittleEndian.AppendUint32(hdr, StateVersion)
	hdr = binary.LittleEndian.AppendUint64(hdr, body)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, castagnoli))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	crc := crc32.Update(0, castagnoli, meta)
	if _, err := w.Write(meta); err != nil {
		return err
	}
	for _, p := range s.Pages {
		crc = crc32.Update(crc, castagnoli, p.Data)
		if _, err := w.Write(p.Data); err != nil {
			return err
		}
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc))
	return err
}

func appendStr16(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// check validates the layout of s's pages.
func (s *State) check() error {
	if len(s.Kind) > 1<<16-1 || len(s.Base) > 1<<16-1 || len(s.Host) > 1<<32-1 {
		return fmt.Errorf("%w: a field is too long", ErrState)
	}
	var end uint64
	for i, p := range s.Pages {
		n := uint64(len(p.Data))
		switch {
		case p.Off%PageSize != 0 || n%PageSize != 0 || n == 0 || n > 1<<32-PageSize:
			return fmt.Errorf("%w: page %d (offset %d, %d bytes) is not whole host pages", ErrState, i, p.Off, n)
		case p.Off < end:
			return fmt.Errorf("%w: page %d overlaps or is out of order", ErrState, i)
		case p.Off+n > s.Size || p.Off+n < p.Off:
			return fmt.Errorf("%w: page %d ends past the memory's %d bytes", ErrState, i, s.Size)
		}
		end = p.Off + n
	}
	return nil
}

// ReadState reads a State written by WriteState. The pages of the result
// alias one buffer.
//
// # Errors
// ErrState, with what is wrong: not a saved state, another version, a
// checksum mismatch (corrupted), a short read (truncated), an
// inconsistent layout.
func ReadState(r io.Reader) (*State, error) {
	var hdr [24]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: truncated header: %v", ErrState, err)
	}
	n, err := checkHeader(hdr[:])
	if err != nil {
		return nil, err
	}
	// The buffer grows as bytes arrive: a damaged length that passed the
	// header's checksum costs no more than the bytes that are there.
	b := make([]byte, 24, 24+min(n+4, 64<<20))
	copy(b, hdr[:])
	lr := io.LimitReader(r, int64(n+4))
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		m, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read: %v", ErrState, err)
		}
	}
	if got := uint64(len(b) - 24); got < n+4 {
		return nil, fmt.Errorf("%w: truncated: %d of %d bytes", ErrState, got, n+4)
	}
	return decodeState(b)
}

// checkHeader checks the 24-byte header and returns the body's length.
func checkHeader(hdr []byte) (uint64, error) {
	if [8]byte(hdr[:8]) != stateMagic {
		return 0, fmt.Errorf("%w: not a hybox saved state", ErrState)
	}
	if crc32.Checksum(hdr[:20], castagnoli) != binary.LittleEndian.Uint32(hdr[20:]) {
		return 0, fmt.Errorf("%w: header checksum mismatch (corrupted)", ErrState)
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != StateVersion {
		return 0, fmt.Errorf("%w: format version %d, this server reads version %d", ErrState, v, StateVersion)
	}
	n := binary.LittleEndian.Uint64(hdr[12:])
	if n > maxStateBody {
		return 0, fmt.Errorf("%w: body of %d bytes is larger than any wasm memory", ErrState, n)
	}
	return n, nil
}

// decodeState decodes a whole saved state (header, body, trailer); the
// pages of the result alias b.
func decodeState(b []byte) (*State, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("%w: truncated header: %d bytes", ErrState, len(b))
	}
	n, err := checkHeader(b[:24])
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) < 24+n+4 {
		return nil, fmt.Errorf("%w: truncated: %d of %d bytes", ErrState, len(b)-24, n+4)
	}
	if uint64(len(b)) > 24+n+4 {
		return nil, fmt.Errorf("%w: %d bytes of trailing data", ErrState, uint64(len(b))-24-n-4)
	}
	body := b[24 : 24+n]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[24+n:]) {
		return nil, fmt.Errorf("%w: checksum mismatch (corrupted)", ErrState)
	}
	d := decoder{b: body}
	s := &State{Kind: d.str16(), Base: d.str16(), Size: d.u64()}
	if g := d.u32(); d.ok(uint64(g) * 8) {
		s.Globals = make([]uint64, g)
		for i := range s.Globals {
			s.Globals[i] = d.u64()
		}
	}
	s.Host = d.bytes(uint64(d.u32()))
	np := d.u32()
	if !d.ok(uint64(np) * 12) {
		return nil, fmt.Errorf("%w: inconsistent page table", ErrState)
	}
	lens := make([]uint32, np)
	s.Pages = make([]Page, np)
	for i := range s.Pages {
		s.Pages[i].Off = d.u64()
		lens[i] = d.u32()
	}
	if pad := d.bytes(uint64(pagePad(len(body) - len(d.b)))); d.err || !allZero(pad) {
		return nil, fmt.Errorf("%w: inconsistent layout", ErrState)
	}
	for i := range s.Pages {
		s.Pages[i].Data = d.bytes(uint64(lens[i]))
	}
	if d.err || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: inconsistent layout", ErrState)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// pagePad is the padding after metaLen bytes of body that puts the pages
// at a multiple of PageSize from the start of the file (after the 24-byte
// header).
func pagePad(metaLen int) int { return (PageSize - (24+metaLen)%PageSize) % PageSize }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// decoder reads the body; a short read sets err and yields zeros.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) ok(n uint64) bool {
	if d.err || uint64(len(d.b)) < n {
		d.err = true
		return false
	}
	return true
}

func (d *decoder) bytes(n uint64) []byte {
	if !d.ok(n) {
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) str16() string { return string(d.bytes(uint64(d.u16()))) }

// WriteStateFile writes s to path atomically: a reader sees the old file
// or the whole new one, also after the process is killed midway. The data
// is not synced to the disk: the file survives the process, not the
// machine losing power.
//
// # Errors
// ErrState for a malformed s; file system errors.
func WriteStateFile(path string, s *State) error {
	return WriteStateFileContext(context.Background(), path, s)
}

// WriteStateFileContext is WriteStateFile that gives up, leaving the old
// file, once ctx is done (checked at every MiB written).
func WriteStateFileContext(ctx context.Context, path string, s *State) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(ctxWriter{ctx, f}, 1<<20)
	err = WriteState(w, s)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// ctxWriter fails its writes once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(b)
}

// ReadStateFile reads the State at path.
//
// # Errors
// fs.ErrNotExist when there is none; ErrState as ReadState.
func ReadStateFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := ReadState(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return s, nil
}

// mapping is the file a State's pages are mapped from (MapStateFile).
type mapping struct {
	f     *os.File
	data  uint64 // file offset of the first page's bytes
	unmap func()
}

// MapStateFile opens the State at path and checks it as ReadStateFile
// does, but leaves its pages mapped read-only from the file (on Linux;
// elsewhere they are read), so that ImageMemory.Overlay can map them into
// an instance copy-on-write instead of copying them. Close the State when
// done with its pages; an overlay keeps its own reference to the file.
//
// # Errors
// fs.ErrNotExist when there is none; ErrState as ReadState.
func MapStateFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	b, unmap, err := mapFile(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	st, err := decodeState(b)
	if err != nil {
		unmap()
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	st.mapped = &mapping{f: f, unmap: unmap}
	if len(st.Pages) > 0 {
		st.mapped.data = uint64(uintptr(unsafe.Pointer(&st.Pages[0].Data[0])) - uintptr(unsafe.Pointer(&b[0])))
	}
	return st, nil
}

// Close releases the mapping of a State from MapStateFile (its pages are
// then gone); for other States it does nothing.
func (s *State) Close() error {
	m := s.mapped
	if m == nil {
		return nil
	}
	s.mapped, s.Pages = nil, nil
	m.unmap()
	return m.f.Close()
}
