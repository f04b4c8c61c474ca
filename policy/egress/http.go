package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// Do implements runtimes.Egress for guests without a network (wasm): the
// request is made from this process. Every connection is decided by the
// sandbox's current policy. Do does not follow redirects: the guest does,
// one Do per hop, so each hop is decided again and injected separately (a
// credential never follows a redirect to another host). Secrets echoed in
// response headers are redacted.
func (s *Controller) Do(req *http.Request) (*http.Response, error) {
	switch req.URL.Scheme {
	case "http", "https":
	default:
		return nil, fmt.Errorf("unsupported URL scheme %q: only http and https", req.URL.Scheme)
	}
	if req.URL.Hostname() == "" {
		return nil, errors.New("the URL has no host")
	}
	return s.client.Load().Do(req)
}

// newClient is Do's client: a transport whose dials obey the policy,
// wrapped by the vault's injection.
func (s *Controller) newClient() *http.Client {
	t := &http.Transport{
		DialContext:           s.dialPolicy,
		TLSClientConfig:       &tls.Config{RootCAs: s.m.opts.RootCAs, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: &injectingTransport{s: s, base: t},
		// The guest follows redirects itself, one Do per hop, so that
		// each hop is decided by the policy and its redirect mode holds.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// injectingTransport lets the vault set credentials on a copy of each
// request, so that the client's redirect logic, which copies headers from
// the original request, never sees them.
type injectingTransport struct {
	s    *Controller
	base *http.Transport
}

func (t *injectingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	v := t.s.vault
	if v == nil {
		return t.base.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	inj, err := v.Inject(out)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("credential vault: %w", err)
	}
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if len(inj.Secrets) > 0 {
		vault.Redact(resp.Header, inj.Secrets)
		resp.Body = &trailerRedactor{ReadCloser: resp.Body, resp: resp, secrets: inj.Secrets}
	}
	return resp, nil
}

// trailerRedactor redacts the secrets from resp's trailers, whose values
// arrive only with the end of the body.
type trailerRedactor struct {
	io.ReadCloser
	resp    *http.Response
	secrets []string
}

func (r *trailerRedactor) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err == io.EOF {
		vault.Redact(r.resp.Trailer, r.secrets)
	}
	return n, err
}

// dialPolicy resolves and dials addr only where the policy allows.
func (s *Controller) dialPolicy(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := s.allowedAddrs(ctx, host)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return s.track(c, host, a), nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// trackedConn is a connection Do's client dialed, known to its sandbox
// until it is closed, so that a policy change can close it.
type trackedConn struct {
	net.Conn
	s    *Controller
	host string
	addr netip.Addr
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.connMu.Lock()
		delete(c.s.conns, c)
		c.s.connMu.Unlock()
	})
	return c.Conn.Close()
}

// track registers c, dialed to addr for host.
func (s *Controller) track(c net.Conn, host string, addr netip.Addr) net.Conn {
	tc := &trackedConn{Conn: c, s: s, host: host, addr: addr}
	s.connMu.Lock()
	s.conns[tc] = struct{}{}
	s.connMu.Unlock()
	return tc
}

// cutConns closes Do's open connections that c denies: a request in
// flight on one fails, as a container's connection does when it is cut.
func (s *Controller) cutConns(c *policy.Compiled) int {
	var cut []*trackedConn
	s.connMu.Lock()
	for tc := range s.conns {
		if s.decideDial(c, tc.host, tc.addr) != nil {
			cut = append(cut, tc)
		}
	}
	s.connMu.Unlock()
	for _, tc := range cut {
		_ = tc.Close()
	}
	return len(cut)
}

// allowedAddrs decides host under the current policy and returns the
// addresses it may be reached at. A name's addresses are allowed unless an
// IP rule denies them (the order a container's firewall applies).
// Loopback, link-local and unspecified addresses are reached only when a
// rule allows them explicitly: with no policy they would expose the host.
func (s *Controller) allowedAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	c := s.Policy()
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		if err := s.decideDial(c, host, ip); err != nil {
			return nil, err
		}
		return []netip.Addr{ip}, nil
	}
	if nd := c.Name(host); !nd.Allow {
		s.onDenied(host)
		return nil, &policy.DeniedError{Target: host, Decision: nd}
	}
	ips, err := s.m.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	var out []netip.Addr
	var denied error
	for _, ip := range ips {
		ip = ip.Unmap()
		if err := s.decideDial(c, host, ip); err != nil {
			denied = err
			continue
		}
		out = append(out, ip)
	}
	if len(out) == 0 {
		if denied != nil {
			return nil, denied
		}
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return out, nil
}

// decideDial decides a connection to ip for host (a name, or ip itself)
// under c; nil allows it. A name must be allowed, and an IP rule that
// denies ip wins over it (the order a container's firewall applies); with
// no IP rule for ip, an address of a denied name is refused (block.go).
// Loopback, link-local and unspecified addresses need a rule that allows
// them explicitly (the name's or the address's).
func (s *Controller) decideDial(c *policy.Compiled, host string, ip netip.Addr) error {
	ip = ip.Unmap()
	d := c.Addr(ip)
	if d.Index < 0 {
		if name, ok := s.blockedBy(ip); ok {
			return &policy.DeniedError{Target: host + " (" + ip.String() + ", an address of " + name + ")", Decision: c.Name(name)}
		}
	}
	if lit, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && lit.Unmap() == ip {
		if !d.Allow {
			return &policy.DeniedError{Target: host, Decision: d}
		}
		if hostOnly(ip) && d.Index < 0 {
			return fmt.Errorf("%w: %s is a host-local address; only a rule naming it allows it", policy.ErrDenied, ip)
		}
		return nil
	}
	nd := c.Name(host)
	if !nd.Allow {
		return &policy.DeniedError{Target: host, Decision: nd}
	}
	if d.Index >= 0 && !d.Allow {
		return &policy.DeniedError{Target: host + " (" + ip.String() + ")", Decision: d}
	}
	if hostOnly(ip) && nd.Index < 0 && d.Index < 0 {
		return fmt.Errorf("%w: %s resolves to host-local address %s; only a rule naming it allows it", policy.ErrDenied, host, ip)
	}
	return nil
}

// hostOnly reports addresses that reach the host itself or its link.
func hostOnly(ip netip.Addr) bool {
	return ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()
}

// newProxy is the container's transparent credential proxy. s.mu is held
// and the firewall open.
func (s *Controller) newProxy() (*tproxy.Proxy, error) {
	v := s.vault
	var admit func(netip.AddrPort) error
	if fw, ok := s.table.(natFirst); ok {
		// The filter saw the connection only at the proxy's address.
		admit = func(dst netip.AddrPort) error {
			if !fw.Allows(dst) {
				return fmt.Errorf("%w: %v", policy.ErrDenied, dst)
			}
			return nil
		}
	}
	return tproxy.New(tproxy.Config{
		CA:          s.ca,
		OriginalDst: s.m.opts.Firewall.OriginalDst,
		Admit:       admit,
		Intercept:   v.Intercepts,
		// Nothing authenticates a plaintext upstream: inject only when
		// the sandbox's own resolver sent the request's host there, or
		// an explicit IP or CIDR rule allows the address (plain.go).
		TrustPlainHTTP: s.plainTrust,
		Inject: func(req *http.Request) ([]string, error) {
			inj, err := v.Inject(req)
			return inj.Secrets, err
		},
		Redact:  vault.Redact,
		Dial:    s.m.dialer.DialContext,
		RootCAs: s.m.opts.RootCAs,
		Logger:  s.m.opts.Logger.With("sandbox", s.id, "component", "credential-proxy"),
	})
}

// loopbackUp brings up lo in the current network namespace (the DNS proxy
// binds there before CNI has run).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		// Up already (always in gVisor's netstack, which cannot set
		// flags: SIOCSIFFLAGS is ENOTTY there).
		return nil
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// hostResolvers reads the nameservers of a resolv.conf.
func hostResolvers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no DNS upstreams configured and %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, net.JoinHostPort(a.String(), "53"))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no DNS upstreams configured and %s names no nameserver", path)
	}
	return out, nil
}
