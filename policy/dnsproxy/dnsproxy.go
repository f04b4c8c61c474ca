// Package dnsproxy is the DNS resolver a sandbox sees: it answers names the
// egress policy denies with NXDOMAIN at once, forwards the others to the
// upstream resolvers, refuses answers whose CNAME chain leaves the policy,
// and reports the addresses of allowed answers (Config.Learn) before the
// sandbox receives them, so the packet filter can admit exactly those. It
// serves sockets the caller opened (inside the sandbox's network namespace).
package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DefaultTimeout is the per-upstream attempt timeout when Config.Timeout is 0.
const DefaultTimeout = 2 * time.Second

// Sizes of the EDNS0 buffers the proxy advertises (RFC 9715's safe size)
// and reads with.
const (
	ednsSize      = 1232
	maxUDPReadLen = 4096
)

// shutdownGrace bounds how long Close waits for queries in flight.
const shutdownGrace = 5 * time.Second

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("dns proxy closed")

// Config configures a Proxy.
type Config struct {
	// Upstreams are "host:port" resolvers, tried in order: the next one is
	// used when a query to one fails or times out (or answers SERVFAIL or
	// REFUSED). At least one is required.
	Upstreams []string
	// Decide is called for every query with the queried name (lowercase,
	// no trailing dot) and for every other name in an answer; it returns
	// whether the name is allowed and a human-readable reason. It may give
	// different answers over time (the policy may change). Required.
	Decide func(name string) (allow bool, reason string)
	// Learn, if set, is called synchronously before an allowed answer is
	// sent, with the queried name, the A/AAAA addresses of the answer
	// (including those reached through a CNAME chain) and the smallest TTL
	// among them. It is not called when the answer has no addresses. When
	// it fails the client gets SERVFAIL.
	Learn func(name string, addrs []netip.Addr, ttl time.Duration) error
	// Denied, if set, is called with each name that Decide refused, the
	// queried name or a name its answer's CNAME chain leads to, before the
	// refusal is sent. It must not block.
	Denied func(name string)
	// Timeout bounds each upstream attempt; DefaultTimeout when 0.
	Timeout time.Duration
	// Dialer opens the connections to the upstreams (nil: a plain
	// net.Dialer); a proxy inside the namespace it fences marks them.
	Dialer *net.Dialer
	// Logger receives one debug record per query and warnings for upstream
	// and Learn failures; nil discards.
	Logger *slog.Logger
}

// Validate reports what is wrong with c, if anything.
func (c Config) Validate() error {
	if len(c.Upstreams) == 0 {
		return errors.New("dnsproxy: no upstream resolvers")
	}
	for _, u := range c.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return fmt.Errorf("dnsproxy: upstream %q: want host:port: %w", u, err)
		}
	}
	if c.Decide == nil {
		return errors.New("dnsproxy: Decide is required")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("dnsproxy: negative timeout %s", c.Timeout)
	}
	return nil
}

// Proxy is a policy-enforcing DNS forwarder. Create it with New, run it
// with Serve, stop it with Close.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	udp    *dns.Client
	tcp    *dns.Client
	ctx    context.Context // cancelled by Close: aborts upstream queries
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	servers []*server
}

// server is one running dns.Server and what Close needs to stop it.
type server struct {
	srv     *dns.Server
	started chan struct{} // closed when srv is listening
	done    chan struct{} // closed when srv's serve loop returned
}

// New returns a proxy for cfg.
//
// # Errors
// When cfg is invalid (see Config.Validate).
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.Upstreams = append([]string(nil), cfg.Upstreams...)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		cfg:    cfg,
		log:    log,
		udp:    &dns.Client{Net: "udp", Timeout: cfg.Timeout, UDPSize: maxUDPReadLen, Dialer: cfg.Dialer},
		tcp:    &dns.Client{Net: "tcp", Timeout: cfg.Timeout, Dialer: cfg.Dialer},
		ctx:    ctx,
		cancel: cancel,
	}, nil
}

// Serve answers DNS over UDP on pc and over TCP on l (either may be nil)
// until Close, which closes both. It returns nil after Close, or the first
// error that stopped a socket.
//
// # Errors
// ErrClosed if the proxy was already closed (the sockets are closed);
// an error when both sockets are nil or serving one fails.
func (p *Proxy) Serve(pc net.PacketConn, l net.Listener) error {
	if pc == nil && l == nil {
		return errors.New("dnsproxy: no socket to serve")
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if pc != nil {
			pc.Close()
		}
		if l != nil {
			l.Close()
		}
		return ErrClosed
	}
	var run []*server
	for _, s := range []*dns.Server{
		{PacketConn: pc, UDPSize: maxUDPReadLen},
		{Listener: l},
	} {
		if s.PacketConn == nil && s.Listener == nil {
			continue
		}
		srv := &server{srv: s, started: make(chan struct{}), done: make(chan struct{})}
		s.Handler = dns.HandlerFunc(p.serveDNS)
		s.MsgAcceptFunc = acceptQueries
		s.NotifyStartedFunc = func() { close(srv.started) }
		run = append(run, srv)
	}
	p.servers = append(p.servers, run...)
	p.mu.Unlock()

	errs := make(chan error, len(run))
	for _, s := range run {
		go func() {
			defer close(s.done)
			err := s.srv.ActivateAndServe()
			if err != nil {
				err = fmt.Errorf("dnsproxy: serve: %w", err)
				p.log.Warn("dns proxy socket failed", "err", err)
			}
			errs <- err
		}()
	}
	var first error
	for range run {
		if err := <-errs; err != nil && first == nil {
			first = err
			// One socket failed: stop the other too, so Serve returns.
			go p.Close()
		}
	}
	return first
}

// Close stops serving, closes the sockets given to Serve and aborts queries
// in flight. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	servers := p.servers
	p.mu.Unlock()

	p.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	var errs []error
	for _, s := range servers {
		select {
		case <-s.started:
		case <-s.done:
			continue // never started or already failed
		}
		if err := s.srv.ShutdownContext(ctx); err != nil {
			errs = append(errs, fmt.Errorf("dnsproxy: shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// acceptQueries lets through every query (so the handler answers a wrong
// question count with FORMERR and the client's EDNS0), ignores responses and
// refuses other opcodes with NOTIMP.
func acceptQueries(h dns.Header) dns.MsgAcceptAction {
	const qrBit = 1 << 15
	if h.Bits&qrBit != 0 {
		return dns.MsgIgnore
	}
	if opcode := int(h.Bits>>11) & 0xF; opcode != dns.OpcodeQuery {
		return dns.MsgRejectNotImplemented
	}
	return dns.MsgAccept
}

// normalize turns a DNS name into the policy form: lowercase, no trailing dot.
func normalize(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// serveDNS answers one query.
func (p *Proxy) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	start := time.Now()
	resp, name, verdict := p.answer(req)
	if w.LocalAddr().Network() != "tcp" {
		resp.Truncate(clientUDPSize(req))
	}
	if err := w.WriteMsg(resp); err != nil {
		p.log.Debug("dns proxy: write answer", "name", name, "err", err)
	}
	p.log.Debug("dns query", "name", name, "verdict", verdict,
		"rcode", dns.RcodeToString[resp.Rcode], "duration", time.Since(start))
}

// answer builds the reply to req; it also returns the queried name and a
// short verdict for the log.
func (p *Proxy) answer(req *dns.Msg) (*dns.Msg, string, string) {
	if len(req.Question) != 1 {
		return p.reply(req, dns.RcodeFormatError, nil), "", "formerr"
	}
	q := req.Question[0]
	name := normalize(q.Name)
	if allow, reason := p.cfg.Decide(name); !allow {
		p.denied(name)
		return p.reply(req, dns.RcodeNameError, blocked(reason)), name, reason
	}

	up, err := p.forward(req)
	if err != nil {
		p.log.Warn("dns proxy: upstreams failed", "name", name, "err", err)
		return p.reply(req, dns.RcodeServerFailure, &dns.EDNS0_EDE{
			InfoCode: dns.ExtendedErrorCodeNetworkError, ExtraText: "upstream resolvers failed"}), name, "upstream failed"
	}

	// Every other name in the answer must be allowed as well: a CNAME
	// (or DNAME) chain must not lead outside the policy.
	checked := map[string]bool{name: true}
	for _, rr := range up.Answer {
		for _, n := range answerNames(rr) {
			n = normalize(n)
			if checked[n] {
				continue
			}
			checked[n] = true
			if allow, reason := p.cfg.Decide(n); !allow {
				p.denied(n)
				why := "via CNAME: " + n + " " + reason
				return p.reply(req, dns.RcodeNameError, blocked(why)), name, why
			}
		}
	}

	if p.cfg.Learn != nil {
		if addrs, ttl := addresses(up.Answer); len(addrs) > 0 {
			if err := p.cfg.Learn(name, addrs, ttl); err != nil {
				p.log.Warn("dns proxy: learn failed", "name", name, "err", err)
				return p.reply(req, dns.RcodeServerFailure, nil), name, "learn failed"
			}
		}
	}
	return p.relay(req, up), name, "allowed"
}

// denied reports a refused name to Config.Denied.
func (p *Proxy) denied(name string) {
	if p.cfg.Denied != nil {
		p.cfg.Denied(name)
	}
}

// Lookup resolves name's A and AAAA records at upstreams ("host:port",
// tried in order, as by a Proxy) and returns the addresses, those reached
// through a CNAME chain included, and their smallest TTL. No policy
// applies. timeout bounds each attempt (DefaultTimeout when 0); d opens
// the connections (nil: a plain net.Dialer).
//
// # Errors
// Every upstream failed for both record types, or ctx ended. A name
// without addresses (NXDOMAIN included) is no error: no addresses.
func Lookup(ctx context.Context, d *net.Dialer, upstreams []string, name string, timeout time.Duration) ([]netip.Addr, time.Duration, error) {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	udp := &dns.Client{Net: "udp", Timeout: timeout, UDPSize: maxUDPReadLen, Dialer: d}
	tcp := &dns.Client{Net: "tcp", Timeout: timeout, Dialer: d}
	var addrs []netip.Addr
	var ttl time.Duration
	var errs []error
	answered := false
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), qtype)
		q.SetEdns0(ednsSize, false)
		for _, up := range upstreams {
			actx, cancel := context.WithTimeout(ctx, timeout)
			resp, _, err := udp.ExchangeContext(actx, q, up)
			if err == nil && resp.Truncated {
				resp, _, err = tcp.ExchangeContext(actx, q, up)
			}
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", up, err))
				continue
			}
			if resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused {
				errs = append(errs, fmt.Errorf("%s: %s", up, dns.RcodeToString[resp.Rcode]))
				continue
			}
			answered = true
			a, t := addresses(resp.Answer)
			if len(a) > 0 && (len(addrs) == 0 || t < ttl) {
				ttl = t
			}
			addrs = append(addrs, a...)
			break
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
	}
	if !answered {
		return nil, 0, fmt.Errorf("dnsproxy: lookup %s: %w", name, errors.Join(errs...))
	}
	return addrs, ttl, nil
}

// forward sends req's question to the upstreams in order and returns the
// first usable answer. A SERVFAIL or REFUSED answer moves on to the next
// upstream but is returned when no upstream does better.
func (p *Proxy) forward(req *dns.Msg) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.Question = []dns.Question{req.Question[0]}
	q.RecursionDesired = req.RecursionDesired
	q.CheckingDisabled = req.CheckingDisabled
	q.AuthenticatedData = req.AuthenticatedData
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	q.SetEdns0(ednsSize, do)

	var fallback *dns.Msg
	var errs []error
	for _, up := range p.cfg.Upstreams {
		if p.ctx.Err() != nil {
			errs = append(errs, ErrClosed)
			break
		}
		resp, err := p.exchange(q, up)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", up, err))
			continue
		}
		if resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused {
			if fallback == nil {
				fallback = resp
			}
			errs = append(errs, fmt.Errorf("%s: %s", up, dns.RcodeToString[resp.Rcode]))
			continue
		}
		return resp, nil
	}
	if fallback != nil {
		return fallback, nil
	}
	return nil, errors.Join(errs...)
}

// exchange asks one upstream over UDP, and again over TCP when the UDP
// answer is truncated.
func (p *Proxy) exchange(q *dns.Msg, upstream string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.Timeout)
	defer cancel()
	resp, _, err := p.udp.ExchangeContext(ctx, q, upstream)
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	if !resp.Truncated {
		return resp, nil
	}
	resp, _, err = p.tcp.ExchangeContext(ctx, q, upstream)
	if err != nil {
		return nil, fmt.Errorf("tcp after truncated udp answer: %w", err)
	}
	return resp, nil
}

// reply builds a rcode answer to req, with ede attached when the client
// sent EDNS0 and ede is not nil.
func (p *Proxy) reply(req *dns.Msg, rcode int, ede *dns.EDNS0_EDE) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Rcode = rcode
	m.RecursionAvailable = true
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ednsSize, opt.Do())
		if ede != nil {
			o := m.IsEdns0()
			o.Option = append(o.Option, ede)
		}
	}
	return m
}

// relay turns the upstream answer up into the reply to req: the client's
// id and question, and an OPT record only when the client sent one
// (keeping the upstream's Extended DNS Errors).
func (p *Proxy) relay(req, up *dns.Msg) *dns.Msg {
	m := up.Copy()
	m.Id = req.Id
	m.Question = req.Question
	m.Response = true
	m.RecursionDesired = req.RecursionDesired
	m.RecursionAvailable = true // the proxy recurses on the client's behalf
	var upOpt *dns.OPT
	extra := m.Extra[:0]
	for _, rr := range m.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			upOpt = o
			continue
		}
		extra = append(extra, rr)
	}
	m.Extra = extra
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ednsSize, opt.Do())
		if upOpt != nil {
			o := m.IsEdns0()
			for _, e := range upOpt.Option {
				if e.Option() == dns.EDNS0EDE {
					o.Option = append(o.Option, e)
				}
			}
		}
	} else if m.Rcode > 0xF {
		m.Rcode = dns.RcodeServerFailure // an extended rcode needs OPT
	}
	return m
}

// blocked is the Extended DNS Error of a denied name.
func blocked(reason string) *dns.EDNS0_EDE {
	return &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: reason}
}

// answerNames are the names an answer record leads to: its owner and, for
// CNAME and DNAME, its target.
func answerNames(rr dns.RR) []string {
	switch v := rr.(type) {
	case *dns.CNAME:
		return []string{v.Hdr.Name, v.Target}
	case *dns.DNAME:
		return []string{v.Hdr.Name, v.Target}
	}
	return []string{rr.Header().Name}
}

// addresses returns the A and AAAA addresses in answer and their smallest TTL.
func addresses(answer []dns.RR) ([]netip.Addr, time.Duration) {
	var addrs []netip.Addr
	minTTL := uint32(0)
	for _, rr := range answer {
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			ip = v.A
		case *dns.AAAA:
			ip = v.AAAA
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		if ttl := rr.Header().Ttl; len(addrs) == 0 || ttl < minTTL {
			minTTL = ttl
		}
		addrs = append(addrs, a.Unmap())
	}
	return addrs, time.Duration(minTTL) * time.Second
}

// clientUDPSize is the largest UDP answer the client of req accepts.
func clientUDPSize(req *dns.Msg) int {
	if opt := req.IsEdns0(); opt != nil && opt.UDPSize() > dns.MinMsgSize {
		return int(min(opt.UDPSize(), maxUDPReadLen))
	}
	return dns.MinMsgSize
}
