package execd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// commandRequest is the body of POST /command (Timeout in milliseconds).
type commandRequest = api.CommandRequest

// command is one command's record, kept for status and logs.
type command struct {
	id      string
	content string
	started time.Time

	mu       sync.Mutex
	running  bool
	exitCode *int
	errText  string
	finished time.Time
	proc     Process
	cancel   context.CancelCauseFunc
	logs     *logBuffer
}

func (c *command) status() api.CommandStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := api.CommandStatus{ID: c.id, Content: c.content, Running: c.running, ExitCode: c.exitCode, Error: c.errText,
		StartedAt: c.started.UTC()}
	if !c.finished.IsZero() {
		f := c.finished.UTC()
		st.FinishedAt = &f
	}
	return st
}

type commandManager struct {
	h     *Handler
	mu    sync.Mutex
	byID  map[string]*command
	order []string // insertion order, for forgetting the oldest finished
}

func newCommandManager(h *Handler) *commandManager {
	return &commandManager{h: h, byID: map[string]*command{}}
}

func (m *commandManager) add(c *command) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byID[c.id] = c
	m.order = append(m.order, c.id)
	if len(m.order) <= m.h.opts.MaxCommands {
		return
	}
	// Forget the oldest finished commands.
	kept := m.order[:0]
	excess := len(m.order) - m.h.opts.MaxCommands
	for _, id := range m.order {
		if excess > 0 {
			if old := m.byID[id]; old != nil && !old.status().Running {
				delete(m.byID, id)
				excess--
				continue
			}
		}
		kept = append(kept, id)
	}
	m.order = kept
}

func (m *commandManager) lookup(id string) (*command, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.byID[id]
	return c, ok
}

func (m *commandManager) run(w http.ResponseWriter, r *http.Request) {
	var req commandRequest
	if !m.h.decodeJSON(w, r, &req) {
		return
	}
	if req.Command == "" && len(req.Argv) > 0 {
		req.Command = shellJoin(req.Argv)
	}
	if req.Command == "" {
		writeError(w, CodeInvalidRequestBody, "command is required")
		return
	}
	if req.Timeout < 0 {
		writeError(w, CodeInvalidRequestBody, "timeout must not be negative")
		return
	}
	if req.Background {
		m.background(w, r, req)
		return
	}
	release, err := m.h.opts.Limiter.Acquire(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	defer release()
	s := newStream(w)
	defer s.close()
	if err := m.foreground(r.Context(), req, m.h.execTimeout(req.Timeout), s); err != nil {
		writeErr(w, err)
	}
}

// exitOf returns the exit code and error text of a finished process.
func exitOf(code int, err error, cause error) (int, string) {
	if errors.Is(cause, ErrTimeout) {
		// Killed at its timeout, whatever the executor saw first (the
		// wasm shell can see the kill's cancel before the deadline).
		return 128 + 9, cause.Error()
	}
	if cause != nil {
		return code, cause.Error()
	}
	if err != nil {
		return code, err.Error()
	}
	return code, ""
}

// foreground runs a command to its end, sending one event per output line
// to s. It returns an error only when the command could not start (no
// event was sent then); every later failure is an event.
func (m *commandManager) foreground(ctx context.Context, req commandRequest, timeout time.Duration, s Sink) error {
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w after %s", ErrTimeout, timeout))
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	c := &command{id: newID(), content: req.Command, started: time.Now(), running: true, cancel: cancel,
		logs: newLogBuffer(m.h.opts.LogLimitBytes)}
	emit := func(typ api.EventType, text string) { send(s, Event{Type: typ, Text: text}) }
	stdout := &lineWriter{typ: EventStdout, emit: emit}
	stderr := &lineWriter{typ: EventStderr, emit: emit}
	b := &budget{limit: m.h.opts.OutputLimitBytes}
	b.onLimit = func() { cancel(fmt.Errorf("%w: more than %d bytes", ErrOutputLimit, b.limit)) }

	proc, err := m.h.opts.Executor.StartCommand(ctx, ProcessSpec{
		Command: req.Command, Cwd: req.Cwd, Env: req.Envs, UID: req.UID, GID: req.GID,
		Stdout: b.capped(multiWriter(stdout, c.logs)), Stderr: b.capped(multiWriter(stderr, c.logs)),
	})
	if err != nil {
		return err
	}
	c.proc = proc
	m.add(c)
	send(s, Event{Type: EventInit, Text: c.id})
	stop := make(chan struct{})
	defer close(stop)
	go keepAlive(s, m.h.opts.KeepAlive, stop)

	waitDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = proc.Kill()
		case <-waitDone:
		}
	}()
	code, werr := proc.Wait()
	close(waitDone)
	stdout.Flush()
	stderr.Flush()
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		cause = nil
	}
	code, errText := exitOf(code, werr, cause)
	m.finish(c, code, errText)
	if cause != nil {
		send(s, Event{Type: EventError, Error: &ExecError{EName: "CommandExecError", EValue: strconv.Itoa(code), Traceback: []string{cause.Error()}}})
		return nil
	}
	if code != 0 || werr != nil {
		tb := []string{}
		if werr != nil {
			tb = append(tb, werr.Error())
		}
		send(s, Event{Type: EventError, Error: &ExecError{EName: "CommandExecError", EValue: strconv.Itoa(code), Traceback: tb}})
		return nil
	}
	send(s, Event{Type: EventExecutionComplete, ExecutionTime: time.Since(c.started).Milliseconds()})
	return nil
}

func (m *commandManager) finish(c *command, code int, errText string) {
	c.mu.Lock()
	c.running = false
	c.exitCode = &code
	c.errText = errText
	c.finished = time.Now()
	c.mu.Unlock()
}

// background starts a command that outlives the request.
func (m *commandManager) background(w http.ResponseWriter, r *http.Request, req commandRequest) {
	timeout := m.h.opts.MaxExecTimeout
	if req.Timeout > 0 {
		timeout = m.h.execTimeout(req.Timeout)
	}
	ctx, cancelTimeout := context.WithTimeoutCause(context.WithoutCancel(r.Context()), timeout, fmt.Errorf("%w after %s", ErrTimeout, timeout))
	ctx, cancel := context.WithCancelCause(ctx)
	c := &command{id: newID(), content: req.Command, started: time.Now(), running: true, cancel: cancel,
		logs: newLogBuffer(m.h.opts.LogLimitBytes)}
	proc, err := m.h.opts.Executor.StartCommand(ctx, ProcessSpec{
		Command: req.Command, Cwd: req.Cwd, Env: req.Envs, UID: req.UID, GID: req.GID,
		Stdout: c.logs, Stderr: c.logs,
	})
	if err != nil {
		cancel(nil)
		cancelTimeout()
		writeErr(w, err)
		return
	}
	c.proc = proc
	m.add(c)
	go func() {
		defer cancelTimeout()
		waitDone := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				_ = proc.Kill()
			case <-waitDone:
			}
		}()
		code, werr := proc.Wait()
		close(waitDone)
		cause := context.Cause(ctx)
		if ctx.Err() == nil {
			cause = nil
		}
		code, errText := exitOf(code, werr, cause)
		m.finish(c, code, errText)
		cancel(nil)
	}()
	s := newStream(w)
	defer s.close()
	send(s, Event{Type: EventInit, Text: c.id})
	send(s, Event{Type: EventExecutionComplete, ExecutionTime: 0})
}

func (m *commandManager) status(w http.ResponseWriter, r *http.Request, id string) {
	c, ok := m.lookup(id)
	if !ok {
		writeError(w, CodeNotFound, fmt.Sprintf("command %q not found", id))
		return
	}
	writeJSON(w, http.StatusOK, c.status())
}

func (m *commandManager) logs(w http.ResponseWriter, r *http.Request, id string) {
	c, ok := m.lookup(id)
	if !ok {
		writeError(w, CodeNotFound, fmt.Sprintf("command %q not found", id))
		return
	}
	var cursor int64
	if v := r.URL.Query().Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, CodeInvalidRequestBody, "cursor must be a non-negative integer")
			return
		}
		cursor = n
	}
	data, next := c.logs.readFrom(cursor)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.FormatInt(next, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (m *commandManager) interrupt(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, CodeMissingQuery, "query parameter id is required")
		return
	}
	c, ok := m.lookup(id)
	if !ok {
		writeError(w, CodeNotFound, fmt.Sprintf("command %q not found", id))
		return
	}
	c.mu.Lock()
	if c.cancel != nil && c.running {
		c.cancel(fmt.Errorf("%w by a client request", ErrInterrupted))
	}
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (m *commandManager) closeAll() {
	m.mu.Lock()
	all := make([]*command, 0, len(m.byID))
	for _, c := range m.byID {
		all = append(all, c)
	}
	m.mu.Unlock()
	for _, c := range all {
		c.mu.Lock()
		if c.cancel != nil && c.running {
			c.cancel(errors.New("sandbox closed"))
		}
		c.mu.Unlock()
	}
}

// multiWriter writes to every writer, ignoring their errors (a slow or
// gone stream must not stop a command's log capture).
func multiWriter(ws ...interface{ Write([]byte) (int, error) }) writerFunc {
	return func(p []byte) (int, error) {
		for _, w := range ws {
			_, _ = w.Write(p)
		}
		return len(p), nil
	}
}

// logBuffer keeps the most recent limit bytes of a command's output,
// addressed by absolute byte offsets so cursors stay valid as old output
// is discarded.
type logBuffer struct {
	mu    sync.Mutex
	data  []byte
	start int64 // absolute offset of data[0]
	limit int64
}

func newLogBuffer(limit int64) *logBuffer { return &logBuffer{limit: limit} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.data = append(l.data, p...)
	if over := int64(len(l.data)) - l.limit; over > 0 {
		l.data = append(l.data[:0], l.data[over:]...)
		l.start += over
	}
	return len(p), nil
}

// readFrom returns the output from absolute offset cursor (or from the
// oldest kept byte) and the cursor to use next.
func (l *logBuffer) readFrom(cursor int64) ([]byte, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := l.start + int64(len(l.data))
	if cursor < l.start {
		cursor = l.start
	}
	if cursor > end {
		cursor = end
	}
	out := append([]byte(nil), l.data[cursor-l.start:]...)
	return out, end
}

// shellJoin quotes argv for a POSIX shell.
func shellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
			b.WriteString(a)
			continue
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}
