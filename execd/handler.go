// Package execd implements the execd API of the OpenSandbox protocol
// (commands, code contexts, files, metrics) once, over an Executor that runs
// things: wasm guests inside the hybox server, or OS processes inside a
// container (hybox-execd). It uses the standard library only, so that it can
// be compiled into a small static in-sandbox daemon.
package execd

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Options configures a Handler.
type Options struct {
	// Executor runs code and commands. Required.
	Executor Executor
	// AccessToken, when set, is required in X-EXECD-ACCESS-TOKEN.
	AccessToken string
	// Limiter bounds executions running at once; usually one per server,
	// shared by all sandboxes. nil = unbounded.
	Limiter *Limiter
	// ExecTimeout is the wall-clock limit of one code execution or
	// foreground command when the request names none (default 10 min).
	ExecTimeout time.Duration
	// MaxExecTimeout caps a timeout a request asks for (default 24 h).
	MaxExecTimeout time.Duration
	// OutputLimitBytes caps the output of one execution (default 16 MiB).
	OutputLimitBytes int64
	// LogLimitBytes caps the stored logs of one background command
	// (default 8 MiB; older output is discarded first).
	LogLimitBytes int64
	// MaxContexts caps the code contexts of one sandbox (default 32).
	MaxContexts int
	// MaxCommands caps the commands (running or finished, kept for status)
	// of one sandbox (default 1024; the oldest finished are forgotten first).
	MaxCommands int
	// KeepAlive is the ping interval on streams (default 15 s).
	KeepAlive time.Duration
	// MaxBodyBytes caps JSON request bodies (default 16 MiB).
	MaxBodyBytes int64
	// Files configures the files API.
	Files FilesOptions
	// TypeScript transpiles the cells of typescript code contexts, which
	// run in the executor's javascript interpreter; nil = no typescript
	// contexts. The binaries pass internal/typescript's (esbuild).
	TypeScript Transpiler
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks required fields.
//
// # Errors
// When Executor is nil.
func (o *Options) Validate() error {
	if o.Executor == nil {
		return errors.New("execd: Executor is required")
	}
	if o.ExecTimeout <= 0 {
		o.ExecTimeout = 10 * time.Minute
	}
	if o.MaxExecTimeout <= 0 {
		o.MaxExecTimeout = 24 * time.Hour
	}
	if o.OutputLimitBytes <= 0 {
		o.OutputLimitBytes = 16 << 20
	}
	if o.LogLimitBytes <= 0 {
		o.LogLimitBytes = 8 << 20
	}
	if o.MaxContexts <= 0 {
		o.MaxContexts = 32
	}
	if o.MaxCommands <= 0 {
		o.MaxCommands = 1024
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Handler serves the execd API of one sandbox.
type Handler struct {
	opts Options
	mux  *http.ServeMux

	codes    *codeManager
	commands *commandManager
	sessions *sessionManager
	ptys     *ptyManager

	closeOnce sync.Once
}

var _ http.Handler = (*Handler)(nil)

// New returns the execd API of one sandbox.
//
// # Errors
// When opts are invalid.
func New(opts Options) (*Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{opts: opts, mux: http.NewServeMux()}
	h.codes = newCodeManager(h)
	h.commands = newCommandManager(h)
	h.sessions = newSessionManager(h)
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	m := h.mux
	m.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.HandleFunc("POST /code/context", h.codes.create)
	m.HandleFunc("GET /code/contexts", h.codes.list)
	m.HandleFunc("DELETE /code/contexts", h.codes.deleteByLanguage)
	m.HandleFunc("GET /code/contexts/{id}", h.codes.get)
	m.HandleFunc("DELETE /code/contexts/{id}", h.codes.delete)
	m.HandleFunc("POST /code", h.codes.run)
	m.HandleFunc("DELETE /code", h.codes.interrupt)

	m.HandleFunc("POST /command", h.commands.run)
	m.HandleFunc("DELETE /command", h.commands.interrupt)
	// /command/status/{id} and /command/{id}/logs overlap as ServeMux
	// patterns; one route dispatches both.
	m.HandleFunc("GET /command/{a}/{b}", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("a") == "status":
			h.commands.status(w, r, r.PathValue("b"))
		case r.PathValue("b") == "logs":
			h.commands.logs(w, r, r.PathValue("a"))
		default:
			writeError(w, CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
		}
	})

	m.HandleFunc("POST /session", h.sessions.create)
	m.HandleFunc("POST /session/{id}/run", h.sessions.run)
	m.HandleFunc("DELETE /session/{id}", h.sessions.delete)

	m.HandleFunc("GET /metrics", h.metrics)
	m.HandleFunc("GET /metrics/watch", h.metricsWatch)

	notSupported := func(what string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			writeError(w, CodeNotSupported, what)
		}
	}
	ptys := newPTYManager(h)
	h.ptys = ptys
	m.HandleFunc("POST /pty", ptys.orElse(ptys.create, notSupported("PTY sessions are not available in this sandbox; create the sandbox with extensions {\"hybox.io/runtime\":\"runc\"} for a terminal")))
	m.HandleFunc("/pty/", ptys.orElse(ptys.route, notSupported("PTY sessions are not available in this sandbox")))

	RegisterFiles(m, h.opts.Executor.Root, h.opts.Files)
}

// ServeHTTP checks the access token and dispatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.opts.AccessToken != "" {
		got := r.Header.Get(AccessTokenHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.AccessToken)) != 1 {
			writeError(w, CodeUnauthorized, "missing or invalid X-EXECD-ACCESS-TOKEN")
			return
		}
	}
	if _, pattern := h.mux.Handler(r); pattern == "" || redirects(pattern, r.URL.Path) {
		if allow := h.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, CodeMethodNotAllowed,
				r.Method+" is not served for "+r.URL.Path+" (allowed: "+strings.Join(allow, ", ")+")")
			return
		}
		if pattern == "" {
			writeError(w, CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// redirects reports whether ServeMux answers path with a redirect to the
// subtree pattern (path "/pty", pattern "/pty/").
func redirects(pattern, path string) bool {
	if _, p, ok := strings.Cut(pattern, " "); ok {
		pattern = p
	}
	return pattern == path+"/"
}

// routeMethods are the methods execd routes serve.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed lists the methods some route serves for r's path.
func (h *Handler) allowed(r *http.Request) []string {
	var out []string
	for _, m := range routeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "" && !redirects(pattern, r.URL.Path) {
			out = append(out, m)
		}
	}
	return out
}

// Close stops every execution and command, ends every terminal and closes
// every interpreter.
func (h *Handler) Close() {
	h.closeOnce.Do(func() {
		h.commands.closeAll()
		h.sessions.closeAll()
		h.ptys.closeAll()
		h.codes.closeAll()
	})
}

// decodeJSON reads a JSON body into v, refusing bodies over the cap and
// trailing garbage.
func (h *Handler) decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, CodePayloadTooLarge, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
			return false
		}
		if errors.Is(err, io.EOF) {
			writeError(w, CodeInvalidRequestBody, "request body is empty")
			return false
		}
		writeError(w, CodeInvalidRequestBody, errdefs.DescribeJSON(err))
		return false
	}
	if dec.More() {
		writeError(w, CodeInvalidRequestBody, "invalid JSON: trailing data after the object")
		return false
	}
	if string(raw) == "null" {
		writeError(w, CodeInvalidRequestBody, "the request body must be a JSON object, not null")
		return false
	}
	if err := json.Unmarshal(raw, v); err != nil {
		writeError(w, CodeInvalidRequestBody, errdefs.DescribeJSON(err))
		return false
	}
	return true
}

// execTimeout picks the timeout of one execution: the request's (ms) capped
// by MaxExecTimeout, else the default.
func (h *Handler) execTimeout(ms int64) time.Duration {
	if ms <= 0 {
		return h.opts.ExecTimeout
	}
	d := time.Duration(ms) * time.Millisecond
	if d > h.opts.MaxExecTimeout {
		d = h.opts.MaxExecTimeout
	}
	return d
}

func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := h.opts.Executor.Metrics(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (h *Handler) metricsWatch(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		m, err := h.opts.Executor.Metrics(r.Context())
		if err != nil {
			return
		}
		b, _ := json.Marshal(m)
		if _, err := w.Write(append(b, '\n', '\n')); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// Limiter bounds the executions running at once. Callers wait up to the
// queue timeout for a slot, then fail with ErrOverloaded.
type Limiter struct {
	slots chan struct{}
	wait  time.Duration
}

// NewLimiter allows max executions at once; a caller waits at most wait.
func NewLimiter(max int, wait time.Duration) *Limiter {
	if max <= 0 {
		max = 1
	}
	return &Limiter{slots: make(chan struct{}, max), wait: wait}
}

// Acquire takes a slot; release it with the returned func.
//
// # Errors
// ErrOverloaded when no slot frees up within the wait; ctx's error when ctx ends first.
func (l *Limiter) Acquire(ctx context.Context) (func(), error) {
	if l == nil {
		return func() {}, nil
	}
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	default:
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: %d executions are running and none finished within %s; retry later", ErrOverloaded, cap(l.slots), l.wait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Limiter) release() { <-l.slots }

// InUse reports how many slots are taken.
func (l *Limiter) InUse() int {
	if l == nil {
		return 0
	}
	return len(l.slots)
}
