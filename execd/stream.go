package execd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Sink receives the events of one execution, in order. Send reports
// false once nobody listens any more; the execution goes on to its end (or
// its cancellation) regardless. Implementations must be safe for
// concurrent use (keep-alive pings come from another goroutine).
type Sink interface {
	Send(ev Event) bool
}

// send stamps ev with the time if it has none and hands it to s.
func send(s Sink, ev Event) bool {
	if ev.Timestamp == 0 {
		ev.Timestamp = nowMillis()
	}
	return s.Send(ev)
}

// stream writes events of one command or code execution to an HTTP
// response: one JSON object followed by a blank line per event, flushed
// at once. It is safe for concurrent use.
type stream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	failed  bool // the client went away; further events are dropped
	// Flushes are coalesced: an event is on the wire within flushDelay,
	// but a flood of small events costs one write per delay, not one each.
	lastFlush time.Time
	pending   bool
	timer     *time.Timer
}

// flushDelay bounds how long an event may wait in the buffer.
const flushDelay = 2 * time.Millisecond

func newStream(w http.ResponseWriter) *stream {
	return &stream{w: w, rc: http.NewResponseController(w)}
}

// Stream is a Sink that writes events to an HTTP response as execd does
// (text/event-stream, flushed within milliseconds). Close it before the
// handler returns.
type Stream struct{ s *stream }

// NewStream returns a Stream over w. The status and headers are written
// with the first event, so an error answered before it is still possible.
func NewStream(w http.ResponseWriter) *Stream { return &Stream{newStream(w)} }

// Send implements Sink.
func (s *Stream) Send(ev Event) bool { return s.s.Send(ev) }

// Close flushes what is buffered; nothing is written after it.
func (s *Stream) Close() { s.s.close() }

func nowMillis() int64 { return time.Now().UnixMilli() }

// Send writes ev. It reports false once the client is gone.
func (s *stream) Send(ev Event) bool {
	if ev.Timestamp == 0 {
		ev.Timestamp = nowMillis()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return false
	}
	b = append(b, '\n', '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return false
	}
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if _, err := s.w.Write(b); err != nil {
		s.failed = true
		return false
	}
	if time.Since(s.lastFlush) >= flushDelay {
		return s.flushLocked()
	}
	if !s.pending {
		s.pending = true
		s.timer = time.AfterFunc(flushDelay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pending {
				s.flushLocked()
			}
		})
	}
	return true
}

func (s *stream) flushLocked() bool {
	s.pending = false
	s.lastFlush = time.Now()
	if s.failed {
		return false
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
		return false
	}
	return true
}

// close flushes what is buffered and stops the flush timer. The handler
// must call it before returning.
func (s *stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.pending && s.started {
		s.flushLocked()
	}
	s.failed = true // nothing may be written after the handler returns
}

// keepAlive sends a ping event to s every interval until stop is closed.
func keepAlive(s Sink, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			send(s, Event{Type: EventPing, Text: "pong"})
		}
	}
}

// maxLineBytes bounds one stdout/stderr event of a command; a longer line
// is sent in pieces.
const maxLineBytes = 64 << 10

// lineWriter turns a byte stream into one event per line (without its
// newline), as command streams require. Flush sends a trailing partial line.
type lineWriter struct {
	mu   sync.Mutex
	typ  api.EventType
	buf  []byte
	emit func(typ api.EventType, text string)
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			for len(l.buf) >= maxLineBytes {
				cut := utf8Cut(l.buf, maxLineBytes)
				l.emit(l.typ, string(l.buf[:cut]))
				l.buf = append(l.buf[:0], l.buf[cut:]...)
			}
			break
		}
		line := p[:i]
		if len(l.buf) > 0 {
			line = append(l.buf, line...)
			l.buf = l.buf[:0]
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		l.emit(l.typ, string(line))
		p = p[i+1:]
	}
	return n, nil
}

func (l *lineWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.typ, string(l.buf))
		l.buf = l.buf[:0]
	}
}

// utf8Cut returns a cut position <= n that does not split a UTF-8 sequence.
func utf8Cut(b []byte, n int) int {
	if n >= len(b) {
		return len(b)
	}
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return n
}

// budget is an output allowance shared by the stdout and stderr of one
// execution. When it runs out, onLimit is called once and later output is
// dropped.
type budget struct {
	mu      sync.Mutex
	n       int64
	limit   int64
	hit     bool
	onLimit func()
}

// capped returns a writer that forwards to w while the budget lasts.
func (b *budget) capped(w interface{ Write([]byte) (int, error) }) *capWriter {
	return &capWriter{b: b, w: w}
}

// exceeded reports whether the budget ran out.
func (b *budget) exceeded() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hit
}

type capWriter struct {
	b *budget
	w interface{ Write([]byte) (int, error) }
}

func (c *capWriter) Write(p []byte) (int, error) {
	b := c.b
	b.mu.Lock()
	if b.hit {
		b.mu.Unlock()
		return len(p), nil
	}
	if b.limit > 0 && b.n+int64(len(p)) > b.limit {
		keep := b.limit - b.n
		b.n = b.limit
		b.hit = true
		b.mu.Unlock()
		if keep > 0 {
			_, _ = c.w.Write(p[:keep])
		}
		if b.onLimit != nil {
			b.onLimit()
		}
		return len(p), nil
	}
	b.n += int64(len(p))
	b.mu.Unlock()
	return c.w.Write(p)
}
