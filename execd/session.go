package execd

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// shellSession is a persistent shell: cwd, variables and functions survive
// between runs. It runs one command at a time.
type shellSession struct {
	id   string
	sess Session
	run  sync.Mutex
}

type sessionManager struct {
	h    *Handler
	mu   sync.Mutex
	byID map[string]*shellSession
}

func newSessionManager(h *Handler) *sessionManager {
	return &sessionManager{h: h, byID: map[string]*shellSession{}}
}

func (m *sessionManager) create(w http.ResponseWriter, r *http.Request) {
	var req api.SessionRequest
	if r.ContentLength != 0 {
		if !m.h.decodeJSON(w, r, &req) {
			return
		}
	}
	env := req.Envs
	if env == nil {
		env = req.Env
	}
	m.mu.Lock()
	n := len(m.byID)
	m.mu.Unlock()
	if n >= m.h.opts.MaxContexts {
		writeErr(w, fmt.Errorf("%w: this sandbox already has %d sessions; delete one first", ErrOverloaded, n))
		return
	}
	sess, err := m.h.opts.Executor.NewSession(r.Context(), req.Cwd, env)
	if err != nil {
		writeErr(w, err)
		return
	}
	s := &shellSession{id: newID(), sess: sess}
	m.mu.Lock()
	m.byID[s.id] = s
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, api.SessionCreated{SessionID: s.id, ID: s.id})
}

func (m *sessionManager) lookup(id string) (*shellSession, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	return s, ok
}

func (m *sessionManager) run(w http.ResponseWriter, r *http.Request) {
	s, ok := m.lookup(r.PathValue("id"))
	if !ok {
		writeError(w, CodeNotFound, fmt.Sprintf("session %q not found", r.PathValue("id")))
		return
	}
	var req api.SessionRunRequest
	if !m.h.decodeJSON(w, r, &req) {
		return
	}
	src := req.Command
	if src == "" {
		src = req.Code
	}
	if src == "" {
		writeError(w, CodeInvalidRequestBody, "command is required")
		return
	}
	if req.Timeout < 0 {
		writeError(w, CodeInvalidRequestBody, "timeout must not be negative")
		return
	}
	if req.Cwd != "" {
		src = inDir(req.Cwd, src)
	}
	if !s.run.TryLock() {
		writeErr(w, fmt.Errorf("%w: session %s is running another command", ErrBusy, s.id))
		return
	}
	defer s.run.Unlock()
	release, err := m.h.opts.Limiter.Acquire(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	defer release()

	timeout := m.h.execTimeout(req.Timeout)
	ctx, cancelTimeout := context.WithTimeoutCause(r.Context(), timeout, fmt.Errorf("%w after %s", ErrTimeout, timeout))
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	st := newStream(w)
	defer st.close()
	start := time.Now()
	send(st, Event{Type: EventInit, Text: newID()})
	stop := make(chan struct{})
	defer close(stop)
	go keepAlive(st, m.h.opts.KeepAlive, stop)
	emit := func(typ api.EventType, text string) { send(st, Event{Type: typ, Text: text}) }
	stdout := &lineWriter{typ: EventStdout, emit: emit}
	stderr := &lineWriter{typ: EventStderr, emit: emit}
	b := &budget{limit: m.h.opts.OutputLimitBytes}
	b.onLimit = func() { cancel(fmt.Errorf("%w: more than %d bytes", ErrOutputLimit, b.limit)) }
	code, rerr := s.sess.Run(ctx, src, b.capped(stdout), b.capped(stderr))
	stdout.Flush()
	stderr.Flush()
	if ctx.Err() != nil {
		send(st, Event{Type: EventError, Error: &ExecError{EName: "CommandExecError", EValue: strconv.Itoa(code), Traceback: []string{context.Cause(ctx).Error()}}})
		return
	}
	if rerr != nil || code != 0 {
		tb := []string{}
		if rerr != nil {
			tb = append(tb, rerr.Error())
		}
		send(st, Event{Type: EventError, Error: &ExecError{EName: "CommandExecError", EValue: strconv.Itoa(code), Traceback: tb}})
		return
	}
	send(st, Event{Type: EventExecutionComplete, ExecutionTime: time.Since(start).Milliseconds()})
}

// inDir wraps shell source src so that it runs in dir and the session's
// own directory is restored afterwards; the exit status stays src's (or 1
// when dir cannot be entered, with the shell's own message on stderr).
// Variables src sets stay set, as in any run of the session.
func inDir(dir, src string) string {
	q := "'" + strings.ReplaceAll(dir, "'", `'\''`) + "'"
	return "__hybox_pwd=$PWD\nif cd " + q + "; then\n" + src +
		"\n__hybox_rc=$?; cd \"$__hybox_pwd\"; (exit $__hybox_rc)\nelse (exit 1); fi"
}

func (m *sessionManager) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m.mu.Lock()
	s, ok := m.byID[id]
	delete(m.byID, id)
	m.mu.Unlock()
	if !ok {
		writeError(w, CodeNotFound, fmt.Sprintf("session %q not found", id))
		return
	}
	_ = s.sess.Close()
	w.WriteHeader(http.StatusOK)
}

func (m *sessionManager) closeAll() {
	m.mu.Lock()
	all := m.byID
	m.byID = map[string]*shellSession{}
	m.mu.Unlock()
	for _, s := range all {
		_ = s.sess.Close()
	}
}
