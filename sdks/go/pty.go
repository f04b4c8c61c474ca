package hybox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// PTY is an interactive terminal of a sandbox, over a WebSocket. Read
// returns its output (stdout and stderr as the terminal shows them), Write
// sends keyboard input. Container sandboxes have terminals; wasm sandboxes
// do not (OpenPTY fails with ErrNotSupported).
type PTY struct {
	// ID is the terminal session id.
	ID string

	t    *transport
	conn *websocket.Conn
	out  *io.PipeReader

	done     chan struct{} // closed when the exit frame or an error ends the stream
	mu       sync.Mutex
	exitCode int
	exited   bool
	err      error
}

// OpenPTY starts a terminal running req.Command (an interactive shell
// when empty) and attaches to it.
//
// # Errors
// An *APIError matching ErrNotSupported for a runtime without terminals,
// ErrInvalid for a bad size or cwd; a WebSocket error.
func (s *Sandbox) OpenPTY(ctx context.Context, req api.PtyRequest) (*PTY, error) {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return nil, err
	}
	var created api.PtyCreated
	if err := t.call(ctx, request{method: http.MethodPost, path: "/pty", body: req}, &created); err != nil {
		return nil, err
	}
	u := *t.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path += "/pty/" + created.SessionID + "/ws"
	u.RawPath = ""
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: t.hc, HTTPHeader: t.headers.Clone()})
	if err != nil {
		return nil, fmt.Errorf("hybox: attach terminal %s: %w", created.SessionID, err)
	}
	conn.SetReadLimit(2 << 20)
	pr, pw := io.Pipe()
	p := &PTY{ID: created.SessionID, t: t, conn: conn, out: pr, done: make(chan struct{})}
	go p.pump(pw)
	return p, nil
}

// pump reads frames until the exit frame or an error: output goes to pw.
func (p *PTY) pump(pw *io.PipeWriter) {
	ctx := context.Background()
	finish := func(code int, exited bool, err error) {
		p.mu.Lock()
		p.exitCode, p.exited, p.err = code, exited, err
		p.mu.Unlock()
		close(p.done)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}
	for {
		typ, data, err := p.conn.Read(ctx)
		if err != nil {
			finish(-1, false, fmt.Errorf("hybox: terminal %s: %w", p.ID, err))
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) > 1 {
				if _, err := pw.Write(data[1:]); err != nil {
					finish(-1, false, err)
					return
				}
			}
			continue
		}
		var m api.PtyServerMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		if m.Type == api.PtyServerMessageTypeExit {
			code := -1
			if m.ExitCode != nil {
				code = *m.ExitCode
			}
			finish(code, true, nil)
			return
		}
	}
}

// Read reads terminal output; it returns io.EOF after the program exited
// and its output was read.
//
// # Errors
// The WebSocket's error when the connection ends before the program.
func (p *PTY) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write sends keyboard input to the terminal.
//
// # Errors
// The WebSocket's error.
func (p *PTY) Write(b []byte) (int, error) {
	msg := make([]byte, 1+len(b))
	copy(msg[1:], b) // channel 0x00: stdin
	if err := p.conn.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (p *PTY) control(ctx context.Context, m api.PtyClientMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return p.conn.Write(ctx, websocket.MessageText, b)
}

// Resize changes the terminal's size.
//
// # Errors
// The WebSocket's error.
func (p *PTY) Resize(ctx context.Context, cols, rows int) error {
	return p.control(ctx, api.PtyClientMessage{Type: api.PtyClientMessageTypeResize, Cols: cols, Rows: rows})
}

// Signal sends a signal (such as "SIGINT") to the terminal's foreground
// process group.
//
// # Errors
// The WebSocket's error.
func (p *PTY) Signal(ctx context.Context, signal string) error {
	return p.control(ctx, api.PtyClientMessage{Type: api.PtyClientMessageTypeSignal, Signal: signal})
}

// Wait waits for the terminal's program to exit and returns its exit
// code.
//
// # Errors
// The connection's error when it ended before the program; ctx's error.
func (p *PTY) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return -1, context.Cause(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		return -1, p.err
	}
	return p.exitCode, nil
}

// Close detaches from the terminal and ends it on the server.
//
// # Errors
// The error of ending the terminal, unless it was gone already.
func (p *PTY) Close() error {
	_ = p.conn.Close(websocket.StatusNormalClosure, "")
	_ = p.out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), interruptGrace)
	defer cancel()
	err := p.t.call(ctx, request{method: http.MethodDelete, path: "/pty/" + pathEscape(p.ID)}, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
