package engine

// The loop guard. wazero stops a module whose context is done
// (RuntimeConfig.WithCloseOnContextDone) by calling a trampoline at every
// loop header and function entry of the compiled code: an indirect call
// that spills registers, and CPython's interpreter loop runs about five
// times slower for it (fib(27): 351 ms against 72 ms without). Guard puts
// a cheaper check into the module itself. Every loop counts its
// iterations down in a global the guard adds (one for the whole module);
// every guardFuel iterations it
// refills the count, leaves the compiled code for Go once (a memory.grow
// of no pages: wazero grows memory in Go) so that the Go scheduler can
// preempt the goroutine, which it cannot do inside compiled code, and
// traps (unreachable) if a second global, exported as GuardExport, is set.
// A guarded module runs on a runtime without wazero's checks and is
// stopped wherever it loops by setting that global (Stop); a call that
// never loops ends anyway (recursion runs out of stack).

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// GuardExport names the global of a guarded module that stops it, and
// FuelExport the count of loop iterations left before its next look (the
// look comes when the count is zero or less).
const (
	GuardExport = "hybox.guard"
	FuelExport  = "hybox.fuel"
)

// ErrUnguardable: the module uses an instruction or section layout Guard
// does not know, or has no memory, so it must run with wazero's own
// checks.
var ErrUnguardable = errors.New("engine: the module cannot be guarded")

// guardFuel is how many loop iterations run between two visits to Go (and
// two looks at the guard): about a tenth of a millisecond of CPython's
// interpreter loop.
const guardFuel = 8192

// Section ids of the binary format.
const (
	secCustom = 0
	secImport = 2
	secMemory = 5
	secGlobal = 6
	secExport = 7
	secStart  = 8
	secElem   = 9
	secCode   = 10
	secData   = 11
	secCount  = 12
	secTag    = 13
)

// Guard returns a copy of the WebAssembly binary bin in which every loop
// checks the global GuardExport at each iteration and traps while it is
// not zero. Debug sections, whose code offsets the rewrite moves, are
// left out; every other section is kept as it is.
//
// # Errors
// ErrUnguardable (wrapped) when bin is not a WebAssembly 1.0 binary or
// uses an instruction this rewriter does not decode.
func Guard(bin []byte) ([]byte, error) {
	if len(bin) < 8 || !bytes.Equal(bin[:8], []byte{0, 'a', 's', 'm', 1, 0, 0, 0}) {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", ErrUnguardable)
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	for r := (reader{b: bin, pos: 8}); !r.done(); {
		id := r.byte()
		n := r.u32()
		body := r.take(int(n))
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrUnguardable, id, r.err)
		}
		secs = append(secs, section{id, body})
	}
	importedGlobals, defined := 0, 0
	hasGlobal, hasExport, hasMemory := false, false, false
	for _, s := range secs {
		switch s.id {
		case secImport:
			n, mems, err := countImports(s.body)
			if err != nil {
				return nil, err
			}
			importedGlobals, hasMemory = n, hasMemory || mems > 0
		case secMemory:
			hasMemory = true
		case secGlobal:
			hasGlobal = true
			r := reader{b: s.body}
			defined = int(r.count())
			if r.err != nil {
				return nil, fmt.Errorf("%w: global section: %v", ErrUnguardable, r.err)
			}
		case secExport:
			hasExport = true
		}
	}
	if !hasMemory {
		return nil, fmt.Errorf("%w: no memory to grow", ErrUnguardable)
	}
	guard := uint32(importedGlobals + defined)
	// The guard and the fuel: mut i32, initialised to i32.const 0.
	newGlobal := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41, 0x00, 0x0b}
	newExport := append(appendName(nil, GuardExport), 0x03)
	newExport = appendU32(newExport, guard)
	newExport = append(appendName(newExport, FuelExport), 0x03)
	newExport = appendU32(newExport, guard+1)

	out := append([]byte(nil), bin[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	appendTo := func(body []byte, entries int, entry []byte) ([]byte, error) {
		r := reader{b: body}
		n := r.count()
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnguardable, r.err)
		}
		nb := appendU32(nil, n+uint32(entries))
		nb = append(nb, body[r.pos:]...)
		return append(nb, entry...), nil
	}
	// The global and export sections sit between the memory (5) and tag
	// (13) sections and the start section (8); one is made when missing.
	after := func(id byte) bool {
		return id == secStart || id == secElem || id == secCount || id == secCode || id == secData
	}
	placedGlobal, placedExport := hasGlobal, hasExport
	for _, s := range secs {
		if s.id != secCustom && (after(s.id) || s.id == secExport) && !placedGlobal {
			emit(secGlobal, append(appendU32(nil, 2), newGlobal...))
			placedGlobal = true
		}
		if s.id != secCustom && after(s.id) && !placedExport {
			emit(secExport, append(appendU32(nil, 2), newExport...))
			placedExport = true
		}
		switch s.id {
		case secCustom:
			if name, ok := customName(s.body); ok && (strings.HasPrefix(name, ".debug") || name == "sourceMappingURL") {
				continue
			}
			emit(s.id, s.body)
		case secGlobal:
			b, err := appendTo(s.body, 2, newGlobal)
			if err != nil {
				return nil, err
			}
			emit(s.id, b)
		case secExport:
			b, err := appendTo(s.body, 2, newExport)
			if err != nil {
				return nil, err
			}
			emit(s.id, b)
		case secCode:
			b, err := guardCode(s.body, guard)
			if err != nil {
				return nil, err
			}
			emit(s.id, b)
		default:
			emit(s.id, s.body)
		}
	}
	if !placedGlobal {
		emit(secGlobal, append(appendU32(nil, 2), newGlobal...))
	}
	if !placedExport {
		emit(secExport, append(appendU32(nil, 2), newExport...))
	}
	return out, nil
}

// Stop sets the guard of mod, a module made from a guarded binary, and
// empties its fuel: the call running in it traps at its next loop
// iteration (within guardFuel of them, when the guest's count races this
// write), and so does every later call. It reports false when mod is not
// guarded.
func Stop(mod api.Module) bool {
	g, ok := mod.ExportedGlobal(GuardExport).(api.MutableGlobal)
	f, fok := mod.ExportedGlobal(FuelExport).(api.MutableGlobal)
	if !ok || !fok {
		return false
	}
	g.Set(1)
	f.Set(0)
	return true
}

// Stopped reports whether mod's guard is set.
func Stopped(mod api.Module) bool {
	g := mod.ExportedGlobal(GuardExport)
	return g != nil && g.Get() != 0
}

// countImports counts the global and memory imports of an import
// section.
func countImports(body []byte) (globals, memories int, err error) {
	r := reader{b: body}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.take(int(r.u32())) // module
		r.take(int(r.u32())) // name
		switch kind := r.byte(); kind {
		case 0x00: // func: type index
			r.u32()
		case 0x01: // table: reftype, limits
			r.byte()
			r.limits()
		case 0x02: // memory: limits
			r.limits()
			memories++
		case 0x03: // global: valtype, mutability
			r.byte()
			r.byte()
			globals++
		case 0x04: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			return 0, 0, fmt.Errorf("%w: import kind %#x", ErrUnguardable, kind)
		}
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("%w: import section: %v", ErrUnguardable, r.err)
	}
	return globals, memories, nil
}

// customName is the name of a custom section.
func customName(body []byte) (string, bool) {
	r := reader{b: body}
	name := r.take(int(r.u32()))
	return string(name), r.err == nil
}

// guardCode rewrites a code section: after every loop's block type comes
//
//	global.get fuel; i32.const 1; i32.lt_s
//	if
//	  i32.const 0; memory.grow 0; drop    ;; a visit to Go
//	  global.get guard; if; unreachable; end
//	  i32.const guardFuel; global.set fuel
//	end
//	global.get fuel; i32.const 1; i32.sub; global.set fuel
//
// where fuel is the global after guard. A guest stopped keeps no fuel, so
// every later call stops at its first loop. The look is at fuel <= 0, not
// at zero: Stop's write of zero can land between the guest's check and its
// decrement, which then leaves -1, and a test for zero alone would count
// down four billion iterations before the next look.
func guardCode(body []byte, guard uint32) ([]byte, error) {
	fuel := guard + 1
	check := appendU32([]byte{0x23}, fuel)
	check = append(check, 0x41, 0x01, 0x48, 0x04, 0x40) // i32.const 1; i32.lt_s; if
	check = append(check, 0x41, 0x00, 0x40, 0x00, 0x1a)
	check = appendU32(append(check, 0x23), guard)
	check = append(check, 0x04, 0x40, 0x00, 0x0b, 0x41)
	check = appendS32(check, guardFuel)
	check = appendU32(append(check, 0x24), fuel)
	check = append(check, 0x0b)
	check = appendU32(append(check, 0x23), fuel)
	check = append(check, 0x41, 0x01, 0x6b)
	check = appendU32(append(check, 0x24), fuel)
	r := reader{b: body}
	n := r.count()
	out := appendU32(make([]byte, 0, len(body)+len(body)/16), n)
	var fn []byte
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		code := r.take(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("%w: code section: %v", ErrUnguardable, r.err)
		}
		var err error
		if fn, err = guardFunc(fn[:0], code, check); err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(fn)))
		out = append(out, fn...)
	}
	if !r.done() {
		return nil, fmt.Errorf("%w: %d bytes after the code section's bodies", ErrUnguardable, len(body)-r.pos)
	}
	return out, nil
}

// guardFunc appends to out the function body code with check after
// every loop header.
func guardFunc(out, code, check []byte) ([]byte, error) {
	r := reader{b: code}
	groups := r.u32()
	for i := uint32(0); i < groups && r.err == nil; i++ {
		r.u32()
		r.valtype()
	}
	out = append(out, code[:r.pos]...)
	for !r.done() && r.err == nil {
		start := r.pos
		op := r.byte()
		if err := r.immediates(op); err != nil {
			return nil, err
		}
		out = append(out, code[start:r.pos]...)
		if op == 0x03 { // loop
			out = append(out, check...)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnguardable, r.err)
	}
	return out, nil
}

// immediates skips the immediates of the instruction op.
func (r *reader) immediates(op byte) error {
	switch {
	case op <= 0x01 || op == 0x05 || op == 0x0a || op == 0x0b || op == 0x0f || op == 0x19 || op == 0x1a || op == 0x1b:
		// unreachable, nop, else, throw_ref, end, return, catch_all, drop, select
	case op >= 0x02 && op <= 0x04, op == 0x06: // block, loop, if, try
		r.blockType()
	case op == 0x07 || op == 0x08 || op == 0x09 || op == 0x0c || op == 0x0d || op == 0x18: // catch, throw, rethrow, br, br_if, delegate
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x10 || op == 0x12 || op == 0x14 || op == 0x15: // call, return_call, call_ref, return_call_ref
		r.u32()
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1c: // select t*
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valtype()
		}
	case op == 0x1f: // try_table
		r.blockType()
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			switch k := r.byte(); k {
			case 0x00, 0x01: // catch, catch_ref: tag, label
				r.u32()
				r.u32()
			case 0x02, 0x03: // catch_all, catch_all_ref: label
				r.u32()
			default:
				return fmt.Errorf("%w: try_table catch kind %#x", ErrUnguardable, k)
			}
		}
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		r.u32()
	case op == 0x41: // i32.const
		r.leb(5)
	case op == 0x42: // i64.const
		r.leb(10)
	case op == 0x43:
		r.take(4)
	case op == 0x44:
		r.take(8)
	case op >= 0x45 && op <= 0xc4: // numeric, sign extension
	case op == 0xd0: // ref.null
		r.heapType()
	case op == 0xd1 || op == 0xd3 || op == 0xd4: // ref.is_null, ref.eq, ref.as_non_null
	case op == 0xd2 || op == 0xd5 || op == 0xd6: // ref.func, br_on_null, br_on_non_null
		r.u32()
	case op == 0xfc:
		return r.prefixFC()
	case op == 0xfd:
		return r.prefixFD()
	case op == 0xfe:
		return r.prefixFE()
	default:
		return fmt.Errorf("%w: opcode %#x", ErrUnguardable, op)
	}
	return nil
}

func (r *reader) prefixFC() error {
	switch sub := r.u32(); {
	case sub <= 7: // saturating truncations
	case sub == 8: // memory.init: data, memory
		r.u32()
		r.u32()
	case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17): // data.drop, memory.fill, elem.drop, table.grow/size/fill
		r.u32()
	case sub == 10 || sub == 12 || sub == 14: // memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	default:
		return fmt.Errorf("%w: opcode 0xfc %d", ErrUnguardable, sub)
	}
	return nil
}

func (r *reader) prefixFD() error {
	switch sub := r.u32(); {
	case sub <= 11 || sub == 92 || sub == 93: // v128 loads and stores
		r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		r.take(16)
	case sub >= 21 && sub <= 34: // extract and replace lane
		r.byte()
	case sub >= 84 && sub <= 91: // load and store lane
		r.memarg()
		r.byte()
	case sub <= 0x113: // the rest have no immediates
	default:
		return fmt.Errorf("%w: opcode 0xfd %d", ErrUnguardable, sub)
	}
	return nil
}

func (r *reader) prefixFE() error {
	switch sub := r.u32(); {
	case sub == 0x03: // atomic.fence
		r.byte()
	case sub <= 0x4e:
		r.memarg()
	default:
		return fmt.Errorf("%w: opcode 0xfe %d", ErrUnguardable, sub)
	}
	return nil
}

// reader decodes a binary; the first error sticks and stops it.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) done() bool { return r.err != nil || r.pos >= len(r.b) }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil || r.pos >= len(r.b) {
		r.fail("unexpected end at %d", r.pos)
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b)-r.pos {
		r.fail("%d bytes wanted at %d, %d left", n, r.pos, len(r.b)-r.pos)
		return nil
	}
	p := r.b[r.pos : r.pos+n]
	r.pos += n
	return p
}

// leb skips a LEB128 number of at most max bytes and returns its low 32
// bits read as unsigned.
func (r *reader) leb(max int) uint32 {
	var v uint32
	for i := 0; i < max; i++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if i < 5 {
			v |= uint32(c&0x7f) << (7 * i)
		}
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("LEB128 longer than %d bytes at %d", max, r.pos)
	return 0
}

func (r *reader) u32() uint32 { return r.leb(5) }

// count reads the length of a vector, which cannot exceed the bytes left
// (every entry takes one at least).
func (r *reader) count() uint32 {
	n := r.u32()
	if r.err == nil && int64(n) > int64(len(r.b)-r.pos) {
		r.fail("a vector of %d entries in %d bytes", n, len(r.b)-r.pos)
	}
	return n
}

func (r *reader) limits() {
	flags := r.byte()
	r.leb(10)
	if flags&0x01 != 0 {
		r.leb(10)
	}
}

func (r *reader) memarg() {
	if align := r.u32(); align&0x40 != 0 { // multiple memories: a memory index follows
		r.u32()
	}
	r.leb(10)
}

// valtype reads a value type: the numeric, vector and reference types
// of one byte (typed references of the GC proposal are not decoded).
func (r *reader) valtype() {
	switch c := r.byte(); c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f, 0x69:
	default:
		r.fail("value type %#x", c)
	}
}

func (r *reader) heapType() {
	switch c := r.byte(); c {
	case 0x70, 0x6f, 0x69:
	default:
		r.fail("heap type %#x", c)
	}
}

// blockType reads a block type: empty (0x40), one value type, or a type
// index (a positive signed LEB128).
func (r *reader) blockType() {
	if r.pos >= len(r.b) {
		r.fail("unexpected end at %d", r.pos)
		return
	}
	switch c := r.b[r.pos]; c {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f, 0x69:
		r.pos++
	default:
		if c&0x40 != 0 && c&0x80 == 0 { // a negative one-byte number: an unknown type
			r.fail("block type %#x", c)
			return
		}
		r.leb(5)
	}
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// appendS32 appends v as a signed LEB128 number.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendU32(b, uint32(len(s))), s...)
}
