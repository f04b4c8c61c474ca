package pydriver

import "bytes"

// Demuxer splits the driver's fd 1 into user stdout and control frames.
//
// Framing: a control frame is Magic, one line of ASCII JSON, then "\n".
// Every other byte is stdout. Frames and stdout may be split across Write
// calls at any byte; stdout is passed on as soon as it cannot be the start of
// a frame, so a print is forwarded in the Write that carries it (only a
// trailing prefix of Magic, at most len(Magic)-1 bytes, is held back
// until the next Write).
//
// A Demuxer is used by one goroutine at a time. The slices passed to its
// callbacks are only valid during the call.
type Demuxer struct {
	// Stdout receives user output. Required.
	Stdout func([]byte)
	// Frame receives one control frame's JSON, without magic or newline. Required.
	Frame func([]byte)
	// MaxFrame bounds a frame; longer frames are dropped and reported to
	// TooLong. 0 = no bound.
	MaxFrame int
	// TooLong, when set, is called for each dropped frame.
	TooLong func()

	partial  []byte // held-back prefix of Magic
	inFrame  bool
	dropping bool // current frame exceeded maxFrame
	frameBuf []byte
}

// Write implements io.Writer; it never fails.
func (d *Demuxer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if d.inFrame {
			p = d.frameBytes(p)
			continue
		}
		if len(d.partial) > 0 {
			need := Magic[len(d.partial):]
			k := min(len(need), len(p))
			if string(p[:k]) != need[:k] {
				// Not a frame after all: the held bytes are output. None of
				// them but the first is NUL, so no later magic starts inside.
				d.emit(d.partial)
				d.partial = d.partial[:0]
				continue
			}
			if k < len(need) {
				d.partial = append(d.partial, p...)
				return n, nil
			}
			d.partial = d.partial[:0]
			d.inFrame = true
			p = p[k:]
			continue
		}
		if i := bytes.Index(p, []byte(Magic)); i >= 0 {
			d.emit(p[:i])
			d.inFrame = true
			p = p[i+len(Magic):]
			continue
		}
		// Hold back a suffix that may be the start of the magic.
		tail := max(0, len(p)-len(Magic)+1)
		if j := bytes.LastIndexByte(p[tail:], Magic[0]); j >= 0 {
			j += tail
			if bytes.HasPrefix([]byte(Magic), p[j:]) {
				d.emit(p[:j])
				d.partial = append(d.partial, p[j:]...)
				return n, nil
			}
		}
		d.emit(p)
		p = nil
	}
	return n, nil
}

// frameBytes consumes p up to the end of the current frame and returns the rest.
func (d *Demuxer) frameBytes(p []byte) []byte {
	i := bytes.IndexByte(p, '\n')
	body := p
	if i >= 0 {
		body = p[:i]
	}
	if !d.dropping {
		if d.MaxFrame > 0 && len(d.frameBuf)+len(body) > d.MaxFrame {
			d.dropping = true
			d.frameBuf = d.frameBuf[:0]
			if d.TooLong != nil {
				d.TooLong()
			}
		} else {
			d.frameBuf = append(d.frameBuf, body...)
		}
	}
	if i < 0 {
		return nil
	}
	if !d.dropping {
		d.Frame(d.frameBuf)
	}
	d.inFrame, d.dropping = false, false
	d.frameBuf = d.frameBuf[:0]
	if cap(d.frameBuf) > 1<<20 {
		d.frameBuf = nil // do not keep a large result's buffer alive
	}
	return p[i+1:]
}

func (d *Demuxer) emit(b []byte) {
	if len(b) > 0 {
		d.Stdout(b)
	}
}
