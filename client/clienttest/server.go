// Package clienttest provides an in-memory stand-in of a hybox server for
// tests of API clients (the client package and the CLI): an httptest server
// that answers the lifecycle API under /v1 and the execd API of every
// sandbox behind the endpoint it returns, with scripted command and code
// behaviour. It is a protocol fixture, not an implementation: sandboxes run
// nothing.
//
// Scripted commands: "echo ARGS" prints ARGS; "exit N" prints "bye" and
// fails with exit code N; "fail" fails with a TimeoutError; "hang" blocks
// until the request ends; "env" prints cwd, timeout and envs; anything else
// prints "ran: COMMAND". Scripted code: code containing "raise" prints
// "before" and fails with a ValueError and a traceback; other code prints
// "out: CODE" and returns the result "42".
package clienttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hybox-dev/hybox/client"
)

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte // not recorded for uploads
}

// Server is a fake hybox server. Its exported fields may be set before
// the first request; its methods are safe for concurrent use.
type Server struct {
	// URL is the server's domain, such as http://127.0.0.1:PORT.
	URL string
	// APIKey is required in OPEN-SANDBOX-API-KEY when not empty.
	APIKey string
	// ExecdToken is returned in the endpoint headers and required by execd.
	ExecdToken string

	srv          *httptest.Server
	mu           sync.Mutex
	dataPrefix   bool
	pendingPolls int
	sandboxes    map[string]*sandbox
	files        map[string][]byte
	requests     []Request
	nextCmd      int
	creates      []client.CreateSandboxRequest
}

type sandbox struct {
	sb    client.Sandbox
	polls int
}

// NewServer starts a fake server that tb closes at its end.
func NewServer(tb testing.TB) *Server {
	s := &Server{
		APIKey:     "test-key",
		ExecdToken: "execd-token",
		sandboxes:  map[string]*sandbox{},
		files:      map[string][]byte{},
	}
	s.srv = httptest.NewServer(s.handler())
	s.URL = s.srv.URL
	tb.Cleanup(s.srv.Close)
	return s
}

// SetDataPrefix makes streams use SSE "data: " framing (or not).
func (s *Server) SetDataPrefix(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dataPrefix = on
}

// SetPendingPolls sets how many GETs a new sandbox answers as Pending
// before it is Running (0: it is Running at once).
func (s *Server) SetPendingPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingPolls = n
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// LastRequest returns the last request whose path ends with suffix and
// whether there was one.
func (s *Server) LastRequest(method, suffix string) (Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.requests) - 1; i >= 0; i-- {
		r := s.requests[i]
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			return r, true
		}
	}
	return Request{}, false
}

// Creates returns the bodies of the create requests received.
func (s *Server) Creates() []client.CreateSandboxRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]client.CreateSandboxRequest(nil), s.creates...)
}

// File returns a file written into any sandbox (files are shared).
func (s *Server) File(p string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[p]
	return b, ok
}

// PutFile stores a file.
func (s *Server) PutFile(p string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[p] = b
}

// AddSandbox stores a sandbox as it is and returns its id (a new one when
// sb.ID is empty).
func (s *Server) AddSandbox(sb client.Sandbox) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.ID == "" {
		sb.ID = uuid.NewString()
	}
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = time.Now().UTC()
	}
	s.sandboxes[sb.ID] = &sandbox{sb: sb, polls: s.pendingPolls}
	return sb.ID
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func (s *Server) handler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"status": "healthy"})
	})
	m.HandleFunc("POST /v1/sandboxes", s.create)
	m.HandleFunc("GET /v1/sandboxes", s.list)
	m.HandleFunc("GET /v1/sandboxes/{id}", s.get)
	m.HandleFunc("DELETE /v1/sandboxes/{id}", s.delete)
	m.HandleFunc("PATCH /v1/sandboxes/{id}/metadata", s.patchMetadata)
	m.HandleFunc("POST /v1/sandboxes/{id}/pause", s.setState(client.StatePaused))
	m.HandleFunc("POST /v1/sandboxes/{id}/resume", s.setState(client.StateRunning))
	m.HandleFunc("POST /v1/sandboxes/{id}/renew-expiration", s.renew)
	m.HandleFunc("GET /v1/sandboxes/{id}/endpoints/{port}", s.endpoint)
	m.HandleFunc("POST /v1/run", s.oneShot)
	m.Handle("/v1/sandboxes/{id}/proxy/44772/", http.HandlerFunc(s.execd))

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") && r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
		}
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		w.Header().Set("X-Request-ID", "req-1")
		if r.URL.Path != "/health" && s.APIKey != "" {
			got := r.Header.Get(client.APIKeyHeader)
			if got == "" {
				writeError(w, 401, "MISSING_API_KEY", "missing API key")
				return
			}
			if got != s.APIKey {
				writeError(w, 401, "INVALID_API_KEY", "invalid API key")
				return
			}
		}
		m.ServeHTTP(w, r)
	})
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*sandbox, bool) {
	sb, ok := s.sandboxes[r.PathValue("id")]
	if !ok {
		writeError(w, 404, "SANDBOX_NOT_FOUND", "sandbox "+r.PathValue("id")+" not found")
	}
	return sb, ok
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req client.CreateSandboxRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	if req.Timeout != nil && *req.Timeout < 60 {
		writeError(w, 400, "INVALID_PARAMETER", "timeout must be at least 60 seconds")
		return
	}
	if req.Image != nil && req.Image.URI == "bad" {
		writeError(w, 400, "INVALID_IMAGE", "image bad cannot be pulled")
		return
	}
	now := time.Now().UTC().Truncate(time.Second)
	sb := client.Sandbox{
		ID: uuid.NewString(), Image: req.Image, Metadata: req.Metadata, Entrypoint: req.Entrypoint,
		Status: client.Status{State: client.StatePending}, CreatedAt: now,
	}
	if req.Timeout != nil {
		exp := now.Add(time.Duration(*req.Timeout) * time.Second)
		sb.ExpiresAt = &exp
	}
	s.mu.Lock()
	s.creates = append(s.creates, req)
	s.sandboxes[sb.ID] = &sandbox{sb: sb, polls: s.pendingPolls}
	if s.pendingPolls == 0 {
		s.sandboxes[sb.ID].sb.Status.State = client.StateRunning
	}
	out := s.sandboxes[sb.ID].sb
	s.mu.Unlock()
	writeJSON(w, 202, out)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	states := q["state"]
	meta, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, 400, "INVALID_PARAMETER", "bad metadata filter")
		return
	}
	page, size := 1, 20
	if v := q.Get("page"); v != "" {
		page, _ = strconv.Atoi(v)
	}
	if v := q.Get("pageSize"); v != "" {
		size, _ = strconv.Atoi(v)
	}
	if page < 1 || size < 1 {
		writeError(w, 400, "INVALID_PARAMETER", "page and pageSize must be positive")
		return
	}
	s.mu.Lock()
	var all []client.Sandbox
	for _, sb := range s.sandboxes {
		if len(states) > 0 && !contains(states, sb.sb.Status.State) {
			continue
		}
		match := true
		for k := range meta {
			if sb.sb.Metadata[k] != meta.Get(k) {
				match = false
			}
		}
		if match {
			all = append(all, sb.sb)
		}
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.Before(all[j].CreatedAt)
		}
		return all[i].ID < all[j].ID
	})
	total := len(all)
	start := min((page-1)*size, total)
	end := min(start+size, total)
	pages := (total + size - 1) / size
	writeJSON(w, 200, map[string]any{
		"items": append([]client.Sandbox{}, all[start:end]...),
		"pagination": client.Pagination{
			Page: page, PageSize: size, TotalItems: total, TotalPages: pages, HasNextPage: page < pages,
		},
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb, ok := s.lookup(w, r)
	if !ok {
		s.mu.Unlock()
		return
	}
	if sb.sb.Status.State == client.StatePending {
		if sb.polls <= 0 {
			sb.sb.Status.State = client.StateRunning
		}
		sb.polls--
	}
	out := struct {
		client.Sandbox
		Runtime string `json:"runtime"` // an extra field, to check it survives in Raw
	}{sb.sb, "wasm"}
	s.mu.Unlock()
	writeJSON(w, 200, out)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lookup(w, r); ok {
		delete(s.sandboxes, r.PathValue("id"))
		w.WriteHeader(204)
	}
}

func (s *Server) patchMetadata(w http.ResponseWriter, r *http.Request) {
	var patch map[string]*string
	if err := json.NewDecoder(r.Body).Decode(&patch); err != nil {
		writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.lookup(w, r)
	if !ok {
		return
	}
	if sb.sb.Metadata == nil {
		sb.sb.Metadata = map[string]string{}
	}
	for k, v := range patch {
		if v == nil {
			delete(sb.sb.Metadata, k)
		} else {
			sb.sb.Metadata[k] = *v
		}
	}
	writeJSON(w, 200, sb.sb)
}

func (s *Server) setState(state string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sb, ok := s.lookup(w, r); ok {
			sb.sb.Status.State = state
			w.WriteHeader(202)
		}
	}
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	if !body.ExpiresAt.After(time.Now()) {
		writeError(w, 400, "INVALID_EXPIRATION", "expiresAt must be in the future")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.lookup(w, r); ok {
		t := body.ExpiresAt.UTC()
		sb.sb.ExpiresAt = &t
		writeJSON(w, 200, map[string]time.Time{"expiresAt": t})
	}
}

func (s *Server) endpoint(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	_, ok := s.lookup(w, r)
	s.mu.Unlock()
	if !ok {
		return
	}
	if r.PathValue("port") != "44772" {
		writeError(w, 400, "INVALID_PORT", "only port 44772 is served")
		return
	}
	id := r.PathValue("id")
	host := strings.TrimPrefix(s.URL, "http://")
	writeJSON(w, 200, client.Endpoint{
		Endpoint: host + "/v1/sandboxes/" + id + "/proxy/44772",
		Headers:  map[string]string{"OpenSandbox-Ingress-To": id + "-44772", client.ExecdTokenHeader: s.ExecdToken},
	})
}

// streamWriter writes events of one execution.
type streamWriter struct {
	w      http.ResponseWriter
	prefix bool
}

func (s *Server) newStream(w http.ResponseWriter) *streamWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	s.mu.Lock()
	defer s.mu.Unlock()
	return &streamWriter{w: w, prefix: s.dataPrefix}
}

func (sw *streamWriter) send(ev client.Event) {
	ev.Timestamp = time.Now().UnixMilli()
	b, _ := json.Marshal(ev)
	if sw.prefix {
		fmt.Fprintf(sw.w, "data: %s\n\n", b)
	} else {
		fmt.Fprintf(sw.w, "%s\n\n", b)
	}
	_ = http.NewResponseController(sw.w).Flush()
}

func (s *Server) oneShot(w http.ResponseWriter, r *http.Request) {
	var req client.RunRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	if req.Language != "python" && req.Language != "javascript" {
		writeError(w, 400, "UNKNOWN_LANGUAGE", "unknown language "+req.Language)
		return
	}
	s.runCode(s.newStream(w), req.Code)
}

func (s *Server) runCode(sw *streamWriter, code string) {
	sw.send(client.Event{Type: client.EventInit, Text: uuid.NewString()})
	sw.send(client.Event{Type: client.EventExecutionCount, ExecutionCount: 1})
	if strings.Contains(code, "raise") {
		sw.send(client.Event{Type: client.EventStdout, Text: "before\n"})
		sw.send(client.Event{Type: client.EventError, Error: &client.ExecError{
			EName: "ValueError", EValue: "boom",
			Traceback: []string{"Traceback (most recent call last):", "ValueError: boom"},
		}})
		return
	}
	sw.send(client.Event{Type: client.EventStdout, Text: "out: " + code + "\n"})
	sw.send(client.Event{Type: client.EventResult, ExecutionCount: 1, Results: map[string]any{"text": "42"}})
	sw.send(client.Event{Type: client.EventExecutionComplete, ExecutionTime: 3})
}
