// Package tproxy is the transparent proxy that a sandbox's outbound TCP
// connections are redirected to. For each connection it learns the original
// destination, peeks at the first bytes without consuming them, and either
// splices the connection untouched to that destination or, only when the
// destination host has a credential binding, terminates TLS with a leaf
// certificate from the sandbox's own CA, reads the HTTP requests, lets
// the caller inject credentials into each, and forwards it over a verified
// TLS connection to the original destination address. Plaintext HTTP to a
// bound host is handled alike. The proxy never resolves names: every
// upstream connection goes to the original destination IP and port.
//
// What a sandbox sees of an intercepted host, and the current limits:
//
//   - The leaf certificate chains to the sandbox's CA only. ALPN offers h2
//     and HTTP/1.1; upstream connections use HTTP/2 when the upstream
//     offers it (upgrades always go over HTTP/1.1).
//   - Each request must name the host the connection was opened to (the
//     TLS server name, or the first request's Host for plaintext): another
//     Host is answered 421, so credentials cannot be fronted to a different
//     virtual host behind the same server.
//   - Upgrade requests (WebSocket) are forwarded with the credential in the
//     upgrade request; CONNECT is answered 501.
//   - An upstream that cannot be reached or whose certificate does not
//     verify for the host against Config.RootCAs is answered 502.
//   - Plaintext HTTP is intercepted too when Config.Intercept says so and
//     Config.TrustPlainHTTP agrees that the host really lives at the
//     destination: nothing else authenticates a plaintext upstream.
//   - A request head or ClientHello larger than 32 KiB, or one that arrives
//     too slowly, is spliced without interception.
package tproxy

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"
)

const (
	// firstByteWait is how long a new connection may stay silent before it
	// is taken for a server-speaks-first protocol and spliced.
	firstByteWait = 75 * time.Millisecond
	// peekTimeout bounds reading a ClientHello or request head once the
	// client has started sending it.
	peekTimeout = 5 * time.Second
	// peekBufferSize caps the bytes peeked: the ClientHello or request head
	// must fit, or the connection is spliced.
	peekBufferSize = 32 << 10
	// dialTimeout bounds connecting to the original destination.
	dialTimeout = 10 * time.Second
	// handshakeTimeout bounds the TLS handshakes on both sides.
	handshakeTimeout = 10 * time.Second
	// readHeaderTimeout bounds reading one intercepted request head.
	readHeaderTimeout = 30 * time.Second
	// defaultIdleTimeout is used when Config.IdleTimeout is zero.
	defaultIdleTimeout = 90 * time.Second
)

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("tproxy: proxy closed")

// Config configures a Proxy. OriginalDst is required, and so is CA when
// Intercept is set; every other field has a safe default.
type Config struct {
	// CA signs the leaf certificates presented to the sandbox for
	// intercepted TLS connections.
	CA *CA
	// OriginalDst returns the real destination of a redirected connection
	// (for example from SO_ORIGINAL_DST). Loopback and unspecified
	// destinations are refused: the connection is closed unanswered.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Intercept reports whether connections to host (the TLS server name,
	// or the Host header of a plaintext HTTP request, without port; the
	// destination IP for TLS without a server name) on the original
	// destination port are terminated and their HTTP requests passed to
	// Inject. Nil intercepts nothing: every connection is spliced.
	Intercept func(host string, port int) bool
	// Admit, when set, decides each connection by its original
	// destination before anything is read or dialled: an error closes
	// the connection with a reset. For a firewall that sees redirected
	// connections only at the proxy's own address (gVisor's netstack runs
	// NAT before its filter), so that the proxy must apply the policy to
	// them itself. Nil admits every connection (the filter decided before
	// the redirect).
	Admit func(dst netip.AddrPort) error
	// TrustPlainHTTP, when set, must also agree (answer nil) before a
	// plaintext HTTP connection is intercepted: nothing authenticates a
	// plaintext upstream, so a workload could send a bound Host header to
	// any address it may reach. The caller checks that host really
	// resolves to dst (for example, through the sandbox's own DNS answers)
	// or that dst is trusted otherwise; its error says why not, and is
	// logged with the spliced connection. Nil trusts every plaintext
	// connection that Intercept accepts.
	TrustPlainHTTP func(host string, dst netip.AddrPort) error
	// Inject sets credentials on an intercepted request before it is
	// forwarded. req.URL is absolute (scheme://host:port/path?query, scheme
	// "http" for plaintext connections) and req.Host is the Host header.
	// It returns the secret values it added, for Redact. An error answers
	// 403 with the error's text and the request is not forwarded, so the
	// text must not carry secrets. Nil forwards requests unchanged.
	Inject func(req *http.Request) (secrets []string, err error)
	// Redact scrubs the secrets that Inject returned from an upstream
	// response's headers before they reach the sandbox. Nil does nothing.
	Redact func(h http.Header, secrets []string)
	// Dial connects to the original destination, both for splicing and for
	// intercepted requests; addr is always the original destination
	// "ip:port". Nil uses a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs verifies upstream servers of intercepted connections. Nil
	// uses the system roots.
	RootCAs *x509.CertPool
	// Logger receives connection decisions (debug) and failures (warn).
	// Nil discards.
	Logger *slog.Logger
	// IdleTimeout closes an intercepted keep-alive connection, from the
	// sandbox or to an upstream, idle this long. Zero means 90 s. Spliced
	// connections have no idle timeout.
	IdleTimeout time.Duration
}

// Validate reports a missing required field.
func (c *Config) Validate() error {
	if c.OriginalDst == nil {
		return errors.New("tproxy: config: OriginalDst is required")
	}
	if c.Intercept != nil && c.CA == nil {
		return errors.New("tproxy: config: CA is required when Intercept is set")
	}
	if c.IdleTimeout < 0 {
		return errors.New("tproxy: config: negative IdleTimeout")
	}
	return nil
}

// Proxy is a transparent proxy for one sandbox. Its methods are safe for
// concurrent use.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	idle   time.Duration
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	// Intercepted connections are served by one HTTP server through hl.
	srv     *http.Server
	hl      *connListener
	srvOnce sync.Once

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]connInfo // sandbox and spliced upstream connections
	wg        sync.WaitGroup        // connection goroutines and request handlers

	tmu        sync.Mutex
	transports map[transportKey]*http.Transport
}

// New returns a Proxy for cfg. It starts nothing: call Serve.
//
// # Errors
//
// A Config that fails Validate.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:        cfg,
		log:        cfg.Logger,
		idle:       cfg.IdleTimeout,
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[net.Conn]connInfo),
		transports: make(map[transportKey]*http.Transport),
		hl:         newConnListener(),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.idle == 0 {
		p.idle = defaultIdleTimeout
	}
	if p.cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		p.cfg.Dial = d.DialContext
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.srv = p.newHTTPServer()
	return p, nil
}

// Serve accepts connections on l, each handled on its own goroutine, until
// Close. It may be called for several listeners. l is closed on return.
//
// # Errors
//
// ErrClosed after Close; otherwise the listener's error.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.srvOnce.Do(func() {
		p.wg.Go(func() { _ = p.srv.Serve(p.hl) })
	})
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		l.Close()
	}()

	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				p.log.Warn("tproxy: accept failed; retrying", "err", err, "delay", delay)
				select {
				case <-time.After(delay):
				case <-p.ctx.Done():
					return ErrClosed
				}
				continue
			}
			return fmt.Errorf("tproxy: accept: %w", err)
		}
		delay = 0
		if !p.track(c) {
			c.Close()
			return ErrClosed
		}
		go p.handle(c)
	}
}

// isTemporary reports accept errors worth retrying (too many open files and
// the like).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// Close stops every Serve, closes all live connections, waits for their
// goroutines to end and drops idle upstream connections. It is safe to call
// more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ls := make([]net.Listener, 0, len(p.listeners))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	cs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()

	p.cancel()
	for _, l := range ls {
		l.Close()
	}
	_ = p.srv.Close() // closes hl and the connections it serves
	for _, c := range cs {
		c.Close()
	}
	p.wg.Wait()

	p.tmu.Lock()
	for _, t := range p.transports {
		t.CloseIdleConnections()
	}
	p.tmu.Unlock()
	return nil
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// track registers a live connection and, for a sandbox connection, its
// goroutine; it returns false once the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = connInfo{}
	p.wg.Add(1)
	return true
}

// connInfo is what the proxy knows of a tracked connection.
type connInfo struct {
	dst     netip.AddrPort // the original destination, once known
	sandbox bool           // the sandbox's side (else the upstream's)
}

// setDst records the original destination of a tracked connection.
func (p *Proxy) setDst(c net.Conn, dst netip.AddrPort, sandbox bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[c]; ok {
		p.conns[c] = connInfo{dst: dst, sandbox: sandbox}
	}
}

// Cut resets every connection whose original destination deny refuses:
// the sandbox's connection and the upstream one it is spliced to (a
// policy made stricter, for a firewall that cannot cut a redirected
// connection itself). Both peers get a reset at once, whether the
// connection is busy or idle. It returns the number of sandbox
// connections cut.
func (p *Proxy) Cut(deny func(dst netip.AddrPort) bool) int {
	p.mu.Lock()
	var cut []net.Conn
	n := 0
	for c, info := range p.conns {
		if info.dst.IsValid() && deny(info.dst) {
			cut = append(cut, c)
			if info.sandbox {
				n++
			}
		}
	}
	p.mu.Unlock()
	// Every side first: closing one ends its splice, which closes the
	// other, and that close must be a reset too.
	for _, c := range cut {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	for _, c := range cut {
		_ = c.Close()
	}
	return n
}

// reset closes c with a TCP reset rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// untrack closes c and forgets it, ending the goroutine count track began.
func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	_, ok := p.conns[c]
	delete(p.conns, c)
	p.mu.Unlock()
	if ok {
		p.wg.Done()
	}
}

// enter counts a request handler in; false once the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// handle decides what to do with one redirected connection.
func (p *Proxy) handle(c net.Conn) {
	handedOff := false
	defer func() {
		if !handedOff {
			p.untrack(c)
		}
	}()
	dst, err := p.cfg.OriginalDst(c)
	if err != nil {
		p.log.Warn("tproxy: original destination unknown; closing", "client", c.RemoteAddr(), "err", err)
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if !dst.IsValid() || dst.Port() == 0 || dst.Addr().IsLoopback() || dst.Addr().IsUnspecified() {
		p.log.Warn("tproxy: refusing connection to a loopback or unspecified destination", "client", c.RemoteAddr(), "dst", dst)
		return
	}
	if p.cfg.Admit != nil {
		if err := p.cfg.Admit(dst); err != nil {
			p.log.Debug("tproxy: connection refused by the policy", "client", c.RemoteAddr(), "dst", dst, "err", err)
			reset(c)
			return
		}
	}
	p.setDst(c, dst, true)
	s := &session{p: p, c: c, br: bufio.NewReaderSize(c, peekBufferSize), dst: dst,
		log: p.log.With("client", c.RemoteAddr(), "dst", dst)}
	defer s.dropUpstream()
	if p.cfg.Intercept == nil {
		s.splice()
		return
	}

	// A client that stays silent may be waiting for the server to speak:
	// connect, and splice if the server speaks first. A client that is
	// merely slow still gets its first bytes classified.
	_ = c.SetReadDeadline(time.Now().Add(firstByteWait))
	_, err = s.br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		if !isTimeout(err) && !errors.Is(err, io.EOF) {
			s.log.Debug("tproxy: connection failed before sending", "err", err)
			return
		}
		if isTimeout(err) {
			if !s.dialUpstream() {
				return
			}
			if !s.clientSpeaksFirst() {
				s.log.Debug("tproxy: splice (server speaks first)")
				s.splice()
				return
			}
		} else {
			s.splice()
			return
		}
	}

	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	port := int(dst.Port())
	sni, isTLS, err := PeekClientHello(s.br)
	if isTLS {
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			s.log.Debug("tproxy: splice (unreadable ClientHello)", "err", err)
			s.splice()
			return
		}
		host := sni
		if host == "" {
			host = dst.Addr().String()
		}
		if !p.cfg.Intercept(host, port) {
			s.log.Debug("tproxy: splice (TLS)", "host", host)
			s.splice()
			return
		}
		s.log.Debug("tproxy: intercept (TLS)", "host", host)
		s.dropUpstream()
		handedOff = p.interceptTLS(c, s.br, dst, host, s.log)
		return
	}
	host, isHTTP, err := peekHTTPHost(s.br)
	_ = c.SetReadDeadline(time.Time{})
	if !isHTTP || err != nil || !p.cfg.Intercept(host, port) {
		s.log.Debug("tproxy: splice", "http", isHTTP, "host", host, "err", err)
		s.splice()
		return
	}
	if p.cfg.TrustPlainHTTP != nil {
		if err := p.cfg.TrustPlainHTTP(host, dst); err != nil {
			s.log.Warn("tproxy: plaintext request for a bound host spliced without credentials", "host", host, "dst", dst, "reason", err)
			s.splice()
			return
		}
	}
	s.log.Debug("tproxy: intercept (HTTP)", "host", host)
	s.dropUpstream()
	handedOff = p.serveIntercepted(&peekedConn{Conn: c, r: s.br}, c, connMeta{scheme: "http", host: host, dst: dst}, s.log)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// aLongTimeAgo is a deadline in the past, to interrupt a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// session is one sandbox connection on its way to being spliced or
// intercepted.
type session struct {
	p   *Proxy
	c   net.Conn      // the sandbox's connection
	br  *bufio.Reader // peeks at c
	dst netip.AddrPort
	log *slog.Logger

	up      net.Conn // the upstream connection, once dialled
	upFirst []byte   // bytes the upstream sent before the sandbox
}

// dialUpstream connects to the original destination; false if it failed.
func (s *session) dialUpstream() bool {
	ctx, cancel := context.WithTimeout(s.p.ctx, dialTimeout)
	up, err := s.p.cfg.Dial(ctx, "tcp", s.dst.String())
	cancel()
	if err != nil {
		s.log.Warn("tproxy: dial failed", "err", err)
		return false
	}
	if !s.p.track(up) {
		up.Close()
		return false
	}
	s.p.setDst(up, s.dst, false)
	s.up = up
	return true
}

// dropUpstream closes the upstream connection, if any.
func (s *session) dropUpstream() {
	if s.up != nil {
		s.p.untrack(s.up)
		s.up = nil
	}
}

// clientSpeaksFirst waits for the first bytes of either side. It reports
// true when the sandbox sent before the upstream did; otherwise what the
// upstream sent is kept in upFirst for splice.
func (s *session) clientSpeaksFirst() bool {
	type result struct {
		n   int
		err error
	}
	buf := make([]byte, 4096)
	fromUp := make(chan result, 1)
	go func() {
		n, err := s.up.Read(buf)
		fromUp <- result{n, err}
	}()
	fromClient := make(chan error, 1)
	go func() {
		_, err := s.br.Peek(1)
		fromClient <- err
	}()
	select {
	case err := <-fromClient:
		_ = s.up.SetReadDeadline(aLongTimeAgo)
		r := <-fromUp
		_ = s.up.SetReadDeadline(time.Time{})
		s.upFirst = buf[:r.n]
		return err == nil && r.n == 0
	case r := <-fromUp:
		_ = s.c.SetReadDeadline(aLongTimeAgo)
		<-fromClient
		_ = s.c.SetReadDeadline(time.Time{})
		s.upFirst = buf[:r.n]
		return false
	}
}

// splice connects the sandbox to the original destination (unless already
// connected), passes on what either side sent while being peeked at, and
// copies both ways until both sides are done, half-closes included.
func (s *session) splice() {
	if s.up == nil && !s.dialUpstream() {
		return
	}
	c, up := s.c, s.up
	if len(s.upFirst) > 0 {
		if _, err := c.Write(s.upFirst); err != nil {
			s.log.Debug("tproxy: splice: write failed", "err", err)
			return
		}
	}
	if n := s.br.Buffered(); n > 0 {
		b, _ := s.br.Peek(n)
		if _, err := up.Write(b); err != nil {
			s.log.Debug("tproxy: splice: replay failed", "err", err)
			return
		}
	}
	// br holds nothing more than what was replayed: read c directly so that
	// the kernel can splice TCP to TCP.
	done := make(chan error, 1)
	go func() { done <- pipe(up, c) }()
	err1 := pipe(c, up)
	err2 := <-done
	if err := errors.Join(err1, err2); err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("tproxy: splice ended", "err", err)
	}
}

// pipe copies src to dst and then half-closes dst. Any error closes src
// and dst so that the opposite direction ends too.
func pipe(dst, src net.Conn) error {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			err = cw.CloseWrite()
		} else {
			err = dst.Close()
		}
	}
	if err != nil {
		src.Close()
		dst.Close()
	}
	return err
}

// peekedConn reads through the bufio.Reader that peeked at the connection.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite half-closes the underlying connection when it can.
func (c *peekedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connListener hands intercepted connections to the HTTP server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *connListener) Addr() net.Addr { return &net.TCPAddr{} }

// offer hands c to the server; false once the listener is closed.
func (l *connListener) offer(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}
