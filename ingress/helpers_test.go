package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// sbID is a sandbox id with hyphens, as all real ones have.
const (
	sbID   = "7f3a9c2e-1b4d-4e8f-9a6b-0c1d2e3f4a5b"
	sbPort = 8080
	domain = "sbx.example.test"
)

// echoReply is what the upstream's default route answers: what it saw.
type echoReply struct {
	Method  string
	Path    string
	Escaped string
	Query   string
	Host    string
	Body    string
	Header  http.Header
}

// upstream is a real HTTP server side for the sandbox port: an echo route,
// a server-sent events route that waits for the test between events, and
// a WebSocket echo route.
type upstream struct {
	release chan struct{}
	once    sync.Once
}

func newUpstream() *upstream { return &upstream{release: make(chan struct{})} }

// releaseSSE lets the SSE route send its second event.
func (u *upstream) releaseSSE() { u.once.Do(func() { close(u.release) }) }

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/sse":
		w.Header().Set("Content-Type", r.URL.Query().Get("ct"))
		fmt.Fprint(w, "data: one\n\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	case "/ws":
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(2 << 20)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo:"+r.URL.Path+":"), msg...)); err != nil {
				return
			}
		}
	default:
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Proxy-Authenticate", "Basic realm=sandbox")
		_ = json.NewEncoder(w).Encode(echoReply{
			Method: r.Method, Path: r.URL.Path, Escaped: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Host: r.Host, Body: string(body), Header: r.Header,
		})
	}
}

// targetKind builds a Target serving h one way.
type targetKind struct {
	name    string
	network bool
	make    func(t *testing.T, h http.Handler) ingress.Target
}

var targetKinds = []targetKind{
	{name: "url", network: true, make: func(t *testing.T, h http.Handler) ingress.Target {
		return ingress.Target{URL: serveTCP(t, h)}
	}},
	{name: "url+transport", network: true, make: func(t *testing.T, h http.Handler) ingress.Target {
		tr := ingress.NewTransport(nil)
		t.Cleanup(tr.CloseIdleConnections)
		return ingress.Target{URL: serveTCP(t, h), Transport: tr}
	}},
	{name: "unix", network: true, make: func(t *testing.T, h http.Handler) ingress.Target {
		sock := serveUnix(t, h)
		return ingress.Target{
			URL: &url.URL{Scheme: "http", Host: "127.0.0.1:8080"},
			Dial: func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
		}
	}},
	{name: "handler", make: func(t *testing.T, h http.Handler) ingress.Target {
		return ingress.Target{Handler: h}
	}},
}

func serveTCP(t *testing.T, h http.Handler) *url.URL {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// serveUnix serves h on a unix socket and returns its path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		s.Close()
	})
	return sock
}

// gateway is a Router on a loopback server with one known sandbox port.
type gateway struct {
	srv      *httptest.Server
	mu       sync.Mutex
	resolved int // Resolve calls
}

// newGateway serves a Router whose resolver knows sbID:sbPort as target.
// authorize nil allows everything.
func newGateway(t *testing.T, target ingress.Target, authorize func(*http.Request, string, int) error) *gateway {
	t.Helper()
	g := &gateway{}
	if authorize == nil {
		authorize = func(*http.Request, string, int) error { return nil }
	}
	rt, err := ingress.NewRouter(ingress.Options{
		Domain: domain,
		Resolver: ingress.ResolverFunc(func(ctx context.Context, id string, port int) (ingress.Target, error) {
			g.mu.Lock()
			g.resolved++
			g.mu.Unlock()
			switch {
			case id == "paused-sandbox":
				return ingress.Target{}, fmt.Errorf("%w: sandbox %s is paused", ingress.ErrUnavailable, id)
			case id == "broken-sandbox":
				return ingress.Target{}, errors.New("containerd at /run/secret.sock: boom")
			case id != sbID:
				return ingress.Target{}, fmt.Errorf("%w: no sandbox %s", ingress.ErrNoRoute, id)
			case port != sbPort:
				return ingress.Target{}, fmt.Errorf("%w: sandbox %s serves nothing on port %d", ingress.ErrNoRoute, id, port)
			}
			return target, nil
		}),
		Authorize:    authorize,
		StripHeaders: []string{"OPEN-SANDBOX-API-KEY"},
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	g.srv = httptest.NewServer(rt)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) resolveCalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resolved
}

// do sends a request to the gateway; host, when set, replaces the Host
// header; headers are added in pairs.
func (g *gateway) do(t *testing.T, method, path, host, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = stringsReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func stringsReader(s string) io.Reader { return &stringReader{s: s} }

// stringReader hides its length so requests are sent chunked, as streams
// would be.
type stringReader struct{ s string }

func (r *stringReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}

// errBody decodes a {"code","message"} body.
func errBody(t *testing.T, b []byte) (code api.ErrorCode, msg string) {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", b, err)
	}
	if e.Code == "" || e.Message == "" {
		t.Fatalf("error body %q lacks code or message", b)
	}
	return e.Code, e.Message
}

func decodeEcho(t *testing.T, b []byte) echoReply {
	t.Helper()
	var e echoReply
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("upstream reply %q: %v", b, err)
	}
	return e
}
