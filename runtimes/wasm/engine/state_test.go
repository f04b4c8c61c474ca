package engine

import (
	"bytes"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func testState() (*State, []byte) {
	mem := make([]byte, 16*PageSize)
	for i := range mem[2*PageSize : 4*PageSize] {
		mem[2*PageSize+i] = byte(i)
	}
	mem[9*PageSize+7] = 1
	return &State{Kind: "python", Base: "", Size: uint64(len(mem)), Globals: []uint64{42, 7},
		Host: []byte(`{"cwd":"/workspace"}`), Pages: Diff(mem, nil)}, mem
}

func TestStateRoundTrip(t *testing.T) {
	s, mem := testState()
	if len(s.Pages) != 2 || s.Pages[0].Off != 2*PageSize || len(s.Pages[0].Data) != 2*PageSize || s.Pages[1].Off != 9*PageSize {
		t.Fatalf("diff: %d pages %+v", len(s.Pages), s.Pages)
	}
	var buf bytes.Buffer
	if err := WriteState(&buf, s); err != nil {
		t.Fatal(err)
	}
	if off := buf.Len() - 4 - int(s.DirtyBytes()); off%PageSize != 0 || !bytes.Equal(buf.Bytes()[off:off+PageSize], s.Pages[0].Data[:PageSize]) {
		t.Fatalf("the pages start at file offset %d, not at a page boundary", off)
	}
	got, err := ReadState(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != s.Kind || got.Size != s.Size || string(got.Host) != string(s.Host) || len(got.Globals) != 2 || got.Globals[0] != 42 {
		t.Fatalf("got %+v", got)
	}
	out := make([]byte, got.Size)
	if err := got.Apply(out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, mem) {
		t.Fatal("applied memory differs from the saved one")
	}
	if err := got.Apply(make([]byte, 4*PageSize)); !errors.Is(err, ErrState) {
		t.Fatalf("apply into a short memory: %v", err)
	}
}

// TestStateRefused: every damaged saved state is refused with ErrState
// and a message that says what is wrong; none panics.
func TestStateRefused(t *testing.T) {
	s, _ := testState()
	var buf bytes.Buffer
	if err := WriteState(&buf, s); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x40; return b }
	cases := []struct {
		name, want string
		b          []byte
	}{
		{"empty", "truncated header", nil},
		{"not a state", "not a hybox saved state", []byte("PK\x03\x04 this is a zip file, not a state...")},
		{"header corrupted", "header checksum", flip(13)},
		{"body corrupted", "checksum mismatch (corrupted)", flip(len(good) / 2)},
		{"trailer corrupted", "checksum mismatch (corrupted)", flip(len(good) - 1)},
		{"truncated body", "truncated", good[:len(good)-PageSize]},
		{"truncated by one byte", "truncated", good[:len(good)-1]},
		{"only the header", "truncated", good[:24]},
	}
	for i := 0; i < len(good); i += 997 {
		cases = append(cases, struct {
			name, want string
			b          []byte
		}{"cut", "", good[:i]})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadState(bytes.NewReader(c.b))
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrState with %q", err, c.want)
			}
		})
	}
	// Another version is refused by name.
	other := bytes.Clone(good)
	other[8] = 9
	fix := stateHeaderCRC(other)
	copy(other[20:24], fix)
	if _, err := ReadState(bytes.NewReader(other)); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "format version 9") {
		t.Fatalf("other version: %v", err)
	}
}

func stateHeaderCRC(b []byte) []byte {
	c := crc32c(b[:20])
	return []byte{byte(c), byte(c >> 8), byte(c >> 16), byte(c >> 24)}
}

func TestStateMalformedRefusedOnWrite(t *testing.T) {
	for _, s := range []*State{
		{Size: PageSize, Pages: []Page{{Off: 1, Data: make([]byte, PageSize)}}},
		{Size: PageSize, Pages: []Page{{Off: 0, Data: make([]byte, 2*PageSize)}}},
		{Size: 4 * PageSize, Pages: []Page{{Off: PageSize, Data: make([]byte, PageSize)}, {Off: 0, Data: make([]byte, PageSize)}}},
	} {
		if err := WriteState(&bytes.Buffer{}, s); !errors.Is(err, ErrState) {
			t.Fatalf("%+v: %v", s.Pages, err)
		}
	}
}

func TestStateFile(t *testing.T) {
	s, mem := testState()
	p := filepath.Join(t.TempDir(), "ctx.state")
	if err := WriteStateFile(p, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStateFile(p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, got.Size)
	_ = got.Apply(out)
	if !bytes.Equal(out, mem) {
		t.Fatal("differs")
	}
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStateFile(p); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "ctx.state") {
		t.Fatalf("truncated file: %v", err)
	}
}

// TestImageDiff: an instance's diff against its image holds exactly the
// pages it wrote (and not the ones it only read).
func TestImageDiff(t *testing.T) {
	base := make([]byte, 4*wasmPage)
	for i := range base {
		base[i] = byte(i * 7)
	}
	img, err := NewImage(base)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	b, err := img.Bytes()
	if err != nil || !bytes.Equal(b, base) {
		t.Fatalf("Bytes: %v", err)
	}
	m := img.impl.allocate(img.size, 8*wasmPage, nil, new(syncMutex))
	h := &ImageMemory{m: m}
	defer m.Free()
	mem := m.Reallocate(6 * wasmPage)
	_ = mem[3*PageSize] // read only
	_ = mem[5*wasmPage] // read only, past the image
	mem[5*PageSize] ^= 1
	mem[5*wasmPage+3*PageSize] = 9
	v := mem[6*PageSize]
	mem[6*PageSize] = v + 1 // written, then restored
	mem[6*PageSize] = v
	pages, err := h.Diff(img, mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 || pages[0].Off != 5*PageSize || len(pages[0].Data) != PageSize || pages[1].Off != 5*wasmPage+3*PageSize {
		t.Fatalf("diff: %+v", offsets(pages))
	}
	if full := Diff(mem, base); len(full) != 2 {
		t.Fatalf("full diff: %v", offsets(full))
	}
}

func offsets(ps []Page) []uint64 {
	var o []uint64
	for _, p := range ps {
		o = append(o, p.Off, uint64(len(p.Data)))
	}
	return o
}

type syncMutex = sync.Mutex

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// FuzzReadState: no input makes ReadState panic, and whatever it accepts
// it writes back to the same bytes.
func FuzzReadState(f *testing.F) {
	s, _ := testState()
	var buf bytes.Buffer
	_ = WriteState(&buf, s)
	f.Add(buf.Bytes())
	f.Add([]byte("HYBXSTAT"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ReadState(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrState) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		var out bytes.Buffer
		if err := WriteState(&out, st); err != nil {
			t.Fatalf("accepted state does not write back: %v", err)
		}
		if !bytes.Equal(out.Bytes(), b[:out.Len()]) {
			t.Fatal("written back differently")
		}
		if _, err := decodeState(b[:out.Len()]); err != nil {
			t.Fatalf("decodeState refuses what ReadState accepts: %v", err)
		}
	})
}
