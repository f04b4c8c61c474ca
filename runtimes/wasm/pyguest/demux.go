package pyguest

import "bytes"

// frameMagic starts every control frame the driver writes on fd 1. It must
// match MAGIC in driver.py. Its first byte (NUL) occurs nowhere else in it,
// which keeps the partial-match logic of demuxer simple.
const frameMagic = "\x00\x1bHYBOX\x1d"

// demuxer splits the guest's fd 1 into user stdout and control frames.
//
// Framing: a control frame is frameMagic, one line of ASCII JSON, then "\n".
// Every other byte is stdout. Frames and stdout may be split across Write
// calls at any byte; stdout is passed on as soon as it cannot be the start of
// a frame, so a print is forwarded in the Write that carries it (only a
// trailing prefix of frameMagic, at most len(frameMagic)-1 bytes, is held back
// until the next Write).
//
// A demuxer is used by one goroutine (the guest's).
type demuxer struct {
	stdout   func([]byte) // user output
	frame    func([]byte) // one control frame's JSON, without magic or newline
	maxFrame int          // longer frames are dropped and reported to tooLong
	tooLong  func()

	partial  []byte // held-back prefix of frameMagic
	inFrame  bool
	dropping bool // current frame exceeded maxFrame
	frameBuf []byte
}

// Write implements io.Writer; it never fails.
func (d *demuxer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if d.inFrame {
			p = d.frameBytes(p)
			continue
		}
		if len(d.partial) > 0 {
			need := frameMagic[len(d.partial):]
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
		if i := bytes.Index(p, []byte(frameMagic)); i >= 0 {
			d.emit(p[:i])
			d.inFrame = true
			p = p[i+len(frameMagic):]
			continue
		}
		// Hold back a suffix that may be the start of the magic.
		tail := max(0, len(p)-len(frameMagic)+1)
		if j := bytes.LastIndexByte(p[tail:], frameMagic[0]); j >= 0 {
			j += tail
			if bytes.HasPrefix([]byte(frameMagic), p[j:]) {
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
func (d *demuxer) frameBytes(p []byte) []byte {
	i := bytes.IndexByte(p, '\n')
	body := p
	if i >= 0 {
		body = p[:i]
	}
	if !d.dropping {
		if d.maxFrame > 0 && len(d.frameBuf)+len(body) > d.maxFrame {
			d.dropping = true
			d.frameBuf = d.frameBuf[:0]
			if d.tooLong != nil {
				d.tooLong()
			}
		} else {
			d.frameBuf = append(d.frameBuf, body...)
		}
	}
	if i < 0 {
		return nil
	}
	if !d.dropping {
		d.frame(d.frameBuf)
	}
	d.inFrame, d.dropping = false, false
	d.frameBuf = d.frameBuf[:0]
	if cap(d.frameBuf) > 1<<20 {
		d.frameBuf = nil // do not keep a large result's buffer alive
	}
	return p[i+1:]
}

func (d *demuxer) emit(b []byte) {
	if len(b) > 0 {
		d.stdout(b)
	}
}
