package execd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// PTYExecutor is implemented by backends that can run interactive
// terminals. The handler serves POST /pty and GET /pty/{id}/ws when its
// Executor implements it, and answers NOT_SUPPORTED otherwise.
type PTYExecutor interface {
	// StartPTY starts spec on a new pseudo-terminal. ctx bounds the start
	// only; the terminal lives until it exits or is closed.
	//
	// # Errors
	// When the working directory does not exist (fs.ErrNotExist) or the
	// program cannot start.
	StartPTY(ctx context.Context, spec PTYSpec) (PTY, error)
}

// PTYSpec describes a terminal program.
type PTYSpec struct {
	Command    string            // shell source; "" = an interactive login shell
	Cwd        string            // guest path; "" = backend default
	Env        map[string]string // extra environment variables
	Cols, Rows int               // initial size; 0 = 80x24
}

// PTY is a program running on a pseudo-terminal.
type PTY interface {
	// Read reads terminal output; io.EOF once the program exited and its
	// output was read.
	Read(p []byte) (int, error)
	// Write sends keyboard input.
	Write(p []byte) (int, error)
	// Resize changes the terminal size.
	Resize(cols, rows int) error
	// Signal sends a signal, named like "SIGINT", "INT" or "2", to the
	// terminal's foreground process group.
	Signal(name string) error
	// Wait waits for the program to exit and returns its exit code.
	Wait() (int, error)
	// Close kills the program and releases the terminal.
	Close() error
}

// PTY protocol limits.
const (
	ptyReplayBytes     = 64 << 10        // output kept for a (re)connecting client
	ptyMaxMessage      = 1 << 20         // largest client message
	ptyForgetAfterExit = 5 * time.Minute // an exited, unseen terminal is kept this long
)

// PTY channel bytes (first byte of a binary frame).
const (
	ptyChanStdin  byte = 0x00
	ptyChanStdout byte = 0x01
	ptyChanReplay byte = 0x03
)

// ptyManager serves /pty.
type ptyManager struct {
	h      *Handler
	mu     sync.Mutex
	byID   map[string]*ptySession
	closed bool // closeAll ran: no new terminals
}

// ptyCloseWait bounds how long closeAll waits for a killed program's
// output pump to end.
const ptyCloseWait = 5 * time.Second

// closeAll ends every terminal: its program is killed and its clients are
// disconnected, and it waits (boundedly) for the output pumps to finish.
// Creating a terminal afterwards fails.
func (m *ptyManager) closeAll() {
	m.mu.Lock()
	m.closed = true
	all := make([]*ptySession, 0, len(m.byID))
	for _, s := range m.byID {
		all = append(all, s)
	}
	clear(m.byID)
	m.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		if c := s.client; c != nil {
			_ = c.close(wsCloseGoingAway, "the sandbox is closing")
			s.client = nil
		}
		s.mu.Unlock()
		_ = s.t.Close()
	}
	deadline := time.After(ptyCloseWait)
	for _, s := range all {
		select {
		case <-s.done:
		case <-deadline:
			return
		}
	}
}

func newPTYManager(h *Handler) *ptyManager {
	return &ptyManager{h: h, byID: map[string]*ptySession{}}
}

// orElse serves with f when the backend has terminals, else with fallback.
func (m *ptyManager) orElse(f, fallback http.HandlerFunc) http.HandlerFunc {
	if _, ok := m.h.opts.Executor.(PTYExecutor); ok {
		return f
	}
	return fallback
}

// ptySession is one terminal and its (at most one) attached client.
type ptySession struct {
	id string
	t  PTY

	mu       sync.Mutex // guards everything below; held while writing to client
	replay   []byte
	client   *wsConn
	exited   bool
	exitCode int
	seen     bool          // a client received the exit message
	done     chan struct{} // closed when the program exited
}

func (m *ptyManager) create(w http.ResponseWriter, r *http.Request) {
	var req api.PtyRequest
	if r.ContentLength != 0 {
		if !m.h.decodeJSON(w, r, &req) {
			return
		}
	}
	if req.Cols < 0 || req.Rows < 0 || req.Cols > 10000 || req.Rows > 10000 {
		writeError(w, CodeInvalidRequestBody, "cols and rows must be between 0 and 10000")
		return
	}
	env := req.Envs
	if env == nil {
		env = req.Env
	}
	m.mu.Lock()
	n := len(m.byID)
	m.mu.Unlock()
	if n >= m.h.opts.MaxContexts {
		writeErr(w, fmt.Errorf("%w: this sandbox already has %d terminals; delete one first", ErrOverloaded, n))
		return
	}
	t, err := m.h.opts.Executor.(PTYExecutor).StartPTY(r.Context(), PTYSpec{Command: req.Command, Cwd: req.Cwd, Env: env, Cols: req.Cols, Rows: req.Rows})
	if err != nil {
		writeErr(w, err)
		return
	}
	s := &ptySession{id: newID(), t: t, done: make(chan struct{})}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = t.Close()
		writeError(w, api.ErrorCodeUNAVAILABLE, "the sandbox is closing")
		return
	}
	m.byID[s.id] = s
	m.mu.Unlock()
	go m.pump(s)
	writeJSON(w, http.StatusOK, api.PtyCreated{SessionID: s.id})
}

// pump copies terminal output to the replay buffer and the client, then
// reports the exit.
func (m *ptyManager) pump(s *ptySession) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.t.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.replay = append(s.replay, buf[:n]...)
			if over := len(s.replay) - ptyReplayBytes; over > 0 {
				s.replay = append(s.replay[:0], s.replay[over:]...)
			}
			if s.client != nil {
				frame := append([]byte{ptyChanStdout}, buf[:n]...)
				if s.client.write(wsOpBinary, frame) != nil {
					s.client.close(wsCloseGoingAway, "")
					s.client = nil
				}
			}
			s.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	code, _ := s.t.Wait()
	s.mu.Lock()
	s.exited, s.exitCode = true, code
	if c := s.client; c != nil {
		s.sendExitLocked(c)
	}
	seen := s.seen
	s.mu.Unlock()
	close(s.done)
	if seen {
		m.forget(s)
		return
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return
	}
	time.AfterFunc(ptyForgetAfterExit, func() { m.forget(s) })
}

// sendExitLocked tells c that the program exited and ends the connection.
func (s *ptySession) sendExitLocked(c *wsConn) {
	code := s.exitCode
	b, _ := json.Marshal(api.PtyServerMessage{Type: api.PtyServerMessageTypeExit, ExitCode: &code})
	_ = c.write(wsOpText, b)
	_ = c.writeClose(wsCloseNormal, "exited")
	if c.nc != nil { // the client has a moment to answer the close
		_ = c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	}
	s.seen = true
}

func (m *ptyManager) forget(s *ptySession) {
	m.mu.Lock()
	if m.byID[s.id] == s {
		delete(m.byID, s.id)
	}
	m.mu.Unlock()
	_ = s.t.Close()
}

func (m *ptyManager) lookup(id string) (*ptySession, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	return s, ok
}

// route serves /pty/{id}, /pty/{id}/ws.
func (m *ptyManager) route(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/pty/")
	id, sub, _ := strings.Cut(rest, "/")
	s, ok := m.lookup(id)
	if !ok {
		writeError(w, CodeNotFound, fmt.Sprintf("terminal %q not found", id))
		return
	}
	switch {
	case sub == "ws" && r.Method == http.MethodGet:
		m.attach(w, r, s)
	case sub == "" && r.Method == http.MethodGet:
		s.mu.Lock()
		st := api.PtyStatus{SessionID: s.id, Running: !s.exited}
		if s.exited {
			code := s.exitCode
			st.ExitCode = &code
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	case sub == "" && r.Method == http.MethodDelete:
		m.forget(s)
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	}
}

// ptyControl is a text message from the client.
type ptyControl = api.PtyClientMessage

// attach connects a WebSocket client; a client already attached is
// disconnected (the newest connection wins, as after a network change).
func (m *ptyManager) attach(w http.ResponseWriter, r *http.Request, s *ptySession) {
	c, err := upgradeWebSocket(w, r, ptyMaxMessage)
	if err != nil {
		return
	}
	defer c.closer.Close()
	hello, _ := json.Marshal(api.PtyServerMessage{Type: api.PtyServerMessageTypeConnected, SessionID: s.id, Mode: api.PtyServerMessageModePty})
	s.mu.Lock()
	if old := s.client; old != nil {
		_ = old.close(wsCloseGoingAway, "another client attached")
	}
	s.client = c
	ok := c.write(wsOpText, hello) == nil
	if ok && len(s.replay) > 0 {
		ok = c.write(wsOpBinary, append([]byte{ptyChanReplay}, s.replay...)) == nil
	}
	if ok && s.exited {
		s.sendExitLocked(c)
	}
	s.mu.Unlock()
	if s.seenExit() {
		m.forget(s)
	}
	defer func() {
		s.mu.Lock()
		if s.client == c {
			s.client = nil
		}
		s.mu.Unlock()
	}()
	for ok {
		op, data, err := c.readMessage()
		if err != nil {
			return
		}
		if err := m.input(c, s, op, data); err != nil {
			b, _ := json.Marshal(api.PtyServerMessage{Type: api.PtyServerMessageTypeError, Message: err.Error()})
			_ = c.write(wsOpText, b)
		}
	}
}

func (s *ptySession) seenExit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// input handles one client message.
func (m *ptyManager) input(c *wsConn, s *ptySession, op byte, data []byte) error {
	if op == wsOpBinary {
		if len(data) == 0 || data[0] != ptyChanStdin {
			return errors.New("binary messages must start with channel byte 0x00 (stdin)")
		}
		_, err := s.t.Write(data[1:])
		return ignoreClosed(err)
	}
	var ctl ptyControl
	if err := json.Unmarshal(data, &ctl); err != nil {
		return fmt.Errorf("invalid control message: %v", err)
	}
	switch ctl.Type {
	case api.PtyClientMessageTypeStdin:
		_, err := io.WriteString(s.t, ctl.Data)
		return ignoreClosed(err)
	case api.PtyClientMessageTypeResize:
		if ctl.Cols <= 0 || ctl.Rows <= 0 || ctl.Cols > 10000 || ctl.Rows > 10000 {
			return errors.New("resize needs cols and rows between 1 and 10000")
		}
		return s.t.Resize(ctl.Cols, ctl.Rows)
	case api.PtyClientMessageTypeSignal:
		return s.t.Signal(ctl.Signal)
	case api.PtyClientMessageTypePing:
		pong, _ := json.Marshal(api.PtyServerMessage{Type: api.PtyServerMessageTypePong})
		return c.write(wsOpText, pong)
	default:
		return fmt.Errorf("unknown message type %q (stdin, resize, signal, ping)", ctl.Type)
	}
}

// ignoreClosed drops the error of input written after the program exited.
func ignoreClosed(err error) error {
	if err != nil && (errors.Is(err, io.ErrClosedPipe) || strings.Contains(err.Error(), "closed")) {
		return nil
	}
	return err
}
