package ingress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// Headers this package sets on requests it forwards. Values sent by the
// client under these names are dropped first, never passed on.
const (
	headerForwardedFor    = "X-Forwarded-For"
	headerForwardedHost   = "X-Forwarded-Host"
	headerForwardedProto  = "X-Forwarded-Proto"
	headerForwardedPrefix = "X-Forwarded-Prefix"
)

// Proxy serves r from the sandbox port t, asking it for path: the escaped
// URL path left after the route prefix ("/" when empty; r.URL.EscapedPath()
// when nothing is stripped), with r's query.
//
// The response streams: every write of the target reaches the client at
// once, so server-sent events and long polls work. Upgrade requests
// (WebSocket) are passed through and the two connections spliced.
// Hop-by-hop headers are dropped (network targets), X-Forwarded-For, -Host
// and -Proto are set from r, replacing any the client sent, and
// X-Forwarded-Prefix carries the stripped prefix when there is one. The
// target sees the client's Host header, so that WebSocket origin checks and
// absolute links work as they would without the proxy.
//
// Proxy answers errors itself with WriteError: a path with a bad escape is
// a 400, a target that does not answer a 502 whose message does not name
// the address tried; the detail is logged to slog.Default(). The Router
// logs to its own Logger.
func Proxy(w http.ResponseWriter, r *http.Request, t Target, path string) {
	proxy(w, r, t, path, slog.Default())
}

func proxy(w http.ResponseWriter, r *http.Request, t Target, path string, log *slog.Logger) {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	dec, err := url.PathUnescape(path)
	if err != nil {
		WriteError(w, fmt.Errorf("%w: the path has a malformed escape", ErrBadTarget))
		return
	}
	prefix := forwardedPrefix(r.URL.EscapedPath(), path)
	if t.Handler != nil {
		out := r.Clone(r.Context())
		out.URL.Path, out.URL.RawPath = dec, path
		out.RequestURI = out.URL.RequestURI()
		setForwarded(out.Header, r, prefix)
		t.Handler.ServeHTTP(w, out)
		return
	}
	base := t.URL
	if base == nil {
		base = &url.URL{Scheme: "http", Host: "localhost"}
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		log.Error("ingress target has an unusable URL", "scheme", base.Scheme)
		WriteError(w, fmt.Errorf("target URL must be http(s)://host"))
		return
	}
	tr := t.Transport
	if tr == nil {
		tr = newTransport(t.Dial, true)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := pr.Out.URL
			u.Scheme, u.Host = base.Scheme, base.Host
			u.Path = joinPath(base.Path, dec)
			u.RawPath = joinPath(base.EscapedPath(), path)
			pr.SetXForwarded()
			pr.Out.Header.Del(headerForwardedPrefix)
			if prefix != "" {
				pr.Out.Header.Set(headerForwardedPrefix, prefix)
			}
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				log.Debug("ingress client went away", "path", r.URL.Path, "err", err)
				return
			}
			log.Warn("ingress target did not answer", "path", r.URL.Path, "err", err)
			WriteError(w, ErrUnreachable)
		},
	}
	// Full duplex: see runtimes/oci's execd proxy; otherwise net/http may
	// discard the request body while the transport still reads it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
}

// NewTransport returns an http.Transport for network Targets that keeps
// connections for reuse: keep it (per sandbox, or per process when dial is
// nil) and put it in Target.Transport. It dials with dial when not nil,
// whatever the address asked for, else over TCP to the URL's host. It never
// uses a proxy from the environment and does not ask for compression, so
// encodings pass through unchanged.
func NewTransport(dial func(ctx context.Context) (net.Conn, error)) *http.Transport {
	return newTransport(dial, false)
}

func newTransport(dial func(ctx context.Context) (net.Conn, error), oneShot bool) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dial != nil {
				return dial(ctx)
			}
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives:     oneShot,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// setForwarded sets the X-Forwarded-* headers of h, a copy of in's headers,
// for an in-process target, dropping the ones the client sent.
func setForwarded(h http.Header, in *http.Request, prefix string) {
	h.Del("Forwarded")
	h.Del(headerForwardedFor)
	h.Del(headerForwardedPrefix)
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		h.Set(headerForwardedFor, ip)
	}
	h.Set(headerForwardedHost, in.Host)
	if in.TLS != nil {
		h.Set(headerForwardedProto, "https")
	} else {
		h.Set(headerForwardedProto, "http")
	}
	if prefix != "" {
		h.Set(headerForwardedPrefix, prefix)
	}
}

// forwardedPrefix returns the part of the escaped request path in that the
// route stripped to leave path, without a trailing slash.
func forwardedPrefix(in, path string) string {
	p, ok := strings.CutSuffix(in, path)
	if !ok {
		if path != "/" {
			return ""
		}
		p = in
	}
	return strings.TrimSuffix(p, "/")
}

// joinPath joins a base path and a path that starts with "/".
func joinPath(base, path string) string {
	if base == "" || base == "/" {
		return path
	}
	return strings.TrimSuffix(base, "/") + path
}

// PortProxy reverse-proxies to port at addr, the address of sandbox's own
// network (container backends); a port nothing answers on is a 502 with
// {code, message} naming the sandbox and the port, never the address.
func PortProxy(sandbox string, addr string, port int, log *slog.Logger) http.Handler {
	return PortProxyVia(sandbox, &url.URL{Scheme: "http", Host: net.JoinHostPort(addr, fmt.Sprint(port))}, port, nil, log)
}

// PortProxyVia is PortProxy to the URL base (which serves the port's "/")
// through the round tripper rt (nil: http.DefaultTransport), for a port
// reached through another server, such as a cluster's API server.
func PortProxyVia(sandbox string, base *url.URL, port int, rt http.RoundTripper, log *slog.Logger) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(base)
	rp.Transport = rt
	rp.FlushInterval = -1
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client went away
		}
		log.Debug("sandbox port did not answer", "sandbox", sandbox, "port", port, "err", err)
		WriteError(w, &PortUnreachableError{Sandbox: sandbox, Port: port})
	}
	return rp
}
