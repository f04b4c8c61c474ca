// Package egresstest is what the wasm guests' network tests share: a
// loopback HTTP server with a few fixed routes, and an Egress test double
// that reaches only such servers and refuses one host the way a policy
// would.
package egresstest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/policy"
)

// DeniedHost is the host every Egress refuses.
const DeniedHost = "denied.test"

// DeniedMessage is the error text of a request to DeniedHost: the text of
// the policy's own denial.
const DeniedMessage = "egress to denied.test denied by rule 0 (deny denied.test)"

// Egress is a test double of a sandbox's egress controller. It makes each
// request with an http.Client that does not follow redirects (the guest
// follows them, one Do per hop), refuses DeniedHost with a
// *policy.DeniedError, and refuses every host that is not one of its
// servers, so that no test request leaves loopback. It satisfies
// engine.Egress and runtimes.Egress (Enforce, Files and Env do nothing).
type Egress struct {
	client *http.Client
	hosts  []string // "host:port" of the servers it reaches
}

// NewEgress returns an Egress that reaches the given servers.
func NewEgress(servers ...*httptest.Server) *Egress {
	e := &Egress{client: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	for _, s := range servers {
		e.hosts = append(e.hosts, s.Listener.Addr().String())
		if c := s.Client(); c.Transport != nil {
			// A TLS server's client trusts its certificate.
			e.client.Transport = c.Transport
		}
	}
	return e
}

// Do makes req unless its host is DeniedHost or not one of the servers.
//
// # Errors
//
// A *policy.DeniedError (matching policy.ErrDenied) for DeniedHost; a
// denial naming the host for any host that is not a server; the client's
// error otherwise.
func (e *Egress) Do(req *http.Request) (*http.Response, error) {
	if req.URL.Hostname() == DeniedHost {
		return nil, &policy.DeniedError{Target: DeniedHost, Decision: policy.Decision{
			Index: 0, Rule: policy.Rule{Action: policy.Deny, Target: DeniedHost}}}
	}
	if !slices.Contains(e.hosts, req.URL.Host) {
		return nil, &policy.DeniedError{Target: req.URL.Host, Decision: policy.Decision{
			Index: -1, Rule: policy.Rule{Action: policy.Deny}}}
	}
	return e.client.Do(req)
}

// Enforce does nothing: a wasm sandbox has no network namespace.
func (*Egress) Enforce(context.Context, string) error { return nil }

// Files returns no files.
func (*Egress) Files() map[string][]byte { return nil }

// Env returns no environment.
func (*Egress) Env() map[string]string { return nil }

// Server is a loopback HTTP server for guest network tests. Its routes:
//
//	/text      "hello " and the X-Custom request header's values, joined by
//	           ", "; response header X-Reply: yes
//	/echo      the request body as application/octet-stream; response
//	           headers X-Method and X-Content-Type echo the request's
//	/json      {"got": <the JSON request body>, "ua": <User-Agent>}
//	/missing   404 "nope"
//	/redirect  302 to /text
//	/ping      "pong"
//	/hang      never answers until its request is cancelled (or 30 s)
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	lastBody []byte
	hung     chan struct{} // closed when /hang saw its request cancelled
	arrived  chan struct{} // closed when /hang got its request
}

// NewServer starts a Server, closed when t ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{hung: make(chan struct{}), arrived: make(chan struct{})}
	var arrivedOnce, hungOnce sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Reply", "yes")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "hello "+strings.Join(r.Header.Values("X-Custom"), ", "))
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.lastBody = b
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("X-Content-Type", r.Header.Get("Content-Type"))
		w.Write(b)
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		var v any
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"got": v, "ua": r.Header.Get("User-Agent")})
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusNotFound)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/text", http.StatusFound)
	})
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pong")
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		arrivedOnce.Do(func() { close(s.arrived) })
		select {
		case <-r.Context().Done():
			hungOnce.Do(func() { close(s.hung) })
		case <-time.After(30 * time.Second):
		}
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// Egress returns an Egress that reaches s.
func (s *Server) Egress() *Egress { return NewEgress(s.Server) }

// LastBody is the body of the last request to /echo.
func (s *Server) LastBody() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastBody
}

// Hung is closed once a request to /hang has been cancelled.
func (s *Server) Hung() <-chan struct{} { return s.hung }

// CancelOnArrival returns a context that is cancelled with cause once /hang
// has got its request (or after a minute), and at the latest when t ends.
func (s *Server) CancelOnArrival(t testing.TB, cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	go func() {
		select {
		case <-s.arrived:
		case <-time.After(time.Minute):
		case <-ctx.Done():
			return
		}
		cancel(cause)
	}()
	return ctx
}
