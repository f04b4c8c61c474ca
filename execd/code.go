package execd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// newID returns a random identifier (UUID v4 form).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// normalizeLanguage maps the names clients use to a canonical language.
func normalizeLanguage(l string) string {
	switch strings.ToLower(strings.TrimSpace(l)) {
	case "python", "python3", "py":
		return "python"
	case "javascript", "js", "node", "nodejs":
		return "javascript"
	case "typescript", "ts":
		return "typescript"
	case "java", "jshell":
		return "java"
	case "go", "golang":
		return "go"
	case "bash", "sh", "shell", "command":
		return "bash"
	default:
		return strings.ToLower(strings.TrimSpace(l))
	}
}

// codeContext is one persistent interpreter and its bookkeeping.
type codeContext struct {
	id       string
	language string
	cwd      string

	run    sync.Mutex // held for the duration of one execution
	mu     sync.Mutex // guards the fields below
	interp Interpreter
	count  int
	execID string
	cancel context.CancelCauseFunc
	closed bool
}

type codeManager struct {
	h        *Handler
	mu       sync.Mutex
	contexts map[string]*codeContext
	defaults map[string]string // language → context id
}

func newCodeManager(h *Handler) *codeManager {
	return &codeManager{h: h, contexts: map[string]*codeContext{}, defaults: map[string]string{}}
}

func (c *codeContext) json() api.CodeContext {
	return api.CodeContext{ID: c.id, Language: c.language, Cwd: c.cwd}
}

// supports reports whether the backend runs language (bash always;
// typescript where javascript runs and a transpiler is set).
func (m *codeManager) supports(language string) bool {
	switch {
	case language == "bash":
		return true
	case language == "typescript" && m.h.opts.TypeScript == nil:
		return false
	}
	for _, l := range m.h.opts.Executor.Languages() {
		if l == engine(language) {
			return true
		}
	}
	return false
}

// languages lists the languages contexts can have in this sandbox.
func (m *codeManager) languages() []string {
	langs := append([]string{}, m.h.opts.Executor.Languages()...)
	if m.supports("typescript") {
		langs = append(langs, "typescript")
	}
	return append(langs, "bash")
}

// LanguageHinter is an Executor that can say where a language it lacks is
// available (the wasm tier names the container tier for java and go).
type LanguageHinter interface {
	// LanguageHint explains where language runs ("" = no hint).
	LanguageHint(language string) string
}

func (m *codeManager) unknownLanguage(raw string) error {
	hint := ""
	if h, ok := m.h.opts.Executor.(LanguageHinter); ok {
		if s := h.LanguageHint(normalizeLanguage(raw)); s != "" {
			hint = "; " + s
		}
	}
	return fmt.Errorf("%w: %q is not available in this sandbox (available: %s)%s", ErrUnknownLanguage, raw, strings.Join(m.languages(), ", "), hint)
}

// newContext creates a context; its interpreter (for bash a shell
// session) is started at once.
func (m *codeManager) newContext(ctx context.Context, rawLang, cwd string) (*codeContext, error) {
	lang := normalizeLanguage(rawLang)
	if lang == "" {
		return nil, fmt.Errorf("%w: language is required", ErrUnknownLanguage)
	}
	if !m.supports(lang) {
		return nil, m.unknownLanguage(rawLang)
	}
	m.mu.Lock()
	n := len(m.contexts)
	m.mu.Unlock()
	if n >= m.h.opts.MaxContexts {
		return nil, fmt.Errorf("%w: this sandbox already has %d code contexts; delete one first", ErrOverloaded, n)
	}
	c := &codeContext{id: newID(), language: lang, cwd: cwd}
	it, err := m.newInterpreter(ctx, lang, cwd)
	if err != nil {
		return nil, err
	}
	c.interp = it
	m.mu.Lock()
	m.contexts[c.id] = c
	m.mu.Unlock()
	return c, nil
}

func (m *codeManager) create(w http.ResponseWriter, r *http.Request) {
	var req api.CodeContextRequest
	if !m.h.decodeJSON(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Language) == "" {
		writeError(w, CodeInvalidRequestBody, "language is required")
		return
	}
	c, err := m.newContext(r.Context(), req.Language, req.Cwd)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c.json())
}

func (m *codeManager) list(w http.ResponseWriter, r *http.Request) {
	lang := normalizeLanguage(r.URL.Query().Get("language"))
	m.mu.Lock()
	out := []api.CodeContext{}
	for _, c := range m.contexts {
		if lang == "" || c.language == lang {
			out = append(out, c.json())
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, http.StatusOK, out)
}

func (m *codeManager) lookup(id string) (*codeContext, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.contexts[id]
	return c, ok
}

func (m *codeManager) get(w http.ResponseWriter, r *http.Request) {
	c, ok := m.lookup(r.PathValue("id"))
	if !ok {
		writeError(w, CodeContextNotFound, fmt.Sprintf("code context %q not found", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, c.json())
}

// remove forgets a context and closes its interpreter (interrupting a run).
func (m *codeManager) remove(c *codeContext) {
	m.mu.Lock()
	delete(m.contexts, c.id)
	for l, id := range m.defaults {
		if id == c.id {
			delete(m.defaults, l)
		}
	}
	m.mu.Unlock()
	c.mu.Lock()
	c.closed = true
	if c.cancel != nil {
		c.cancel(ErrInterrupted)
	}
	it := c.interp
	c.interp = nil
	c.mu.Unlock()
	if it != nil {
		_ = it.Close()
	}
}

func (m *codeManager) delete(w http.ResponseWriter, r *http.Request) {
	c, ok := m.lookup(r.PathValue("id"))
	if !ok {
		writeError(w, CodeContextNotFound, fmt.Sprintf("code context %q not found", r.PathValue("id")))
		return
	}
	m.remove(c)
	w.WriteHeader(http.StatusOK)
}

func (m *codeManager) deleteByLanguage(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("language")
	if raw == "" {
		writeError(w, CodeMissingQuery, "query parameter language is required")
		return
	}
	lang := normalizeLanguage(raw)
	m.mu.Lock()
	var victims []*codeContext
	for _, c := range m.contexts {
		if c.language == lang {
			victims = append(victims, c)
		}
	}
	m.mu.Unlock()
	for _, c := range victims {
		m.remove(c)
	}
	w.WriteHeader(http.StatusOK)
}

func (m *codeManager) closeAll() {
	m.mu.Lock()
	var all []*codeContext
	for _, c := range m.contexts {
		all = append(all, c)
	}
	m.mu.Unlock()
	for _, c := range all {
		m.remove(c)
	}
}

// defaultContext returns the default context of a language, creating it.
func (m *codeManager) defaultContext(ctx context.Context, rawLang string) (*codeContext, error) {
	lang := normalizeLanguage(rawLang)
	m.mu.Lock()
	if id, ok := m.defaults[lang]; ok {
		if c, ok := m.contexts[id]; ok {
			m.mu.Unlock()
			return c, nil
		}
	}
	m.mu.Unlock()
	c, err := m.newContext(ctx, rawLang, "")
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, ok := m.defaults[lang]; ok { // lost a race: keep the first
		if other, ok := m.contexts[id]; ok {
			delete(m.contexts, c.id)
			if c.interp != nil {
				go c.interp.Close()
			}
			return other, nil
		}
	}
	m.defaults[lang] = c.id
	return c, nil
}

func (m *codeManager) run(w http.ResponseWriter, r *http.Request) {
	var req api.CodeRunRequest
	if !m.h.decodeJSON(w, r, &req) {
		return
	}
	s := newStream(w)
	defer s.close()
	if err := m.h.RunCode(r.Context(), req, s); err != nil {
		writeErr(w, err)
	}
}

// RunCode runs req as POST /code does, sending the execution's events to
// s: in the context req names, else in the default context of its language
// (python when none is named). It returns when the execution has ended.
// Cancelling ctx interrupts the execution.
//
// # Errors
// Before any event is sent: INVALID_REQUEST_BODY (no code),
// CONTEXT_NOT_FOUND, UNKNOWN_LANGUAGE, CONTEXT_BUSY (the context runs
// another execution), TOO_MANY_EXECUTIONS, or the backend's failure to
// start an interpreter. Once events flow, a failure is an error event.
func (h *Handler) RunCode(ctx context.Context, req api.CodeRunRequest, s Sink) error {
	m := h.codes
	if req.Code == nil {
		return errdefs.New(CodeInvalidRequestBody, "code is required")
	}
	if req.TimeoutMs < 0 || req.Timeout < 0 {
		return errdefs.New(CodeInvalidRequestBody, "timeoutMs and timeout must not be negative")
	}
	var c *codeContext
	var err error
	lang, id := req.Language, req.Context.ID
	if req.Context.Language != "" {
		lang = req.Context.Language
	}
	switch {
	case id != "":
		var ok bool
		if c, ok = m.lookup(id); !ok {
			return errdefs.New(CodeContextNotFound, "code context %q not found", id)
		}
	case lang == "":
		lang = "python"
		fallthrough
	default:
		if c, err = m.defaultContext(ctx, lang); err != nil {
			return err
		}
	}
	timeout := req.TimeoutMs
	if timeout == 0 {
		timeout = req.Timeout
	}
	return m.execute(ctx, c, *req.Code, h.execTimeout(timeout), s)
}

// execute runs code in c and sends the events to s. A context runs one
// execution at a time: a second gets 409 CONTEXT_BUSY.
func (m *codeManager) execute(ctx context.Context, c *codeContext, code string, timeout time.Duration, s Sink) error {
	if !c.run.TryLock() {
		return fmt.Errorf("%w: code context %s is running another execution; wait for it or interrupt it with DELETE /code?id=%s", ErrBusy, c.id, c.id)
	}
	defer c.run.Unlock()
	release, err := m.h.opts.Limiter.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()

	execID := newID()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errdefs.New(CodeContextNotFound, "code context was deleted")
	}
	it := c.interp
	if it == nil {
		// The previous interpreter was lost (timeout, crash): start afresh.
		c.mu.Unlock()
		// Starting an interpreter is not part of the execution's time
		// budget: only the client going away cancels it.
		it, err = m.newInterpreter(ctx, c.language, c.cwd)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.interp = it
	}
	// The time budget starts once the interpreter is ready.
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w after %s", ErrTimeout, timeout))
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.count++
	count := c.count
	c.execID = execID
	c.cancel = cancel
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.execID, c.cancel = "", nil
		c.mu.Unlock()
	}()

	start := time.Now()
	send(s, Event{Type: EventInit, Text: execID})
	send(s, Event{Type: EventExecutionCount, ExecutionCount: count})
	stop := make(chan struct{})
	defer close(stop)
	go keepAlive(s, m.h.opts.KeepAlive, stop)

	b := &budget{limit: m.h.opts.OutputLimitBytes}
	out := &streamOutput{s: s, count: count, budget: b}
	b.onLimit = func() { cancel(fmt.Errorf("%w: more than %d bytes", ErrOutputLimit, b.limit)) }

	execErr, err := it.Run(ctx, code, out)
	if err == nil && b.exceeded() {
		err = context.Cause(ctx)
	}
	if err != nil {
		if errors.Is(err, ErrContextLost) {
			c.mu.Lock()
			if c.interp == it {
				c.interp = nil
			}
			c.mu.Unlock()
			_ = it.Close()
		}
		send(s, Event{Type: EventError, ExecutionCount: count, Error: failure(err)})
		return nil
	}
	if execErr != nil {
		send(s, Event{Type: EventError, ExecutionCount: count, Error: execErr})
		return nil
	}
	send(s, Event{Type: EventExecutionComplete, ExecutionCount: count, ExecutionTime: time.Since(start).Milliseconds()})
	return nil
}

// failure turns a system error of an execution into the error event body.
func failure(err error) *ExecError {
	name := "RuntimeError"
	switch {
	case errors.Is(err, ErrTimeout):
		name = "TimeoutError"
	case errors.Is(err, ErrInterrupted):
		name = "KeyboardInterrupt"
	case errors.Is(err, ErrOutputLimit):
		name = "OutputLimitExceeded"
	case errors.Is(err, ErrOverloaded):
		name = "Overloaded"
	}
	msg := err.Error()
	if errors.Is(err, ErrContextLost) {
		msg += " (the context was restarted: variables defined before are gone)"
	}
	return &ExecError{EName: name, EValue: msg, Traceback: []string{name + ": " + msg}}
}

// streamOutput adapts an execution's output to stream events.
type streamOutput struct {
	s      Sink
	count  int
	budget *budget
}

func (o *streamOutput) write(typ api.EventType, p []byte) {
	o.budget.capped(writerFunc(func(b []byte) (int, error) {
		send(o.s, Event{Type: typ, Text: string(b)})
		return len(b), nil
	})).Write(p)
}

func (o *streamOutput) Stdout(p []byte) { o.write(EventStdout, p) }
func (o *streamOutput) Stderr(p []byte) { o.write(EventStderr, p) }
func (o *streamOutput) Result(bundle map[string]string) {
	res := make(map[string]string, len(bundle))
	for k, v := range bundle {
		if k == "text/plain" {
			k = "text"
		}
		res[k] = v
	}
	send(o.s, Event{Type: EventResult, ExecutionCount: o.count, Results: res})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (m *codeManager) interrupt(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, CodeMissingQuery, "query parameter id is required")
		return
	}
	m.mu.Lock()
	var target *codeContext
	for _, c := range m.contexts {
		c.mu.Lock()
		if c.id == id || c.execID == id {
			target = c
		}
		c.mu.Unlock()
	}
	m.mu.Unlock()
	if target == nil {
		writeError(w, CodeContextNotFound, fmt.Sprintf("no code context or execution %q", id))
		return
	}
	target.mu.Lock()
	if target.cancel != nil {
		target.cancel(fmt.Errorf("%w by a client request", ErrInterrupted))
	}
	target.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}
