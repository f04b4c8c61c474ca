package tproxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/vault/tproxy"
)

// The sandbox's "original destinations" are documentation addresses
// (TEST-NET-1). They are never dialled for real: the test Dial maps each to
// a loopback server, and refuses any address it does not know.
var (
	dstHTTPS = netip.MustParseAddrPort("192.0.2.10:443")
	dstHTTP  = netip.MustParseAddrPort("192.0.2.10:80")
	dstRaw   = netip.MustParseAddrPort("192.0.2.20:25")
)

const (
	boundHost   = "api.example.test"   // has a credential binding
	unboundHost = "other.example.test" // has none
	secret      = "sekret-token-1234"
)

// env is one proxy under test with its CAs, upstream routes and counters.
type env struct {
	t       testing.TB
	ca      *tproxy.CA     // the sandbox's CA
	upCA    *tproxy.CA     // the upstream servers' CA
	roots   *x509.CertPool // upstream roots given to the proxy
	sandbox *x509.CertPool // what the sandbox trusts: ca only

	mu       sync.Mutex
	routes   map[string]string // original destination -> loopback address
	dials    []string          // addresses the proxy dialled
	injected []string          // URLs Inject saw

	dst      atomic.Pointer[netip.AddrPort] // what OriginalDst returns
	accepted atomic.Int64                   // sandbox connections accepted
	proxy    *tproxy.Proxy
	addr     string     // the proxy's listener
	served   chan error // Serve's result
}

// newEnv makes CAs and a proxy listening on loopback. The default config
// intercepts boundHost on any port and injects an Authorization header;
// edit adjusts the config before New.
func newEnv(t testing.TB, dst netip.AddrPort, edit func(*env, *tproxy.Config)) *env {
	t.Helper()
	ca, err := tproxy.NewCA("sandbox test CA")
	require.NoError(t, err)
	upCA, err := tproxy.NewCA("upstream test CA")
	require.NoError(t, err)
	e := &env{t: t, ca: ca, upCA: upCA, routes: map[string]string{}, served: make(chan error, 1)}
	e.roots = poolOf(t, upCA)
	e.sandbox = poolOf(t, ca)
	e.dst.Store(&dst)

	cfg := tproxy.Config{
		CA:          ca,
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return *e.dst.Load(), nil },
		Intercept:   func(host string, _ int) bool { return host == boundHost },
		Inject: func(req *http.Request) ([]string, error) {
			e.mu.Lock()
			e.injected = append(e.injected, req.URL.String())
			e.mu.Unlock()
			req.Header.Set("Authorization", "Bearer "+secret)
			return []string{secret}, nil
		},
		Redact: func(h http.Header, secrets []string) {
			for k, vs := range h {
				for i := range vs {
					for _, s := range secrets {
						vs[i] = strings.ReplaceAll(vs[i], s, "[REDACTED]")
					}
				}
				h[k] = vs
			}
		},
		Dial:    e.dial,
		RootCAs: e.roots,
	}
	if edit != nil {
		edit(e, &cfg)
	}
	e.proxy, err = tproxy.New(cfg)
	require.NoError(t, err)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e.addr = l.Addr().String()
	go func() { e.served <- e.proxy.Serve(countingListener{l, &e.accepted}) }()
	t.Cleanup(func() { e.proxy.Close() })
	return e
}

func poolOf(t testing.TB, ca *tproxy.CA) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(ca.CertPEM()))
	return p
}

// dial is the proxy's Dial: it records addr and connects to the loopback
// server routed for it.
func (e *env) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	e.mu.Lock()
	e.dials = append(e.dials, addr)
	real, ok := e.routes[addr]
	e.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("test dial: no route for %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, real)
}

func (e *env) route(dst netip.AddrPort, addr string) {
	e.mu.Lock()
	e.routes[dst.String()] = addr
	e.mu.Unlock()
}

func (e *env) dialed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.dials...)
}

func (e *env) injectedURLs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.injected...)
}

// tlsUpstream starts an HTTPS server with certificates from upCA for any
// server name, routed from dst.
func (e *env) tlsUpstream(dst netip.AddrPort, h http.Handler) *httptest.Server {
	e.t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hello.ServerName
			if name == "" {
				name = "127.0.0.1"
			}
			return e.upCA.Leaf(name)
		},
	}
	srv.StartTLS()
	e.t.Cleanup(srv.Close)
	e.route(dst, srv.Listener.Addr().String())
	return srv
}

// plainUpstream starts an HTTP server routed from dst.
func (e *env) plainUpstream(dst netip.AddrPort, h http.Handler) *httptest.Server {
	e.t.Helper()
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	e.route(dst, srv.Listener.Addr().String())
	return srv
}

// client returns an HTTP client of the sandbox: every connection goes to
// the proxy, and TLS trusts roots only.
func (e *env) client(roots *x509.CertPool) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", e.addr)
		},
		TLSClientConfig:    &tls.Config{RootCAs: roots},
		DisableCompression: true,
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}, tr
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// bannerServer is a server-speaks-first TCP server: it greets, then echoes
// lines until the client closes.
func bannerServer(t testing.TB) (addr string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted = new(atomic.Int64)
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Go(func() {
				defer c.Close()
				if _, err := io.WriteString(c, "220 ready\r\n"); err != nil {
					return
				}
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			})
		}
	})
	return l.Addr().String(), accepted
}

// readBody reads and closes a response body.
func readBody(t testing.TB, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// isClosed reports whether c yields EOF or an error (not a timeout) within
// d: the peer closed it.
func isClosed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func x509VerifyOptions(roots *x509.CertPool, name string) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: roots, DNSName: name}
}

// newDefaultTLSServer starts an HTTPS server with httptest's built-in
// certificate, which no test CA signed.
func newDefaultTLSServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// requireOnlyDialed checks that the proxy dialled, at least once, and only
// the original destination.
func requireOnlyDialed(t testing.TB, e *env, dst netip.AddrPort) {
	t.Helper()
	dials := e.dialed()
	require.NotEmpty(t, dials)
	for _, a := range dials {
		require.Equal(t, dst.String(), a, "the proxy dials only the original destination")
	}
}
