package apitest

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// MaxBody is how much of each response body a Recorder keeps; a longer
// body is marked Truncated and only its status and content type (and the
// complete events of a stream) are checked.
const MaxBody = 4 << 20

// Exchange is one request and the response the handler wrote.
type Exchange struct {
	Method      string
	Path        string // the request's escaped path
	Host        string
	IngressTo   string // the OpenSandbox-Ingress-To header
	Status      int    // 101 for a hijacked (upgraded) connection
	ContentType string
	Location    string // the Location header of a redirect
	Body        []byte
	Truncated   bool // the body was longer than MaxBody
	Interrupted bool // a write failed: the client went away mid-body
}

// Recorder is an http.Handler that serves through another handler and
// records every exchange. It is safe for concurrent use.
type Recorder struct {
	h  http.Handler
	mu sync.Mutex
	ex []*Exchange
}

// Record wraps h.
func Record(h http.Handler) *Recorder { return &Recorder{h: h} }

// ServeHTTP serves r through the wrapped handler and records the exchange
// when the handler returns.
func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &Exchange{Method: r.Method, Path: r.URL.EscapedPath(), Host: r.Host,
		IngressTo: r.Header.Get("OpenSandbox-Ingress-To")}
	rw := &recWriter{w: w, ex: ex}
	defer func() {
		if ex.Status == 0 {
			ex.Status = http.StatusOK
		}
		rec.mu.Lock()
		rec.ex = append(rec.ex, ex)
		rec.mu.Unlock()
	}()
	rec.h.ServeHTTP(rw, r)
}

// Exchanges returns the exchanges recorded so far, in the order their
// handlers returned.
func (rec *Recorder) Exchanges() []*Exchange {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]*Exchange(nil), rec.ex...)
}

// recWriter copies what the handler writes into an Exchange.
type recWriter struct {
	w     http.ResponseWriter
	ex    *Exchange
	wrote bool // some body was written
}

func (rw *recWriter) Header() http.Header { return rw.w.Header() }

func (rw *recWriter) WriteHeader(code int) {
	if rw.ex.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		rw.ex.Status = code
		rw.ex.ContentType = rw.w.Header().Get("Content-Type")
		rw.ex.Location = rw.w.Header().Get("Location")
	}
	rw.w.WriteHeader(code)
}

func (rw *recWriter) Write(b []byte) (int, error) {
	if rw.ex.Status == 0 {
		rw.ex.Status = http.StatusOK
		rw.ex.ContentType = rw.w.Header().Get("Content-Type")
	}
	if !rw.wrote && len(b) > 0 {
		rw.wrote = true
		if _, set := rw.w.Header()["Content-Type"]; !set && rw.ex.ContentType == "" {
			// net/http sniffs the first write when no type is set.
			rw.ex.ContentType = http.DetectContentType(b)
		}
	}
	n, err := rw.w.Write(b)
	if err != nil && !errors.Is(err, http.ErrBodyNotAllowed) {
		rw.ex.Interrupted = true
	}
	// What the client got.
	if room := MaxBody - len(rw.ex.Body); room < n {
		rw.ex.Body = append(rw.ex.Body, b[:max(room, 0)]...)
		rw.ex.Truncated = true
	} else {
		rw.ex.Body = append(rw.ex.Body, b[:n]...)
	}
	return n, err
}

// Flush flushes the underlying writer (event streams).
func (rw *recWriter) Flush() {
	if f, ok := rw.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands the connection over (WebSocket upgrades); the exchange is
// recorded as 101.
func (rw *recWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := rw.w.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("apitest: the underlying writer cannot hijack")
	}
	c, brw, err := hj.Hijack()
	if err == nil && rw.ex.Status == 0 {
		rw.ex.Status = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rw *recWriter) Unwrap() http.ResponseWriter { return rw.w }

// Check wraps h so that every response it writes during the test is
// validated against spec when the test ends (t.Cleanup): each mismatch
// fails the test with the operation, status, JSON pointer and message.
// Register it before the cleanup that stops the server, so that it runs
// after every handler has returned.
func Check(t testing.TB, spec *Spec, h http.Handler) http.Handler {
	t.Helper()
	rec := Record(h)
	t.Cleanup(func() {
		var msgs []string
		for _, ex := range rec.Exchanges() {
			for _, m := range spec.Validate(ex) {
				msgs = append(msgs, m.String())
			}
		}
		if len(msgs) > 0 {
			t.Errorf("%d responses do not match the OpenAPI document:\n%s", len(msgs), strings.Join(msgs, "\n"))
		}
	})
	return rec
}
