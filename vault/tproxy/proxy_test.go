package tproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/vault/tproxy"
)

// seen is what an upstream handler observed of one request.
type seen struct {
	auth, host, sni, uri, custom, xff, remote string
}

// recorder is an upstream handler that records requests and answers "ok".
type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := seen{
		auth:   r.Header.Get("Authorization"),
		host:   r.Host,
		uri:    r.RequestURI,
		custom: r.Header.Get("X-Custom"),
		xff:    r.Header.Get("X-Forwarded-For"),
		remote: r.RemoteAddr,
	}
	if r.TLS != nil {
		s.sni = r.TLS.ServerName
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, s)
	rec.mu.Unlock()
	w.Header().Set("X-Echo-Auth", s.auth)
	w.Header().Set("X-Other", "fine")
	io.WriteString(w, "ok")
}

func (rec *recorder) all() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.reqs...)
}

func TestInterceptHTTPS(t *testing.T) {
	e := newEnv(t, dstHTTPS, nil)
	rec := &recorder{}
	e.tlsUpstream(dstHTTPS, rec)
	c, _ := e.client(e.sandbox)

	req, err := http.NewRequest(http.MethodGet, "https://"+boundHost+"/v1/items?q=a%20b", nil)
	require.NoError(t, err)
	req.Header.Set("X-Custom", "kept")
	res, err := c.Do(req)
	require.NoError(t, err)
	assert.Equal(t, "ok", readBody(t, res))
	require.Equal(t, http.StatusOK, res.StatusCode)

	// The upstream got the injected credential, over TLS for the bound
	// name, with the sandbox's own headers intact and nothing added.
	got := rec.all()
	require.Len(t, got, 1)
	assert.Equal(t, "Bearer "+secret, got[0].auth)
	assert.Equal(t, boundHost, got[0].host)
	assert.Equal(t, boundHost, got[0].sni)
	assert.Equal(t, "/v1/items?q=a%20b", got[0].uri)
	assert.Equal(t, "kept", got[0].custom)
	assert.Empty(t, got[0].xff)
	assert.Equal(t, []string{"https://" + boundHost + ":443/v1/items?q=a%20b"}, e.injectedURLs())
	requireOnlyDialed(t, e, dstHTTPS)

	// The sandbox saw a leaf of its own CA, not the upstream's.
	require.NotNil(t, res.TLS)
	leaf := res.TLS.PeerCertificates[0]
	_, err = leaf.Verify(x509VerifyOptions(e.sandbox, boundHost))
	require.NoError(t, err)
	_, err = leaf.Verify(x509VerifyOptions(e.roots, boundHost))
	require.Error(t, err, "the leaf must not chain to the upstream CA")

	// ALPN: h2 for a client that offers it, HTTP/1.1 for one that does not.
	for _, c := range []struct{ offer, want []string }{
		{[]string{"h2", "http/1.1"}, []string{"h2"}},
		{[]string{"http/1.1"}, []string{"http/1.1"}},
		{nil, []string{""}},
	} {
		tc, err := tls.Dial("tcp", e.addr, &tls.Config{ServerName: boundHost, RootCAs: e.sandbox, NextProtos: c.offer})
		require.NoError(t, err)
		assert.Equal(t, c.want[0], tc.ConnectionState().NegotiatedProtocol, "offer %v", c.offer)
		tc.Close()
	}

	// The secret echoed in a response header was redacted.
	assert.Equal(t, "Bearer [REDACTED]", res.Header.Get("X-Echo-Auth"))
	assert.Equal(t, "fine", res.Header.Get("X-Other"))
}

func TestSpliceUnboundTLS(t *testing.T) {
	injected := atomic.Int64{}
	e := newEnv(t, dstHTTPS, func(_ *env, cfg *tproxy.Config) {
		cfg.Inject = func(*http.Request) ([]string, error) { injected.Add(1); return nil, nil }
	})
	rec := &recorder{}
	e.tlsUpstream(dstHTTPS, rec)
	// The sandbox trusts only the upstream CA here: a spliced connection
	// must show the upstream's real certificate.
	c, _ := e.client(e.roots)

	res, err := c.Get("https://" + unboundHost + "/x")
	require.NoError(t, err)
	assert.Equal(t, "ok", readBody(t, res))
	want, err := e.upCA.Leaf(unboundHost)
	require.NoError(t, err)
	assert.Equal(t, want.Certificate[0], res.TLS.PeerCertificates[0].Raw)
	got := rec.all()
	require.Len(t, got, 1)
	assert.Empty(t, got[0].auth)
	assert.Zero(t, injected.Load())
	assert.Equal(t, []string{dstHTTPS.String()}, e.dialed())

	// The sandbox CA's leaf is not what a bound host gets when spliced: a
	// client trusting only the sandbox CA fails for the unbound host.
	c2, _ := e.client(e.sandbox)
	_, err = c2.Get("https://" + unboundHost + "/x")
	require.Error(t, err)
}

func TestPlainHTTP(t *testing.T) {
	tests := []struct {
		name     string
		host     string
		wantAuth string
		wantURL  []string
	}{
		{name: "bound host is intercepted", host: boundHost, wantAuth: "Bearer " + secret, wantURL: []string{"http://" + boundHost + ":80/p?x=1"}},
		{name: "bound host with port and case", host: "API.example.test:80", wantAuth: "Bearer " + secret, wantURL: []string{"http://" + boundHost + ":80/p?x=1"}},
		{name: "unbound host is spliced", host: unboundHost, wantAuth: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, dstHTTP, nil)
			rec := &recorder{}
			e.plainUpstream(dstHTTP, rec)
			c, _ := e.client(nil)
			req, err := http.NewRequest(http.MethodGet, "http://"+boundHost+"/p?x=1", nil)
			require.NoError(t, err)
			req.Host = tt.host
			res, err := c.Do(req)
			require.NoError(t, err)
			assert.Equal(t, "ok", readBody(t, res))
			got := rec.all()
			require.Len(t, got, 1)
			assert.Equal(t, tt.wantAuth, got[0].auth)
			assert.Equal(t, tt.host, got[0].host)
			assert.Equal(t, tt.wantURL, e.injectedURLs())
			requireOnlyDialed(t, e, dstHTTP)
		})
	}
}

// A plaintext request for a bound host, sent to an address the host does
// not resolve to, is spliced without credentials when TrustPlainHTTP says
// so; the same request to a trusted address is intercepted.
func TestPlainHTTPUntrustedDestination(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		var logs syncBuffer
		e := newEnv(t, dstHTTP, func(_ *env, cfg *tproxy.Config) {
			cfg.TrustPlainHTTP = func(host string, dst netip.AddrPort) error {
				if trusted && host == boundHost && dst == dstHTTP {
					return nil
				}
				return errors.New("no credential added: the reason")
			}
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		rec := &recorder{}
		e.plainUpstream(dstHTTP, rec)
		c, _ := e.client(nil)
		res, err := c.Get("http://" + boundHost + "/p")
		require.NoError(t, err)
		assert.Equal(t, "ok", readBody(t, res))
		got := rec.all()
		require.Len(t, got, 1)
		if trusted {
			assert.Equal(t, "Bearer "+secret, got[0].auth)
		} else {
			assert.Empty(t, got[0].auth, "no credential to an address the host does not resolve to")
			assert.Empty(t, e.injectedURLs())
			assert.Contains(t, logs.String(), `msg="tproxy: plaintext request for a bound host spliced without credentials"`)
			assert.Contains(t, logs.String(), `reason="no credential added: the reason"`, "the log line says why")
		}
	}
}

func TestKeepAlive(t *testing.T) {
	for _, scheme := range []string{"https", "http"} {
		t.Run(scheme, func(t *testing.T) {
			dst := dstHTTPS
			if scheme == "http" {
				dst = dstHTTP
			}
			e := newEnv(t, dst, nil)
			rec := &recorder{}
			if scheme == "https" {
				e.tlsUpstream(dst, rec)
			} else {
				e.plainUpstream(dst, rec)
			}
			c, _ := e.client(e.sandbox)
			const n = 5
			for i := range n {
				body := strings.NewReader(fmt.Sprintf("request %d", i))
				res, err := c.Post(scheme+"://"+boundHost+"/k", "text/plain", body)
				require.NoError(t, err)
				assert.Equal(t, "ok", readBody(t, res))
			}
			got := rec.all()
			require.Len(t, got, n)
			for _, s := range got {
				assert.Equal(t, "Bearer "+secret, s.auth)
				assert.Equal(t, got[0].remote, s.remote, "one upstream connection")
			}
			assert.EqualValues(t, 1, e.accepted.Load(), "one sandbox connection")
			requireOnlyDialed(t, e, dst)
		})
	}
}

// hashingUpstream answers a request with the SHA-256 of its body in a
// header and then streams ?size bytes of a repeating pattern, unflushed
// and without a length (chunked).
func hashingUpstream(size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Body-Sha256", hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("X-Body-Len", fmt.Sprint(n))
		w.WriteHeader(http.StatusOK)
		io.Copy(w, io.LimitReader(pattern{}, int64(size)))
	}
}

// pattern is an endless reader of a repeating byte pattern.
type pattern struct{}

func (pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(i % 251)
	}
	return len(b), nil
}

func TestLargeStreamedBodies(t *testing.T) {
	const size = 8 << 20
	e := newEnv(t, dstHTTPS, nil)
	e.tlsUpstream(dstHTTPS, hashingUpstream(size))
	c, _ := e.client(e.sandbox)

	// Upload without a length (chunked) so nothing can be buffered whole.
	up := sha256.New()
	body := io.TeeReader(io.LimitReader(pattern{}, size), up)
	req, err := http.NewRequest(http.MethodPut, "https://"+boundHost+"/blob", io.NopCloser(body))
	require.NoError(t, err)
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, []string{"chunked"}, res.TransferEncoding)
	down := sha256.New()
	n, err := io.Copy(down, res.Body)
	require.NoError(t, err)
	assert.EqualValues(t, size, n)
	assert.Equal(t, hex.EncodeToString(up.Sum(nil)), res.Header.Get("X-Body-Sha256"))
	assert.Equal(t, fmt.Sprint(size), res.Header.Get("X-Body-Len"))
	want := sha256.New()
	io.Copy(want, io.LimitReader(pattern{}, size))
	assert.Equal(t, want.Sum(nil), down.Sum(nil))
}

func TestStreamingIsNotBuffered(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, dstHTTPS, nil)
	e.tlsUpstream(dstHTTPS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "data: two\n\n")
	}))
	c, _ := e.client(e.sandbox)
	res, err := c.Get("https://" + boundHost + "/events")
	require.NoError(t, err)
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err, "the first event arrives before the upstream finishes")
	assert.Equal(t, "data: one\n", line)
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: two\n\n", string(rest))
}

func TestInjectErrorRefuses(t *testing.T) {
	e := newEnv(t, dstHTTPS, func(_ *env, cfg *tproxy.Config) {
		cfg.Inject = func(req *http.Request) ([]string, error) {
			return nil, errors.New("no credential grants POST " + req.URL.Path)
		}
	})
	rec := &recorder{}
	e.tlsUpstream(dstHTTPS, rec)
	c, _ := e.client(e.sandbox)
	res, err := c.Post("https://"+boundHost+"/admin", "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	body := readBody(t, res)
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
	assert.Contains(t, body, "no credential grants POST /admin")
	assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain"))
	assert.Empty(t, rec.all(), "the upstream is never hit")
}

func TestUntrustedUpstreamIs502(t *testing.T) {
	e := newEnv(t, dstHTTPS, nil)
	rec := &recorder{}
	// A server with httptest's own certificate, which is not in RootCAs.
	srv := newDefaultTLSServer(t, rec)
	e.route(dstHTTPS, srv.Listener.Addr().String())
	c, _ := e.client(e.sandbox)
	res, err := c.Get("https://" + boundHost + "/x")
	require.NoError(t, err)
	body := readBody(t, res)
	assert.Equal(t, http.StatusBadGateway, res.StatusCode)
	assert.Contains(t, body, "certificate that could not be verified")
	assert.NotContains(t, body, secret)
	assert.Empty(t, rec.all())
}

func TestUpstreamDownIs502(t *testing.T) {
	e := newEnv(t, dstHTTPS, nil) // no route: the dial fails
	c, _ := e.client(e.sandbox)
	res, err := c.Get("https://" + boundHost + "/x")
	require.NoError(t, err)
	body := readBody(t, res)
	assert.Equal(t, http.StatusBadGateway, res.StatusCode)
	assert.Contains(t, body, "hybox: ")
	assert.NotContains(t, body, "no route", "internal error text stays in the log")
}

func TestRefusedRequests(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*http.Request)
		status int
		want   string
	}{
		{
			name:   "Host differs from the server name",
			edit:   func(r *http.Request) { r.Host = "evil.example.test" },
			status: http.StatusMisdirectedRequest,
			want:   "does not match",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, dstHTTPS, nil)
			rec := &recorder{}
			e.tlsUpstream(dstHTTPS, rec)
			c, _ := e.client(e.sandbox)
			req, err := http.NewRequest(http.MethodGet, "https://"+boundHost+"/ws", nil)
			require.NoError(t, err)
			tt.edit(req)
			res, err := c.Do(req)
			require.NoError(t, err)
			body := readBody(t, res)
			assert.Equal(t, tt.status, res.StatusCode)
			assert.Contains(t, body, tt.want)
			assert.Empty(t, rec.all())
			assert.Empty(t, e.injectedURLs())
		})
	}
}

func TestServerSpeaksFirstIsSpliced(t *testing.T) {
	e := newEnv(t, dstRaw, nil)
	addr, _ := bannerServer(t)
	e.route(dstRaw, addr)

	conn, err := net.Dial("tcp", e.addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "220 ready\r\n", line) // within the 5 s deadline
	// Then both ways, and the half-close passes through.
	_, err = io.WriteString(conn, "ping\r\n")
	require.NoError(t, err)
	line, err = br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "ping\r\n", line)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "upstream saw EOF and closed")
}

func TestSlowClientIsStillIntercepted(t *testing.T) {
	// A client silent for longer than the first-byte wait is not taken
	// for a server-speaks-first protocol as long as the server is silent
	// too: its ClientHello is still read and the host intercepted.
	e := newEnv(t, dstHTTPS, nil)
	rec := &recorder{}
	e.tlsUpstream(dstHTTPS, rec)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", e.addr)
			if err == nil {
				time.Sleep(300 * time.Millisecond)
			}
			return c, err
		},
		TLSClientConfig: &tls.Config{RootCAs: e.sandbox},
	}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get("https://" + boundHost + "/slow")
	require.NoError(t, err)
	assert.Equal(t, "ok", readBody(t, res))
	got := rec.all()
	require.Len(t, got, 1)
	assert.Equal(t, "Bearer "+secret, got[0].auth)
	assert.Len(t, e.dialed(), 2, "a speculative connection, then the forwarding one")
}

func TestClientSpeaksFirstRawIsSpliced(t *testing.T) {
	// A non-HTTP, non-TLS protocol where the client speaks first: its
	// bytes are replayed to the upstream.
	e := newEnv(t, dstRaw, nil)
	addr, _ := bannerServer(t)
	e.route(dstRaw, addr)
	conn, err := net.Dial("tcp", e.addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, "EHLO sandbox\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for _, want := range []string{"220 ready\r\n", "EHLO sandbox\r\n"} {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
}

func TestRefusesLoopbackDestinations(t *testing.T) {
	addr, accepted := bannerServer(t)
	ap := netip.MustParseAddrPort(addr)
	for _, dst := range []netip.AddrPort{
		ap,
		netip.AddrPortFrom(netip.MustParseAddr("::1"), ap.Port()),
		netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), ap.Port()),
		netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port()),
		netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port()),
	} {
		t.Run(dst.String(), func(t *testing.T) {
			e := newEnv(t, dst, nil)
			e.route(dst, addr) // would be reachable, were it dialled
			conn, err := net.Dial("tcp", e.addr)
			require.NoError(t, err)
			defer conn.Close()
			assert.True(t, isClosed(conn, 2*time.Second), "closed without an answer")
			assert.Empty(t, e.dialed())
			assert.Zero(t, accepted.Load())
		})
	}
}

func TestCloseStopsEverything(t *testing.T) {
	// Upstreams first: their goroutines are part of the baseline.
	e := newEnv(t, dstHTTPS, nil)
	blocked := make(chan struct{})
	e.tlsUpstream(dstHTTPS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			close(blocked)
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	}))
	banner, _ := bannerServer(t)
	e.route(dstRaw, banner)
	// This env's proxy only served to set up routes; use a fresh one that
	// shares them, started after the baseline.
	e.proxy.Close()
	require.ErrorIs(t, <-e.served, tproxy.ErrClosed)
	base := settledGoroutines()

	e2 := &env{t: t, ca: e.ca, upCA: e.upCA, roots: e.roots, sandbox: e.sandbox, routes: e.routes, served: make(chan error, 1)}
	e2.dst.Store(&dstHTTPS)
	p, err := tproxy.New(tproxy.Config{
		CA:          e.ca,
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return *e2.dst.Load(), nil },
		Intercept:   func(host string, _ int) bool { return host == boundHost },
		Dial:        e2.dial,
		RootCAs:     e.roots,
	})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e2.addr = l.Addr().String()
	go func() { e2.served <- p.Serve(l) }()

	// An idle keep-alive intercepted connection.
	c, tr := e2.client(e.sandbox)
	res, err := c.Get("https://" + boundHost + "/")
	require.NoError(t, err)
	readBody(t, res)
	// An in-flight intercepted request.
	inflight := make(chan error, 1)
	go func() {
		c2, tr2 := e2.client(e.sandbox)
		defer tr2.CloseIdleConnections()
		// Close either cuts the connection or answers 502 first.
		res, err := c2.Get("https://" + boundHost + "/block")
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
			if err == nil && res.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
		}
		inflight <- err
	}()
	<-blocked
	// A live spliced connection.
	e2.dst.Store(&dstRaw)
	raw, err := net.Dial("tcp", e2.addr)
	require.NoError(t, err)
	defer raw.Close()
	line, err := bufio.NewReader(raw).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "220 ready\r\n", line)

	require.NoError(t, p.Close())
	require.ErrorIs(t, <-e2.served, tproxy.ErrClosed)
	assert.True(t, isClosed(raw, 2*time.Second), "spliced connection closed")
	select {
	case err := <-inflight:
		assert.Error(t, err, "in-flight request ends")
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight request still running after Close")
	}
	raw.Close()
	tr.CloseIdleConnections()
	require.ErrorIs(t, p.Serve(l), tproxy.ErrClosed)

	n := settledGoroutines()
	if n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d after Close, %d before\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// settledGoroutines waits up to 5 s for the goroutine count to stop
// falling and returns it.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return m
		}
		n = m
	}
	return n
}

func TestConfigValidate(t *testing.T) {
	dst := func(net.Conn) (netip.AddrPort, error) { return dstHTTPS, nil }
	ca, err := tproxy.NewCA("v")
	require.NoError(t, err)
	tests := []struct {
		name string
		cfg  tproxy.Config
		ok   bool
	}{
		{name: "splice only", cfg: tproxy.Config{OriginalDst: dst}, ok: true},
		{name: "intercepting", cfg: tproxy.Config{OriginalDst: dst, CA: ca, Intercept: func(string, int) bool { return true }}, ok: true},
		{name: "no OriginalDst", cfg: tproxy.Config{CA: ca}},
		{name: "Intercept without CA", cfg: tproxy.Config{OriginalDst: dst, Intercept: func(string, int) bool { return true }}},
		{name: "negative idle", cfg: tproxy.Config{OriginalDst: dst, IdleTimeout: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tproxy.New(tt.cfg)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, p.Close())
		})
	}
}

// An upgrade (WebSocket) to a bound host is forwarded with the credential;
// the 101 answer's headers are redacted, then bytes flow both ways.
func TestUpgradeIntercepted(t *testing.T) {
	e := newEnv(t, dstHTTPS, nil)
	seen := make(chan string, 1)
	e.tlsUpstream(dstHTTPS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "echo") {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		seen <- r.Header.Get("Authorization")
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Echo: %s\r\n\r\n", r.Header.Get("Authorization"))
		rw.Flush()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(rw, buf); err == nil {
			c.Write(buf)
		}
	}))
	c, err := tls.Dial("tcp", e.addr, &tls.Config{ServerName: boundHost, RootCAs: e.sandbox})
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", boundHost)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, res.StatusCode)
	assert.Equal(t, "Bearer "+secret, <-seen, "the upgrade request carries the credential")
	assert.NotContains(t, res.Header.Get("X-Echo"), secret, "echoed in the 101 answer: redacted")
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(br, got)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(got))
}

// An HTTP/2-only client (such as gRPC) is intercepted over HTTP/2, and the
// request reaches an HTTP/2 upstream with the credential and trailers.
func TestHTTP2Intercepted(t *testing.T) {
	e := newEnv(t, dstHTTPS, nil)
	type seen struct {
		proto int
		auth  string
	}
	got := make(chan seen, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.ProtoMajor, r.Header.Get("Authorization")}
		w.Header().Set("Trailer", "X-Status")
		io.WriteString(w, "h2 ok")
		w.Header().Set("X-Status", "done")
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return e.upCA.Leaf(h.ServerName) }}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.route(dstHTTPS, srv.Listener.Addr().String())

	c, tr := e.client(e.sandbox)
	tr.ForceAttemptHTTP2 = true
	tr.TLSClientConfig.NextProtos = []string{"h2"} // h2 only: no fallback
	res, err := c.Get("https://" + boundHost + "/rpc")
	require.NoError(t, err)
	assert.Equal(t, 2, res.ProtoMajor, "the sandbox side speaks HTTP/2")
	assert.Equal(t, "h2 ok", readBody(t, res))
	assert.Equal(t, "done", res.Trailer.Get("X-Status"), "trailers pass through")
	s := <-got
	assert.Equal(t, 2, s.proto, "the upstream side speaks HTTP/2")
	assert.Equal(t, "Bearer "+secret, s.auth)
}

// syncBuffer is a bytes.Buffer safe for the proxy's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
