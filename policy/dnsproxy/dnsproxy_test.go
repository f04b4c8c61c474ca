package dnsproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
)

// testPolicy allows the zone's good names; blocked.test is denied by an
// explicit rule, everything else by the default.
var testPolicy = policy.Policy{DefaultAction: policy.Deny, Egress: []policy.Rule{
	{Action: policy.Allow, Target: "allowed.test"},
	{Action: policy.Deny, Target: "blocked.test"},
	{Action: policy.Allow, Target: "*.wild.test"},
	{Action: policy.Allow, Target: "alias.test"},
	{Action: policy.Allow, Target: "mid.test"},
	{Action: policy.Allow, Target: "target.test"},
	{Action: policy.Allow, Target: "evil-alias.test"},
	{Action: policy.Allow, Target: "big.test"},
	{Action: policy.Allow, Target: "txt.test"},
	{Action: policy.Allow, Target: "1.2.0.192.in-addr.arpa"},
}}

// learned is one Learn call.
type learned struct {
	name  string
	addrs []netip.Addr
	ttl   time.Duration
	at    time.Time
}

// harness is a proxy in front of a test zone, with a switchable policy and
// a record of Learn calls.
type harness struct {
	zone    *testZone
	udp     string // proxy UDP address
	tcp     string // proxy TCP address
	proxy   *Proxy
	pol     atomic.Pointer[policy.Compiled]
	learnFn atomic.Pointer[func(string, []netip.Addr, time.Duration) error]

	mu      sync.Mutex
	learned []learned
	decided []string
}

type option func(*Config)

func startProxy(t testing.TB, upstreams []string, opts ...option) *harness {
	t.Helper()
	h := &harness{}
	c, err := policy.Compile(testPolicy)
	require.NoError(t, err)
	h.pol.Store(c)
	cfg := Config{
		Upstreams: upstreams,
		Decide: func(name string) (bool, string) {
			h.mu.Lock()
			h.decided = append(h.decided, name)
			h.mu.Unlock()
			d := h.pol.Load().Name(name)
			return d.Allow, d.Reason()
		},
		Learn: func(name string, addrs []netip.Addr, ttl time.Duration) error {
			h.mu.Lock()
			h.learned = append(h.learned, learned{name, addrs, ttl, time.Now()})
			h.mu.Unlock()
			if fn := h.learnFn.Load(); fn != nil {
				return (*fn)(name, addrs, ttl)
			}
			return nil
		},
		Timeout: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.proxy, err = New(cfg)
	require.NoError(t, err)

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.udp, h.tcp = pc.LocalAddr().String(), l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- h.proxy.Serve(pc, l) }()
	t.Cleanup(func() {
		require.NoError(t, h.proxy.Close())
		require.NoError(t, <-served)
	})
	return h
}

func withZone(t testing.TB, opts ...option) *harness {
	t.Helper()
	z := startZone(t)
	h := startProxy(t, []string{z.addr}, opts...)
	h.zone = z
	return h
}

func (h *harness) learnCalls() []learned {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]learned(nil), h.learned...)
}

// ede returns the Extended DNS Error of m, if any.
func ede(m *dns.Msg) *dns.EDNS0_EDE {
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if x, ok := e.(*dns.EDNS0_EDE); ok {
				return x
			}
		}
	}
	return nil
}

func addrsOf(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		}
	}
	return out
}

func TestAllowed(t *testing.T) {
	h := withZone(t)
	resp := query(t, "udp", h.udp, "Allowed.TEST.", dns.TypeA, true)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	assert.Equal(t, []string{"192.0.2.1"}, addrsOf(resp))
	assert.True(t, resp.RecursionAvailable)
	assert.Equal(t, "Allowed.TEST.", resp.Question[0].Name, "the client's question is echoed")
	require.NotNil(t, resp.IsEdns0())
	assert.Nil(t, ede(resp))

	resp = query(t, "udp", h.udp, "allowed.test.", dns.TypeAAAA, false)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	assert.Equal(t, []string{"2001:db8::1"}, addrsOf(resp))
	assert.Nil(t, resp.IsEdns0(), "no OPT for a client without EDNS0")

	calls := h.learnCalls()
	require.Len(t, calls, 2)
	assert.Equal(t, "allowed.test", calls[0].name)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.1")}, calls[0].addrs)
	assert.Equal(t, 300*time.Second, calls[0].ttl)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("2001:db8::1")}, calls[1].addrs)
	assert.Equal(t, 60*time.Second, calls[1].ttl)

	// Non-address answers are relayed without a Learn call.
	resp = query(t, "udp", h.udp, "txt.test.", dns.TypeTXT, true)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	require.Len(t, resp.Answer, 1)
	assert.Len(t, h.learnCalls(), 2)

	// Upstream NXDOMAIN for an allowed name is relayed.
	h.pol.Store(mustCompile(t, policy.Policy{DefaultAction: policy.Allow}))
	resp = query(t, "udp", h.udp, "nosuch.test.", dns.TypeA, true)
	assert.Equal(t, dns.RcodeNameError, resp.Rcode)
	assert.Nil(t, ede(resp))
	assert.True(t, h.zone.saw("udp", "nosuch.test."))
}

func mustCompile(t testing.TB, p policy.Policy) *policy.Compiled {
	t.Helper()
	c, err := policy.Compile(p)
	require.NoError(t, err)
	return c
}

func TestDenied(t *testing.T) {
	h := withZone(t)
	tests := []struct {
		name   string
		reason string
	}{
		{"denied.test.", "denied by the default action (deny)"},
		{"BLOCKED.test.", "denied by rule 1 (deny blocked.test)"},
		{"wild.test.", "denied by the default action (deny)"}, // apex not covered by *.wild.test
		{"5.2.0.192.in-addr.arpa.", "denied by the default action (deny)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := query(t, "udp", h.udp, tt.name, dns.TypeA, true)
			assert.Equal(t, dns.RcodeNameError, resp.Rcode)
			assert.Empty(t, resp.Answer)
			e := ede(resp)
			require.NotNil(t, e, "EDE attached for an EDNS0 client")
			assert.Equal(t, dns.ExtendedErrorCodeBlocked, e.InfoCode)
			assert.Equal(t, tt.reason, e.ExtraText)

			resp = query(t, "tcp", h.tcp, tt.name, dns.TypeA, false)
			assert.Equal(t, dns.RcodeNameError, resp.Rcode)
			assert.Nil(t, resp.IsEdns0(), "no OPT (and no EDE) without client EDNS0")
		})
	}
	for _, tt := range tests {
		assert.False(t, h.zone.saw("udp", dns.CanonicalName(tt.name)), "no upstream query for %s", tt.name)
		assert.False(t, h.zone.saw("tcp", dns.CanonicalName(tt.name)), "no upstream query for %s", tt.name)
	}
	assert.Empty(t, h.learnCalls())
}

func TestWildcardAndPTR(t *testing.T) {
	h := withZone(t)
	for name, want := range map[string]string{
		"www.wild.test.": "192.0.2.2",
		"a.b.wild.test.": "192.0.2.6",
	} {
		resp := query(t, "udp", h.udp, name, dns.TypeA, true)
		require.Equal(t, dns.RcodeSuccess, resp.Rcode, name)
		assert.Equal(t, []string{want}, addrsOf(resp), name)
	}
	resp := query(t, "udp", h.udp, "1.2.0.192.in-addr.arpa.", dns.TypePTR, true)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	require.Len(t, resp.Answer, 1)
	assert.Equal(t, "allowed.test.", resp.Answer[0].(*dns.PTR).Ptr)
}

func TestCNAME(t *testing.T) {
	h := withZone(t)
	resp := query(t, "udp", h.udp, "alias.test.", dns.TypeA, true)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	assert.Len(t, resp.Answer, 4)
	assert.ElementsMatch(t, []string{"192.0.2.4", "192.0.2.40"}, addrsOf(resp))
	calls := h.learnCalls()
	require.Len(t, calls, 1)
	assert.Equal(t, "alias.test", calls[0].name)
	assert.ElementsMatch(t, []netip.Addr{netip.MustParseAddr("192.0.2.4"), netip.MustParseAddr("192.0.2.40")}, calls[0].addrs)
	assert.Equal(t, 30*time.Second, calls[0].ttl, "smallest TTL among the addresses")

	// A chain through a denied name is refused, although the queried name is allowed.
	resp = query(t, "udp", h.udp, "evil-alias.test.", dns.TypeA, true)
	assert.Equal(t, dns.RcodeNameError, resp.Rcode)
	assert.Empty(t, resp.Answer)
	e := ede(resp)
	require.NotNil(t, e)
	assert.Equal(t, dns.ExtendedErrorCodeBlocked, e.InfoCode)
	assert.Equal(t, "via CNAME: blocked.test denied by rule 1 (deny blocked.test)", e.ExtraText)
	assert.Len(t, h.learnCalls(), 1, "no Learn for a refused chain")

	// The middle of a chain matters too.
	h.pol.Store(mustCompile(t, policy.Remove(testPolicy, []string{"mid.test"})))
	resp = query(t, "udp", h.udp, "alias.test.", dns.TypeA, true)
	assert.Equal(t, dns.RcodeNameError, resp.Rcode)
	assert.Equal(t, "via CNAME: mid.test denied by the default action (deny)", ede(resp).ExtraText)
}

func TestPolicyIsDynamic(t *testing.T) {
	h := withZone(t)
	require.Equal(t, dns.RcodeSuccess, query(t, "udp", h.udp, "allowed.test.", dns.TypeA, true).Rcode)
	h.pol.Store(mustCompile(t, policy.Patch(testPolicy, []policy.Rule{{Action: policy.Deny, Target: "allowed.test"}})))
	assert.Equal(t, dns.RcodeNameError, query(t, "udp", h.udp, "allowed.test.", dns.TypeA, true).Rcode)
	h.pol.Store(mustCompile(t, policy.Policy{DefaultAction: policy.Allow}))
	assert.Equal(t, dns.RcodeSuccess, query(t, "udp", h.udp, "denied.test.", dns.TypeA, true).Rcode)
}

func TestLearnBeforeAnswer(t *testing.T) {
	h := withZone(t)
	const delay = 150 * time.Millisecond
	fn := func(string, []netip.Addr, time.Duration) error { time.Sleep(delay); return nil }
	h.learnFn.Store(&fn)

	m := new(dns.Msg)
	m.SetQuestion("allowed.test.", dns.TypeA)
	start := time.Now()
	resp, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, h.udp)
	require.NoError(t, err)
	answered := time.Now()
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	calls := h.learnCalls()
	require.Len(t, calls, 1, "Learn ran before the answer arrived")
	assert.True(t, calls[0].at.Before(answered))
	assert.GreaterOrEqual(t, answered.Sub(start), delay, "the answer waited for Learn")
}

func TestLearnFailure(t *testing.T) {
	h := withZone(t)
	fn := func(string, []netip.Addr, time.Duration) error { return errors.New("nft: no room") }
	h.learnFn.Store(&fn)
	resp := query(t, "udp", h.udp, "allowed.test.", dns.TypeA, true)
	assert.Equal(t, dns.RcodeServerFailure, resp.Rcode)
	assert.Empty(t, resp.Answer)
}

func TestUpstreamFailure(t *testing.T) {
	z := startZone(t)
	t.Run("all down", func(t *testing.T) {
		h := startProxy(t, []string{deadAddr(t), deadAddr(t)})
		start := time.Now()
		resp := query(t, "udp", h.udp, "allowed.test.", dns.TypeA, true)
		assert.Equal(t, dns.RcodeServerFailure, resp.Rcode)
		// Refused, not timed out: a timeout would take the proxy's
		// DefaultTimeout per upstream.
		assert.Less(t, time.Since(start), DefaultTimeout, "refused upstreams fail without waiting for the timeout")
		require.NotNil(t, ede(resp))
		assert.Equal(t, dns.ExtendedErrorCodeNetworkError, ede(resp).InfoCode)
	})
	t.Run("first refuses", func(t *testing.T) {
		h := startProxy(t, []string{deadAddr(t), z.addr})
		resp := query(t, "udp", h.udp, "allowed.test.", dns.TypeA, true)
		require.Equal(t, dns.RcodeSuccess, resp.Rcode)
		assert.Equal(t, []string{"192.0.2.1"}, addrsOf(resp))
	})
	t.Run("first times out", func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		h := startProxy(t, []string{blackhole(t), z.addr}, func(c *Config) { c.Timeout = timeout })
		start := time.Now()
		resp := query(t, "udp", h.udp, "allowed.test.", dns.TypeA, true)
		took := time.Since(start)
		require.Equal(t, dns.RcodeSuccess, resp.Rcode)
		assert.Equal(t, []string{"192.0.2.1"}, addrsOf(resp))
		assert.GreaterOrEqual(t, took, timeout)
		assert.Less(t, took, 2*time.Second)
	})
	t.Run("timeout only", func(t *testing.T) {
		h := startProxy(t, []string{blackhole(t)}, func(c *Config) { c.Timeout = 100 * time.Millisecond })
		resp := query(t, "tcp", h.tcp, "allowed.test.", dns.TypeA, false)
		assert.Equal(t, dns.RcodeServerFailure, resp.Rcode)
	})
}

func TestTCP(t *testing.T) {
	h := withZone(t)
	resp := query(t, "tcp", h.tcp, "alias.test.", dns.TypeA, true)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	assert.ElementsMatch(t, []string{"192.0.2.4", "192.0.2.40"}, addrsOf(resp))
}

func TestTruncationFallback(t *testing.T) {
	h := withZone(t)
	// The zone truncates big.test over UDP: the proxy must retry over TCP.
	resp := query(t, "udp", h.udp, bigName, dns.TypeA, true)
	require.Equal(t, dns.RcodeSuccess, resp.Rcode)
	assert.False(t, resp.Truncated)
	assert.Len(t, addrsOf(resp), bigCount)
	assert.True(t, h.zone.saw("udp", bigName))
	assert.True(t, h.zone.saw("tcp", bigName))
	calls := h.learnCalls()
	require.Len(t, calls, 1)
	assert.Len(t, calls[0].addrs, bigCount)

	// A client without EDNS0 gets a 512-byte answer with TC set, then
	// retries over TCP and gets everything.
	resp = query(t, "udp", h.udp, bigName, dns.TypeA, false)
	assert.True(t, resp.Truncated)
	assert.Less(t, len(addrsOf(resp)), bigCount)
	resp = query(t, "tcp", h.tcp, bigName, dns.TypeA, false)
	assert.False(t, resp.Truncated)
	assert.Len(t, addrsOf(resp), bigCount)
}

func TestFormErr(t *testing.T) {
	h := withZone(t)
	c := &dns.Client{Timeout: 2 * time.Second}
	for _, tc := range []struct {
		name string
		qs   []dns.Question
	}{
		{"no question", nil},
		{"two questions", []dns.Question{
			{Name: "allowed.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
			{Name: "denied.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, edns := range []bool{false, true} {
				m := new(dns.Msg)
				m.Id = dns.Id()
				m.RecursionDesired = true
				m.Question = tc.qs
				if edns {
					m.SetEdns0(4096, false)
				}
				resp, _, err := c.Exchange(m, h.udp)
				require.NoError(t, err)
				assert.Equal(t, dns.RcodeFormatError, resp.Rcode)
				assert.Empty(t, resp.Answer)
				assert.Equal(t, edns, resp.IsEdns0() != nil)
			}
		})
	}
	h.mu.Lock()
	assert.Empty(t, h.decided, "no decision for a malformed query")
	h.mu.Unlock()

	// Other opcodes are not implemented.
	m := new(dns.Msg)
	m.SetNotify("allowed.test.")
	resp, _, err := c.Exchange(m, h.udp)
	require.NoError(t, err)
	assert.Equal(t, dns.RcodeNotImplemented, resp.Rcode)
}

func TestConfigValidation(t *testing.T) {
	decide := func(string) (bool, string) { return true, "" }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Decide: decide}, "dnsproxy: no upstream resolvers"},
		{Config{Upstreams: []string{"1.1.1.1"}, Decide: decide}, `dnsproxy: upstream "1.1.1.1": want host:port: address 1.1.1.1: missing port in address`},
		{Config{Upstreams: []string{"127.0.0.1:53"}}, "dnsproxy: Decide is required"},
		{Config{Upstreams: []string{"127.0.0.1:53"}, Decide: decide, Timeout: -1}, "dnsproxy: negative timeout -1ns"},
	} {
		_, err := New(tc.cfg)
		require.Error(t, err)
		assert.Equal(t, tc.want, err.Error())
	}
}

func TestServeAndClose(t *testing.T) {
	p, err := New(Config{Upstreams: []string{"127.0.0.1:53"}, Decide: func(string) (bool, string) { return false, "no" }})
	require.NoError(t, err)
	require.Error(t, p.Serve(nil, nil))

	// UDP only.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- p.Serve(pc, nil) }()
	resp := query(t, "udp", pc.LocalAddr().String(), "x.test.", dns.TypeA, false)
	assert.Equal(t, dns.RcodeNameError, resp.Rcode)

	require.NoError(t, p.Close())
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	_, err = pc.WriteTo([]byte{0}, pc.LocalAddr())
	assert.ErrorIs(t, err, net.ErrClosed, "Close closes the socket")
	require.NoError(t, p.Close(), "Close twice")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	assert.ErrorIs(t, p.Serve(nil, l), ErrClosed)
	_, err = l.Accept()
	assert.ErrorIs(t, err, net.ErrClosed)

	// Close right after Serve starts (race with startup).
	p2, err := New(Config{Upstreams: []string{"127.0.0.1:53"}, Decide: func(string) (bool, string) { return true, "" }})
	require.NoError(t, err)
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { served <- p2.Serve(nil, l2) }()
	require.NoError(t, p2.Close())
	select {
	case err := <-served:
		if err != nil {
			assert.ErrorIs(t, err, ErrClosed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
}

// latencies collects per-query round-trip times for percentile metrics.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	p := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))].Microseconds()) }
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
}

func benchQuery(b *testing.B, addr, name string, want int) {
	co, err := dns.Dial("udp", addr)
	require.NoError(b, err)
	defer co.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Timeout: 5 * time.Second}
	var lat latencies
	for b.Loop() {
		m.Id = dns.Id()
		resp, rtt, err := c.ExchangeWithConn(m, co)
		if err != nil {
			b.Fatal(err)
		}
		if resp.Rcode != want {
			b.Fatalf("rcode %s", dns.RcodeToString[resp.Rcode])
		}
		lat = append(lat, rtt)
	}
	lat.report(b)
}

// BenchmarkDecision is a denied query's round trip (no upstream involved).
func BenchmarkDecision(b *testing.B) {
	h := withZone(b)
	benchQuery(b, h.udp, "denied.test.", dns.RcodeNameError)
}

// BenchmarkForward is an allowed query's round trip through the proxy to
// the loopback test zone, Learn included.
func BenchmarkForward(b *testing.B) {
	h := withZone(b)
	benchQuery(b, h.udp, "alias.test.", dns.RcodeSuccess)
}

func TestDeniedHook(t *testing.T) {
	var mu sync.Mutex
	var denied []string
	h := withZone(t, func(c *Config) {
		c.Denied = func(name string) {
			mu.Lock()
			denied = append(denied, name)
			mu.Unlock()
		}
	})
	for _, name := range []string{"allowed.test.", "BLOCKED.test.", "evil-alias.test.", "www.wild.test."} {
		query(t, "udp", h.udp, name, dns.TypeA, true)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"blocked.test", "blocked.test"}, denied, "the refused name, directly or at the end of a CNAME chain")
}

func TestLookup(t *testing.T) {
	z := startZone(t)
	// A closed port first: the lookup moves on to the next upstream.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := pc.LocalAddr().String()
	pc.Close()
	ups := []string{dead, z.addr}
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		addrs []string
		ttl   time.Duration
	}{
		{"allowed.test", []string{"192.0.2.1", "2001:db8::1"}, 60 * time.Second},
		{"Alias.test.", []string{"192.0.2.4", "192.0.2.40"}, 30 * time.Second},
		{"nowhere.test", nil, 0},
	} {
		addrs, ttl, err := Lookup(ctx, nil, ups, tt.name, time.Second)
		require.NoError(t, err, tt.name)
		var got []string
		for _, a := range addrs {
			got = append(got, a.String())
		}
		assert.ElementsMatch(t, tt.addrs, got, tt.name)
		assert.Equal(t, tt.ttl, ttl, tt.name)
	}
	_, _, err = Lookup(ctx, nil, []string{dead}, "allowed.test", time.Second)
	assert.ErrorContains(t, err, dead, "every upstream failed")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = Lookup(cctx, nil, ups, "allowed.test", time.Second)
	assert.Error(t, err)
}
