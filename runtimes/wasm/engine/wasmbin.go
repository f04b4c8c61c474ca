package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DataSegment is an active data segment of a module: Data is copied to
// linear memory at Offset when the module is instantiated.
type DataSegment struct {
	Offset uint32
	Data   []byte // aliases the module's bytes
}

// SplitData returns a copy of the module bin whose data section holds no
// segments, and the segments it held. Instances of the stripped module start
// with zeroed memory, so a host can fill it from a memory image without
// first paying (and dirtying pages for) the data segments; a host that
// starts from scratch writes the segments itself. A data count section
// (bulk memory) says zero segments in the copy: if the module's code
// refers to a segment (memory.init, data.drop), the copy does not compile.
//
// # Errors
// When bin is not a well-formed module, or when a segment is passive or
// its offset is not a constant.
func SplitData(bin []byte) (stripped []byte, segs []DataSegment, err error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, nil, errors.New("wasm: not a module")
	}
	out := make([]byte, 0, len(bin))
	out = append(out, bin[:8]...)
	p := 8
	for p < len(bin) {
		id := bin[p]
		size, n := binary.Uvarint(bin[p+1:])
		if n <= 0 || uint64(len(bin)-p-1-n) < size {
			return nil, nil, fmt.Errorf("wasm: bad section header at %d", p)
		}
		body := bin[p+1+n : p+1+n+int(size)]
		next := p + 1 + n + int(size)
		switch id {
		case 12:
			out = append(out, 12, 1, 0) // the data count: no segments
		case 11:
			segs, err = parseData(body)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, 11, 1, 0) // a data section with no segments
		default:
			out = append(out, bin[p:next]...)
		}
		p = next
	}
	return out, segs, nil
}

func parseData(b []byte) ([]DataSegment, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("wasm: bad data section")
	}
	b = b[n:]
	segs := make([]DataSegment, 0, count)
	for i := uint64(0); i < count; i++ {
		flags, n := binary.Uvarint(b)
		if n <= 0 || flags != 0 {
			return nil, fmt.Errorf("wasm: data segment %d: only active segments of memory 0 are supported (flags %d)", i, flags)
		}
		b = b[n:]
		if len(b) < 2 || b[0] != 0x41 { // i32.const
			return nil, fmt.Errorf("wasm: data segment %d: offset is not i32.const", i)
		}
		v, m := readSLEB32(b[1:])
		if m <= 0 || len(b) < 1+m+1 || b[1+m] != 0x0b {
			return nil, fmt.Errorf("wasm: data segment %d: bad offset expression", i)
		}
		b = b[1+m+1:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, fmt.Errorf("wasm: data segment %d: truncated", i)
		}
		segs = append(segs, DataSegment{Offset: uint32(v), Data: b[n : n+int(size)]})
		b = b[n+int(size):]
	}
	return segs, nil
}

// readSLEB32 decodes a signed LEB128 value of at most 5 bytes; n <= 0 on
// malformed input.
func readSLEB32(b []byte) (v int32, n int) {
	var result int64
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		c := b[i]
		result |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				result |= -1 << shift
			}
			return int32(result), i + 1
		}
	}
	return 0, -1
}
