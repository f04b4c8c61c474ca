// Package egress applies one sandbox's egress policy and credential vault
// the way its backend needs them.
//
// A container sandbox gets, inside its own network namespace: a DNS proxy
// on 127.0.0.53:53 (the sandbox's only resolver: denied names answer
// NXDOMAIN, allowed answers teach the firewall their addresses), a
// firewall that rejects everything the policy does not allow (an nftables
// table; in gVisor's netstack, which has none, its iptables: see
// FirewallBackend), and,
// when the sandbox has a credential vault, a transparent proxy on
// 127.0.0.1:15001 that every outbound TCP connection is redirected to. The
// proxy terminates TLS (with the sandbox's own CA) only for hosts that have
// a binding and splices every other connection untouched. The sockets are
// opened in the namespace but served by this process, so the workload can
// neither see nor change them; the workload has no CAP_NET_ADMIN, so it
// cannot change the rules.
//
// A wasm sandbox has no network: its guests' requests are made by Do, in
// this process, under the same compiled policy and the same vault.
//
// A sandbox whose namespace this process cannot enter (a Kubernetes Pod,
// maybe on another node) is enforced by the same code in another process:
// hybox-egress runs an Agent (agent.go) inside the Pod's namespace, whose
// own Controller installs the same firewall and serves the same proxies;
// the server's Controller is attached to it (Attach) and pushes every
// change of policy or vault to it before the change is answered.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/dnsproxy"
	"github.com/hybox-dev/hybox/policy/nft"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
	"golang.org/x/sys/unix"
)

// Addresses inside a sandbox's network namespace.
const (
	// DNSAddr is the sandbox's resolver (the DNS proxy).
	DNSAddr = "127.0.0.53:53"
	// ProxyPort is where outbound TCP is redirected when the sandbox has a
	// credential vault.
	ProxyPort = 15001
)

// Paths inside a container sandbox.
const (
	resolvConfPath = "/etc/resolv.conf"
	bundlePath     = "/etc/ssl/certs/ca-certificates.crt"
	caPath         = "/etc/hybox/ca.crt"
)

// minLearnTTL is the shortest time a learned address stays allowed: an
// answer with TTL 0 must still be usable for the connection that follows.
const minLearnTTL = 5 * time.Second

// Options configure a Manager.
type Options struct {
	// DNSUpstreams are the resolvers ("host:port") allowed names are
	// forwarded to, and that Do resolves with. Empty: the nameservers of
	// the host's /etc/resolv.conf.
	DNSUpstreams []string
	// RootCAs verify upstream TLS servers when the vault injects (nil:
	// the system roots).
	RootCAs *x509.CertPool
	// SystemBundle is the PEM trust store a container's CA is added to.
	// Empty: the host's /etc/ssl/certs/ca-certificates.crt.
	SystemBundle []byte
	// RootCAsPEM are the PEM certificates added to the system roots in
	// RootCAs; an agent in another process gets them (with SystemBundle)
	// to verify the same upstreams.
	RootCAsPEM []byte
	// Mark, when non-zero, is the socket mark of every connection the
	// controllers open themselves (DNS upstreams, resolutions of denied
	// names, the credential proxy's upstream connections), which the
	// firewall lets pass: for a process that enforces the namespace it
	// runs in (hybox-egress). Setting it needs CAP_NET_ADMIN.
	Mark uint32
	// GuardPorts are TCP ports of the namespace its own sockets may not
	// connect to (the agent's control port): see nft.Rules.GuardPorts.
	GuardPorts []uint16
	// Firewall programs the namespaces' packet filters: NFTables (nil)
	// or XTables (gVisor's netstack, which has no nftables).
	Firewall FirewallBackend
	Logger   *slog.Logger
}

// Manager holds what every sandbox's egress shares.
type Manager struct {
	opts     Options
	resolver *net.Resolver
	dialer   *net.Dialer // the controllers' own connections (Options.Mark)
}

// NewManager checks opts and returns a Manager.
func NewManager(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Firewall == nil {
		opts.Firewall = NFTables
	}
	if len(opts.DNSUpstreams) == 0 {
		ups, err := hostResolvers("/etc/resolv.conf")
		if err != nil {
			// As the C library does without a nameserver line.
			opts.Logger.Warn("no DNS upstream configured and none in the host's resolv.conf; using 127.0.0.1:53", "err", err)
			ups = []string{"127.0.0.1:53"}
		}
		opts.DNSUpstreams = ups
	}
	for _, u := range opts.DNSUpstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return nil, fmt.Errorf("dns upstream %q: want host:port", u)
		}
	}
	if opts.SystemBundle == nil {
		b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("system trust store: %w", err)
		}
		opts.SystemBundle = b
	}
	m := &Manager{opts: opts, dialer: &net.Dialer{}}
	if opts.Mark != 0 {
		m.dialer.Control = markControl(opts.Mark)
	}
	m.resolver = &net.Resolver{PreferGo: true, Dial: m.dialDNS}
	return m, nil
}

// dialDNS sends the host-side resolver's queries to the configured
// upstreams, in order.
func (m *Manager) dialDNS(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	var errs []error
	for _, u := range m.opts.DNSUpstreams {
		c, err := d.DialContext(ctx, network, u)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no DNS upstream answered: %w", errors.Join(errs...))
}

// DNSUpstreams are the resolvers allowed names are forwarded to.
func (m *Manager) DNSUpstreams() []string { return slices.Clone(m.opts.DNSUpstreams) }

// Roots is the PEM trust store upstream TLS servers are verified with by
// an agent in another process: the system bundle plus RootCAsPEM.
func (m *Manager) Roots() []byte {
	return append(append(slices.Clone(m.opts.SystemBundle), '\n'), m.opts.RootCAsPEM...)
}

// markControl sets SO_MARK on a socket before it connects.
func markControl(mark uint32) func(string, string, syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("egress: mark the connection (SO_MARK needs CAP_NET_ADMIN): %w", serr)
		}
		return nil
	}
}

// Config is one sandbox's egress state.
type Config struct {
	// Policy is the network policy; nil means unrestricted.
	Policy *policy.Policy
	// Vault, when set, injects credentials; it needs CA for containers.
	Vault *vault.Vault
	CA    *tproxy.CA
	// OnLearn is called after an address is learned (tests, metrics).
	OnLearn func(name string, addrs []netip.Addr)
	// OnBlock is called after the addresses of a denied name are blocked
	// (tests, metrics).
	OnBlock func(name string, addrs []netip.Addr)
}

// Controller is one sandbox's egress controller. It implements
// runtimes.Egress.
type Controller struct {
	m      *Manager
	id     string
	pol    atomic.Pointer[policy.Compiled]
	vault  *vault.Vault
	ca     *tproxy.CA
	client atomic.Pointer[http.Client] // Do's; replaced by each SetPolicy
	cfg    Config

	mu      sync.Mutex
	closed  bool
	nsPath  string
	table   Firewall
	dns     *dnsproxy.Proxy
	proxy   *tproxy.Proxy
	learned map[netip.Addr]learnedAddr
	// answered remembers, per name, the addresses the sandbox's DNS proxy
	// answered with, until they expire: a plaintext request for a bound
	// host is intercepted only when it goes to one of them.
	answered map[string]map[netip.Addr]time.Time
	// seen remembers the names each address was answered for, past
	// their expiry (up to maxSeen addresses): a connection outlives its
	// answer's TTL, and a policy change decides it by those names.
	seen   map[netip.Addr][]string
	learns int // learn calls, for pruning expired entries now and then

	connMu sync.Mutex
	conns  map[*trackedConn]struct{} // Do's open connections

	// remote enforces the state when another process does (Attach);
	// remoted says so without s.mu.
	remote  Remote
	remoted atomic.Bool

	// Blocking the addresses of denied names (block.go).
	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	kick     chan struct{} // wakes blockLoop; nil until it runs (s.mu)
	onDemand chan struct{} // a slot per on-demand lookup in flight
	blockMu  sync.Mutex
	blocked  map[netip.Addr]blockedAddr
	resolved map[string]time.Time // denied name → its addresses' expiry
	events   eventLog             // diagnostics events (plain.go)
}

// Bounds of Controller.seen.
const (
	maxSeen      = 1 << 14
	maxSeenNames = 8
)

type learnedAddr struct {
	name    string
	expires time.Time
}

// New returns the egress controller of sandbox id.
func (m *Manager) New(id string, cfg Config) (*Controller, error) {
	if cfg.Vault != nil && cfg.CA == nil {
		return nil, errors.New("egress: a vault needs the sandbox's CA")
	}
	s := &Controller{m: m, id: id, vault: cfg.Vault, ca: cfg.CA, cfg: cfg, learned: map[netip.Addr]learnedAddr{},
		answered: map[string]map[netip.Addr]time.Time{}, seen: map[netip.Addr][]string{},
		conns: map[*trackedConn]struct{}{}, onDemand: make(chan struct{}, maxOnDemand),
		blocked: map[netip.Addr]blockedAddr{}, resolved: map[string]time.Time{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.SetPolicy(cfg.Policy); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// Policy is the current compiled policy (nil: unrestricted).
func (s *Controller) Policy() *policy.Compiled { return s.pol.Load() }

// Vault is the sandbox's vault, nil without a credential proxy.
func (s *Controller) Vault() *vault.Vault { return s.vault }

// CA is the sandbox's own CA, nil without a credential proxy.
func (s *Controller) CA() *tproxy.CA { return s.ca }

// SetPolicy compiles p and makes it the sandbox's policy. In a container
// the firewall is replaced before SetPolicy returns (nftables: in one
// transaction; xtables: table by table, never looser than the new policy),
// so new connections follow the new policy at once, and then the
// established connections that the new policy denies are cut (see nft.Cut
// and xt.Table.Cut); the others are kept. Do's open connections that the
// new policy denies are closed.
func (s *Controller) SetPolicy(p *policy.Policy) error {
	var c *policy.Compiled
	if p != nil {
		var err error
		if c, err = policy.Compile(*p); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.remote != nil {
		// In force where the sandbox runs before it is the policy here.
		if err := s.pushLocked(p, s.vault); err != nil {
			return err
		}
		s.pol.Store(c)
		return nil
	}
	prev := s.pol.Swap(c)
	s.startBlockingLocked(c)
	// Do's pooled connections were decided by the old policy: a new
	// client makes the next request dial, and be decided, again.
	if old := s.client.Swap(s.newClient()); old != nil {
		old.CloseIdleConnections()
	}
	// Requests in flight to what the policy now denies fail.
	if n := s.cutConns(c); n > 0 {
		s.m.opts.Logger.Debug("connections cut by a policy change", "sandbox", s.id, "count", n)
	}
	if s.table == nil {
		s.blockedEntriesLocked(c) // forgets what c no longer blocks
		return nil
	}
	if err := s.applyLocked(); err != nil {
		// The firewall kept the previous policy (xtables: one that does
		// not fit), and so does the controller.
		s.pol.Store(prev)
		return err
	}
	s.cutLocked()
	return nil
}

// cutLocked ends the container's established connections that the current
// policy denies. The policy is in force whatever happens here, so a
// failure is logged, not returned.
func (s *Controller) cutLocked() {
	c := s.Policy()
	if c == nil {
		return
	}
	deny := func(a netip.Addr) bool { return !s.allowsLocked(c, a) }
	cut, err := s.table.Cut(deny)
	log := s.m.opts.Logger
	for _, f := range cut {
		log.Debug("connection cut by a policy change", "sandbox", s.id, "flow", f.String())
	}
	if err != nil {
		log.Error("cutting connections that the new policy denies", "sandbox", s.id, "err", err)
	}
	s.cutProxiedLocked(deny)
}

// cutProxiedLocked resets the credential proxy's connections to what
// deny refuses, where the firewall cannot: its filter sees them only at
// the proxy's address (natFirst).
func (s *Controller) cutProxiedLocked(deny func(netip.Addr) bool) {
	if _, ok := s.table.(natFirst); !ok || s.proxy == nil {
		return
	}
	if n := s.proxy.Cut(func(dst netip.AddrPort) bool { return deny(dst.Addr().Unmap()) }); n > 0 {
		s.m.opts.Logger.Debug("credential proxy connections cut by a policy change", "sandbox", s.id, "count", n)
	}
}

// allowsLocked decides an established connection to a under c: an IP rule
// that matches a decides; otherwise the names the sandbox's resolver
// answered with a (any one allowed keeps it); otherwise the default.
func (s *Controller) allowsLocked(c *policy.Compiled, a netip.Addr) bool {
	d := c.Addr(a)
	if d.Index >= 0 {
		return d.Allow
	}
	if _, ok := s.blockedBy(a); ok {
		return false
	}
	if names := s.seen[a.Unmap()]; len(names) > 0 {
		for _, n := range names {
			if c.Name(n).Allow {
				return true
			}
		}
		return false
	}
	return d.Allow
}

// rules is the firewall for the current policy.
func (s *Controller) rules() nft.Rules {
	c := s.Policy()
	r := nft.Rules{BypassMark: s.m.opts.Mark, GuardPorts: s.m.opts.GuardPorts}
	if c != nil {
		r.Enforce = true
		r.DefaultAllow = c.DefaultAllow()
		for _, ir := range c.IPRules() {
			r.IPRules = append(r.IPRules, nft.IPRule{Prefix: ir.Prefix, Allow: ir.Allow})
		}
	}
	if s.vault != nil {
		r.RedirectPort = ProxyPort
	}
	return r
}

// applyLocked replaces the firewall, keeping the learned addresses whose
// names the policy still allows.
func (s *Controller) applyLocked() error {
	c := s.Policy()
	now := time.Now()
	var keep []nft.Entry
	for a, l := range s.learned {
		if !now.Before(l.expires) || !c.Name(l.name).Allow {
			delete(s.learned, a)
			continue
		}
		keep = append(keep, nft.Entry{Addr: a, TTL: l.expires.Sub(now)})
	}
	r := s.rules()
	r.Blocked = s.blockedEntriesLocked(c)
	if err := s.table.Apply(r, keep); err != nil {
		return fmt.Errorf("egress firewall of sandbox %s: %w", s.id, err)
	}
	return nil
}

// decide is the DNS proxy's policy hook.
func (s *Controller) decide(name string) (bool, string) {
	d := s.Policy().Name(name)
	return d.Allow, d.Reason()
}

// learn is the DNS proxy's hook for the addresses of an allowed answer.
func (s *Controller) learn(name string, addrs []netip.Addr, ttl time.Duration) error {
	if ttl < minLearnTTL {
		ttl = minLearnTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table == nil {
		return errors.New("egress firewall is not installed")
	}
	exp := time.Now().Add(ttl)
	if s.learns++; s.learns%256 == 0 {
		s.pruneLocked(time.Now())
	}
	byName := s.answered[name]
	if byName == nil {
		byName = map[netip.Addr]time.Time{}
		s.answered[name] = byName
	}
	for a, e := range byName {
		if time.Now().After(e) {
			delete(byName, a)
		}
	}
	for _, a := range addrs {
		a = a.Unmap()
		byName[a] = exp
		s.rememberLocked(a, name)
	}
	for _, a := range addrs {
		if l, ok := s.learned[a]; ok && l.expires.After(exp) {
			continue
		}
		s.learned[a] = learnedAddr{name: name, expires: exp}
	}
	if err := s.table.Learn(addrs, ttl); err != nil {
		return err
	}
	if s.cfg.OnLearn != nil {
		s.cfg.OnLearn(name, addrs)
	}
	return nil
}

// rememberLocked records that a was answered for name in s.seen.
func (s *Controller) rememberLocked(a netip.Addr, name string) {
	names, ok := s.seen[a]
	if slices.Contains(names, name) {
		return
	}
	if !ok && len(s.seen) >= maxSeen {
		for old := range s.seen { // an arbitrary one
			delete(s.seen, old)
			break
		}
	}
	if len(names) >= maxSeenNames {
		names = names[1:]
	}
	s.seen[a] = append(names, name)
}

// pruneLocked forgets expired answers, so a workload resolving many names
// does not grow the maps without bound.
func (s *Controller) pruneLocked(now time.Time) {
	for a, l := range s.learned {
		if !now.Before(l.expires) {
			delete(s.learned, a)
		}
	}
	for name, addrs := range s.answered {
		for a, exp := range addrs {
			if !now.Before(exp) {
				delete(addrs, a)
			}
		}
		if len(addrs) == 0 {
			delete(s.answered, name)
		}
	}
}

// resolvesTo reports whether the sandbox's DNS proxy answered host with
// dst's address (and the answer has not expired), or host is dst's address.
func (s *Controller) resolvesTo(host string, dst netip.AddrPort) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap() == dst.Addr().Unmap()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.answered[strings.ToLower(strings.TrimSuffix(host, "."))][dst.Addr().Unmap()]
	return ok && time.Now().Before(exp)
}

// Enforce implements runtimes.Egress: it opens the DNS proxy's and the
// transparent proxy's sockets inside the namespace at nsPath, installs the
// firewall, and starts serving. Calling it again for the same namespace
// (a restore) replaces the sockets.
func (s *Controller) Enforce(ctx context.Context, nsPath string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("egress controller is closed")
	}
	s.stopLocked()
	if err := netns.Do(nsPath, loopbackUp); err != nil {
		return fmt.Errorf("egress: loopback of sandbox %s: %w", s.id, err)
	}
	udp, err := netns.ListenUDP(nsPath, DNSAddr)
	if err != nil {
		return fmt.Errorf("egress: DNS proxy of sandbox %s: %w", s.id, err)
	}
	tcp, err := netns.ListenTCP(nsPath, DNSAddr)
	if err != nil {
		udp.Close()
		return fmt.Errorf("egress: DNS proxy of sandbox %s: %w", s.id, err)
	}
	var pl net.Listener
	if s.vault != nil {
		if pl, err = netns.ListenTCP(nsPath, "127.0.0.1:"+strconv.Itoa(ProxyPort)); err != nil {
			udp.Close()
			tcp.Close()
			return fmt.Errorf("egress: credential proxy of sandbox %s: %w", s.id, err)
		}
	}
	closeAll := func() {
		udp.Close()
		tcp.Close()
		if pl != nil {
			pl.Close()
		}
	}
	table, err := s.m.opts.Firewall.Open(nsPath, s.m.opts.Logger.With("sandbox", s.id, "component", "firewall"))
	if err != nil {
		closeAll()
		return fmt.Errorf("egress: firewall of sandbox %s: %w", s.id, err)
	}
	s.table, s.nsPath = table, nsPath
	if err := s.applyLocked(); err != nil {
		closeAll()
		table.Close()
		s.table = nil
		return err
	}
	dns, err := dnsproxy.New(dnsproxy.Config{
		Upstreams: s.m.opts.DNSUpstreams, Decide: s.decide, Learn: s.learn, Denied: s.onDenied, Dialer: s.m.dialer,
		Logger: s.m.opts.Logger.With("sandbox", s.id, "component", "dns"),
	})
	if err != nil {
		closeAll()
		return err
	}
	s.dns = dns
	go func() {
		if err := dns.Serve(udp, tcp); err != nil {
			s.m.opts.Logger.Debug("dns proxy stopped", "sandbox", s.id, "err", err)
		}
	}()
	if pl != nil {
		if err := s.serveProxyLocked(pl); err != nil {
			closeAll()
			return err
		}
	}
	return nil
}

// serveProxyLocked starts the credential proxy on pl (which the caller
// closes when this fails).
func (s *Controller) serveProxyLocked(pl net.Listener) error {
	p, err := s.newProxy()
	if err != nil {
		return err
	}
	s.proxy = p
	go func() {
		if err := p.Serve(pl); err != nil {
			s.m.opts.Logger.Debug("credential proxy stopped", "sandbox", s.id, "err", err)
		}
	}()
	return nil
}

// useVault gives the controller the credential vault v and CA ca of a
// state pushed to its agent. A controller made without a vault (a pool
// member's agent, which gets its sandbox's vault at claim) starts its
// credential proxy in the namespace it enforces and then redirects to it;
// one that has a vault takes v's content (vault.Replace).
//
// # Errors
// When ca is nil, or the proxy or the firewall cannot be set up; the
// controller then has no vault, as before.
func (s *Controller) useVault(v *vault.Vault, ca *tproxy.CA) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vault != nil {
		s.vault.Replace(v)
		return nil
	}
	if ca == nil {
		return errors.New("egress: a vault needs the sandbox's CA")
	}
	if s.closed {
		return errors.New("egress controller is closed")
	}
	s.vault, s.ca = v, ca
	if s.table == nil || s.remote != nil {
		return nil // enforced by Enforce, or elsewhere
	}
	undo := func() {
		if s.proxy != nil {
			_ = s.proxy.Close()
			s.proxy = nil
		}
		s.vault, s.ca = nil, nil
	}
	// The proxy listens before the firewall sends connections to it.
	pl, err := netns.ListenTCP(s.nsPath, "127.0.0.1:"+strconv.Itoa(ProxyPort))
	if err != nil {
		undo()
		return fmt.Errorf("egress: credential proxy of sandbox %s: %w", s.id, err)
	}
	if err := s.serveProxyLocked(pl); err != nil {
		pl.Close()
		undo()
		return err
	}
	if err := s.applyLocked(); err != nil {
		undo()
		return errors.Join(err, s.applyLocked())
	}
	return nil
}

// Install applies the firewall of the current policy in the namespace at
// nsPath and returns, serving nothing: the first step of an enforcer that
// must fence the namespace before the workload starts (hybox-egress init,
// a Pod's init container), before the process that serves the proxies
// (Enforce) runs. Until then names do not resolve, and connections the
// credential proxy would take are refused: the workload is fenced, never
// unfenced.
func (s *Controller) Install(nsPath string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	table, err := s.m.opts.Firewall.Open(nsPath, s.m.opts.Logger.With("sandbox", s.id, "component", "firewall"))
	if err != nil {
		return fmt.Errorf("egress: firewall of sandbox %s: %w", s.id, err)
	}
	defer table.Close()
	s.table, s.nsPath = table, nsPath
	defer func() { s.table = nil }()
	return s.applyLocked()
}

// stopLocked stops the proxies (the firewall stays in the namespace).
func (s *Controller) stopLocked() {
	if s.dns != nil {
		_ = s.dns.Close()
		s.dns = nil
	}
	if s.proxy != nil {
		_ = s.proxy.Close()
		s.proxy = nil
	}
	if s.table != nil {
		_ = s.table.Close()
		s.table = nil
	}
}

// Close stops serving the sandbox. The firewall goes with the namespace.
func (s *Controller) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cancel()
	s.stopLocked()
	s.client.Load().CloseIdleConnections()
	return nil
}

// Files implements runtimes.Egress.
func (s *Controller) Files() map[string][]byte {
	f := map[string][]byte{
		resolvConfPath: []byte("# hybox: the sandbox's resolver applies its egress policy\nnameserver 127.0.0.53\noptions edns0\n"),
	}
	if s.ca != nil {
		ca := s.ca.CertPEM()
		bundle := append(append([]byte{}, s.m.opts.SystemBundle...), '\n')
		f[bundlePath] = append(bundle, ca...)
		f[caPath] = ca
	}
	return f
}

// Env implements runtimes.Egress.
func (s *Controller) Env() map[string]string {
	if s.ca == nil {
		return nil
	}
	return map[string]string{
		"SSL_CERT_FILE":       bundlePath,
		"REQUESTS_CA_BUNDLE":  bundlePath,
		"CURL_CA_BUNDLE":      bundlePath,
		"PIP_CERT":            bundlePath,
		"AWS_CA_BUNDLE":       bundlePath,
		"NODE_EXTRA_CA_CERTS": caPath,
	}
}
