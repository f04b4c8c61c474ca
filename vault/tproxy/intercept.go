package tproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
)

// maxTransports bounds the upstream transports kept, one per (host,
// destination); past it one is dropped with its idle connections.
const maxTransports = 256

// connMeta is what an intercepted connection is for.
type connMeta struct {
	scheme string // "https" or "http"
	host   string // server name or Host, normalized, without port
	dst    netip.AddrPort
	log    *slog.Logger
}

type (
	connMetaKey struct{}
	requestKey  struct{}
)

// requestState travels with a forwarded request to the transport and the
// response hooks.
type requestState struct {
	meta    *connMeta
	secrets []string
}

// interceptConn is a sandbox connection handed to the HTTP server: the
// TLS-terminated (or peeked plaintext) stream plus what it is for. Closing
// it releases the raw connection from the proxy's bookkeeping.
type interceptConn struct {
	net.Conn
	meta connMeta
	raw  net.Conn
	p    *Proxy
	once sync.Once
}

// Close implements net.Conn.
func (c *interceptConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.p.untrack(c.raw) })
	return err
}

// CloseWrite half-closes the stream when it can (close_notify for TLS).
func (c *interceptConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// interceptTLS terminates the sandbox's TLS with a leaf for host and hands
// the connection to the HTTP server. It reports whether it did.
func (p *Proxy) interceptTLS(c net.Conn, br *bufio.Reader, dst netip.AddrPort, host string, log *slog.Logger) bool {
	tc := tls.Server(&peekedConn{Conn: c, r: br}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		// HTTP/2 too: the server below speaks it on the terminated
		// stream (h2-only clients such as gRPC need it).
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.cfg.CA.Leaf(host)
		},
	})
	ctx, cancel := context.WithTimeout(p.ctx, handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		log.Warn("tproxy: TLS handshake with the sandbox failed", "host", host, "err", err)
		return false
	}
	return p.serveIntercepted(tc, c, connMeta{scheme: "https", host: host, dst: dst}, log)
}

// serveIntercepted hands conn (reading from raw) to the HTTP server. It
// reports whether the server took it; if not, the caller still owns raw.
func (p *Proxy) serveIntercepted(conn, raw net.Conn, meta connMeta, log *slog.Logger) bool {
	meta.log = log.With("host", meta.host)
	return p.hl.offer(&interceptConn{Conn: conn, meta: meta, raw: raw, p: p})
}

// newHTTPServer returns the server for intercepted connections, and sets up
// the reverse proxy its handler forwards through.
func (p *Proxy) newHTTPServer() *http.Server {
	errLog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	rp := &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      roundTripperFunc(p.roundTrip),
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       errLog,
	}
	// The server gets the TLS-terminated stream, not a *tls.Conn, so it
	// sees HTTP/2 as "unencrypted": it tells it from HTTP/1 by its preface.
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Protocols:                    &protos,
		Handler:                      &handler{p: p, rp: rp},
		ReadHeaderTimeout:            readHeaderTimeout,
		IdleTimeout:                  p.idle,
		MaxHeaderBytes:               1 << 20,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     errLog,
		BaseContext:                  func(net.Listener) context.Context { return p.ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ic, ok := c.(*interceptConn); ok {
				return context.WithValue(ctx, connMetaKey{}, &ic.meta)
			}
			return ctx
		},
	}
}

// handler serves the requests of intercepted connections.
type handler struct {
	p  *Proxy
	rp *httputil.ReverseProxy
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := h.p
	meta, ok := r.Context().Value(connMetaKey{}).(*connMeta)
	if !ok {
		http.Error(w, "hybox: connection has no destination", http.StatusInternalServerError)
		return
	}
	if !p.enter() {
		http.Error(w, "hybox: proxy is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()

	// Upgrades (WebSocket) are forwarded: the credential goes into the
	// upgrade request, and ReverseProxy then copies the two streams.
	switch {
	case r.Method == http.MethodConnect || r.RequestURI == "*":
		http.Error(w, "hybox: this request form is not supported for hosts with credential bindings", http.StatusNotImplemented)
		return
	}
	// The credentials are for the host the connection was opened to: a
	// request naming another host (domain fronting) is refused.
	if host := hostOnly(r.Host); host != "" && host != meta.host {
		meta.log.Warn("tproxy: Host header does not match the connection", "request_host", r.Host)
		http.Error(w, fmt.Sprintf("hybox: Host %q does not match the connection's host %q", r.Host, meta.host), http.StatusMisdirectedRequest)
		return
	}

	out := r.Clone(r.Context())
	target := url.URL{
		Scheme: meta.scheme,
		Host:   net.JoinHostPort(meta.host, strconv.Itoa(int(meta.dst.Port()))),
	}
	out.URL = &url.URL{
		Scheme:   target.Scheme,
		Host:     target.Host,
		Path:     r.URL.Path,
		RawPath:  r.URL.RawPath,
		RawQuery: r.URL.RawQuery,
	}
	out.RequestURI = ""
	if out.Host == "" {
		out.Host = meta.host
	}
	var secrets []string
	if p.cfg.Inject != nil {
		var err error
		secrets, err = p.cfg.Inject(out)
		if err != nil {
			meta.log.Info("tproxy: request refused", "method", r.Method, "path", r.URL.Path, "err", err)
			http.Error(w, "hybox: request refused: "+err.Error(), http.StatusForbidden)
			return
		}
		// Inject may change the path, query and headers, never where the
		// request goes.
		out.URL.Scheme, out.URL.Host = target.Scheme, target.Host
	}
	ctx := context.WithValue(out.Context(), requestKey{}, &requestState{meta: meta, secrets: secrets})
	h.rp.ServeHTTP(w, out.WithContext(ctx))
}

// forwardingHeaders are kept as the sandbox sent them: ReverseProxy.Rewrite
// strips them by default, but a transparent proxy adds and removes nothing.
var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite is the ReverseProxy hook: the outbound request is the injected one
// as it is, hop-by-hop headers aside.
func rewrite(pr *httputil.ProxyRequest) {
	for _, k := range forwardingHeaders {
		if v, ok := pr.In.Header[k]; ok {
			pr.Out.Header[k] = v
		}
	}
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var _ http.RoundTripper = roundTripperFunc(nil)

// roundTrip sends a forwarded request over the transport for its host and
// original destination.
func (p *Proxy) roundTrip(req *http.Request) (*http.Response, error) {
	st, ok := req.Context().Value(requestKey{}).(*requestState)
	if !ok {
		return nil, errors.New("tproxy: request without destination")
	}
	return p.transport(st.meta.host, st.meta.dst).RoundTrip(req)
}

type transportKey struct {
	host string
	dst  netip.AddrPort
}

// transport returns the transport for host at dst: it dials only dst and
// verifies the upstream certificate for host against RootCAs. Keeping one
// per (host, destination) lets it reuse upstream connections.
func (p *Proxy) transport(host string, dst netip.AddrPort) *http.Transport {
	key := transportKey{host: host, dst: dst}
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if t := p.transports[key]; t != nil {
		return t
	}
	if len(p.transports) >= maxTransports {
		for k, t := range p.transports {
			t.CloseIdleConnections()
			delete(p.transports, k)
			break
		}
	}
	addr := dst.String()
	t := &http.Transport{
		Proxy: nil, // never an environment proxy
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.cfg.Dial(ctx, "tcp", addr)
		},
		TLSClientConfig: &tls.Config{
			ServerName: host,
			RootCAs:    p.cfg.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		TLSHandshakeTimeout:   handshakeTimeout,
		ForceAttemptHTTP2:     true, // upgrades still go over HTTP/1.1
		DisableCompression:    true, // pass encodings through untouched
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       p.idle,
		ExpectContinueTimeout: 0, // send bodies at once; the upstream answers 100 itself
	}
	p.transports[key] = t
	return t
}

// modifyResponse redacts echoed secrets from the upstream response headers,
// and from its trailers once the body has been read.
func (p *Proxy) modifyResponse(res *http.Response) error {
	st, ok := res.Request.Context().Value(requestKey{}).(*requestState)
	if !ok || p.cfg.Redact == nil || len(st.secrets) == 0 {
		return nil
	}
	p.cfg.Redact(res.Header, st.secrets)
	if len(res.Trailer) > 0 {
		res.Body = &trailerRedactor{ReadCloser: res.Body, res: res, redact: p.cfg.Redact, secrets: st.secrets}
	}
	return nil
}

// trailerRedactor redacts a response's trailers when its body ends.
type trailerRedactor struct {
	io.ReadCloser
	res     *http.Response
	redact  func(http.Header, []string)
	secrets []string
	done    bool
}

func (t *trailerRedactor) Read(b []byte) (int, error) {
	n, err := t.ReadCloser.Read(b)
	if err == io.EOF && !t.done {
		t.done = true
		t.redact(t.res.Trailer, t.secrets)
	}
	return n, err
}

// upstreamError answers 502 with a reason the sandbox's program can act
// on; the underlying error goes to the log only.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := r.Context().Value(requestKey{}).(*requestState)
	host, log := "", p.log
	if st != nil {
		host, log = st.meta.host, st.meta.log
	}
	if errors.Is(err, context.Canceled) {
		log.Debug("tproxy: request cancelled", "err", err)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	log.Warn("tproxy: upstream request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	http.Error(w, upstreamReason(host, err), http.StatusBadGateway)
}

// upstreamReason words an upstream failure without internal details.
func upstreamReason(host string, err error) string {
	var (
		verifyErr  *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		opErr      *net.OpError
	)
	switch {
	case errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return fmt.Sprintf("hybox: the upstream server for %s presented a TLS certificate that could not be verified", host)
	case isTimeout(err):
		return fmt.Sprintf("hybox: the upstream server for %s timed out", host)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Sprintf("hybox: could not connect to the upstream server for %s", host)
	default:
		return fmt.Sprintf("hybox: the request to %s failed upstream", host)
	}
}
