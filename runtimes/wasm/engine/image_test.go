package engine

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"
)

// tinyModule is, hand-assembled:
//
//	(module
//	  (memory (export "memory") 1)
//	  (func (export "store") (param i32 i32) local.get 0 local.get 1 i32.store)
//	  (func (export "load") (param i32) (result i32) local.get 0 i32.load)
//	  (data (i32.const 16) "hi"))
var tinyModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x0b, 0x02, 0x60, 0x02, 0x7f, 0x7f, 0x00, 0x60, 0x01, 0x7f, 0x01, 0x7f,
	0x03, 0x03, 0x02, 0x00, 0x01,
	0x05, 0x03, 0x01, 0x00, 0x01,
	0x07, 0x19, 0x03,
	0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00,
	0x05, 's', 't', 'o', 'r', 'e', 0x00, 0x00,
	0x04, 'l', 'o', 'a', 'd', 0x00, 0x01,
	0x0a, 0x13, 0x02,
	0x09, 0x00, 0x20, 0x00, 0x20, 0x01, 0x36, 0x02, 0x00, 0x0b,
	0x07, 0x00, 0x20, 0x00, 0x28, 0x02, 0x00, 0x0b,
	0x0b, 0x08, 0x01, 0x00, 0x41, 0x10, 0x0b, 0x02, 'h', 'i',
}

// withDataCount is tinyModule with a data count section (as modules built
// with bulk memory have) before its code section.
func withDataCount() []byte {
	code := bytes.Index(tinyModule, []byte{0x0a, 0x13, 0x02})
	return slices.Concat(tinyModule[:code], []byte{0x0c, 0x01, 0x01}, tinyModule[code:])
}

func TestSplitData(t *testing.T) {
	for _, tc := range []struct {
		name string
		bin  []byte
	}{{"data", tinyModule}, {"data count", withDataCount()}} {
		t.Run(tc.name, func(t *testing.T) { testSplitData(t, tc.bin) })
	}
}

func testSplitData(t *testing.T, bin []byte) {
	stripped, segs, err := SplitData(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 1 || segs[0].Offset != 16 || string(segs[0].Data) != "hi" {
		t.Fatalf("segments %+v", segs)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, stripped)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := mod.Memory().Read(16, 2); !bytes.Equal(b, []byte{0, 0}) {
		t.Errorf("stripped module wrote its data: %q", b)
	}
	if err := WriteData(mod.Memory(), segs); err != nil {
		t.Fatal(err)
	}
	if b, _ := mod.Memory().Read(16, 2); string(b) != "hi" {
		t.Errorf("WriteData: %q", b)
	}

	for _, bad := range [][]byte{nil, []byte("\x00asm"), bin[:len(bin)-3]} {
		if _, _, err := SplitData(bad); err == nil {
			t.Errorf("SplitData(%d bytes) accepted a malformed module", len(bad))
		}
	}
}

// TestImageClones checks that instances started from an image see it, that
// their writes stay their own, that the host can store into a running
// instance's memory, and that a memory limit holds.
func TestImageClones(t *testing.T) {
	stripped, _, err := SplitData(tinyModule)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, stripped)
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, wasmPage)
	copy(mem[16:], "hi")
	mem[1000] = 7
	img, err := NewImage(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if _, err := NewImage(mem[:100]); err == nil {
		t.Error("NewImage accepted a partial page")
	}

	start := func(limit int64) (store, load func(uint32, ...uint32) uint32, h *ImageMemory, grow func() bool) {
		l := &MemoryLimit{}
		l.Set(limit)
		ictx, h := WithImage(ctx, img, l)
		mod, err := rt.InstantiateModule(ictx, cm, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mod.Close(ctx) })
		call := func(name string) func(uint32, ...uint32) uint32 {
			return func(a uint32, rest ...uint32) uint32 {
				args := []uint64{uint64(a)}
				for _, r := range rest {
					args = append(args, uint64(r))
				}
				res, err := mod.ExportedFunction(name).Call(ctx, args...)
				if err != nil {
					t.Fatal(err)
				}
				if len(res) == 0 {
					return 0
				}
				return uint32(res[0])
			}
		}
		return call("store"), call("load"), h, func() bool { _, ok := mod.Memory().Grow(1); return ok }
	}
	storeA, loadA, hA, _ := start(0)
	_, loadB, _, growB := start(wasmPage)
	if got := loadA(1000); got != 7 {
		t.Fatalf("clone A sees %d, want the image's 7", got)
	}
	storeA(1000, 99)
	if got := loadB(1000); got != 7 {
		t.Errorf("clone B sees A's write: %d", got)
	}
	if got := loadA(1000); got != 99 {
		t.Errorf("clone A lost its write: %d", got)
	}
	if !hA.StoreUint32(2000, 5) || loadA(2000) != 5 {
		t.Error("a host store did not reach the instance")
	}
	if hA.StoreUint32(wasmPage, 1) || hA.StoreUint32(3, 1) {
		t.Error("StoreUint32 accepted an offset outside memory or unaligned")
	}
	if growB() {
		t.Error("memory grew past its one-page limit")
	}
	// A third clone still sees the untouched image.
	_, loadC, _, _ := start(0)
	if got := loadC(1000); got != 7 {
		t.Errorf("clone C sees %d", got)
	}
}
