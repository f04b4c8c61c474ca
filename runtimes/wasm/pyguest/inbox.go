package pyguest

import (
	"io"
	"sync"
)

// inbox is the guest's stdin: the host appends requests without waiting for
// the guest to read them (unlike io.Pipe), and the guest's Read blocks until
// there are bytes or the inbox is closed.
type inbox struct {
	mu     sync.Mutex
	buf    []byte
	err    error         // set by Close; returned once buf is drained
	signal chan struct{} // capacity 1: data or close happened
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

// Write queues p for the guest. It fails after Close.
func (b *inbox) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	b.buf = append(b.buf, p...)
	b.mu.Unlock()
	b.wake()
	return len(p), nil
}

// Read implements io.Reader for the guest.
func (b *inbox) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if len(b.buf) > 0 {
			n := copy(p, b.buf)
			b.buf = b.buf[n:]
			if len(b.buf) == 0 {
				b.buf = nil
			}
			b.mu.Unlock()
			return n, nil
		}
		if b.err != nil {
			b.mu.Unlock()
			return 0, io.EOF
		}
		b.mu.Unlock()
		<-b.signal
	}
}

// CloseWithError makes later Writes fail with err and Read return EOF once
// the queued bytes are read.
func (b *inbox) CloseWithError(err error) error {
	if err == nil {
		err = io.ErrClosedPipe
	}
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	b.wake()
	return nil
}

func (b *inbox) wake() {
	select {
	case b.signal <- struct{}{}:
	default:
	}
}
