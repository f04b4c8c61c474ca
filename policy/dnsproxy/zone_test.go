package dnsproxy

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"
)

// zoneText is the authoritative test zone the upstream serves.
const zoneText = `
allowed.test.            300 IN A     192.0.2.1
allowed.test.             60 IN AAAA  2001:db8::1
wild.test.               300 IN A     192.0.2.3
www.wild.test.           300 IN A     192.0.2.2
a.b.wild.test.           300 IN A     192.0.2.6
alias.test.              600 IN CNAME mid.test.
mid.test.                120 IN CNAME target.test.
target.test.              30 IN A     192.0.2.4
target.test.              45 IN A     192.0.2.40
evil-alias.test.         600 IN CNAME blocked.test.
blocked.test.            300 IN A     192.0.2.5
denied.test.             300 IN A     192.0.2.7
txt.test.                300 IN TXT   "hello"
1.2.0.192.in-addr.arpa.  300 IN PTR   allowed.test.
5.2.0.192.in-addr.arpa.  300 IN PTR   blocked.test.
`

// bigName has bigCount A records; over UDP the zone always answers it
// truncated, so a resolver has to retry over TCP.
const (
	bigName  = "big.test."
	bigCount = 40
)

// testZone is an authoritative DNS server for zoneText on loopback, UDP and
// TCP on the same port. It records the queries it receives.
type testZone struct {
	addr    string
	records map[string][]dns.RR // lowercase owner → records

	mu      sync.Mutex
	queries []string // "udp big.test." etc.
}

func startZone(t testing.TB) *testZone {
	t.Helper()
	z := &testZone{records: make(map[string][]dns.RR)}
	zp := dns.NewZoneParser(strings.NewReader(zoneText), "", "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		n := strings.ToLower(rr.Header().Name)
		z.records[n] = append(z.records[n], rr)
	}
	require.NoError(t, zp.Err())
	for i := range bigCount {
		rr, err := dns.NewRR(bigName + " 300 IN A 198.51.100." + strconv.Itoa(i+1))
		require.NoError(t, err)
		z.records[bigName] = append(z.records[bigName], rr)
	}

	pc, l := listenPair(t)
	z.addr = pc.LocalAddr().String()
	for _, s := range []*dns.Server{{PacketConn: pc}, {Listener: l}} {
		started := make(chan struct{})
		s.Handler = dns.HandlerFunc(z.serve)
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return z
}

// listenPair opens UDP and TCP sockets on the same random loopback port.
func listenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close()
	}
	t.Fatal("no free UDP+TCP port pair on 127.0.0.1")
	return nil, nil
}

func (z *testZone) serve(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	network := w.LocalAddr().Network()
	z.mu.Lock()
	z.queries = append(z.queries, network+" "+name)
	z.mu.Unlock()

	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if o := req.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), false)
	}
	if name == bigName && network == "udp" {
		m.Truncated = true
		_ = w.WriteMsg(m)
		return
	}
	// Follow CNAMEs inside the zone, like a resolver would.
	for range 8 {
		rrs, ok := z.records[name]
		if !ok {
			if len(m.Answer) == 0 {
				m.Rcode = dns.RcodeNameError
			}
			break
		}
		next := ""
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			} else if c, ok := rr.(*dns.CNAME); ok {
				m.Answer = append(m.Answer, c)
				next = strings.ToLower(c.Target)
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	_ = w.WriteMsg(m)
}

// saw reports whether the zone received a query for name over network.
func (z *testZone) saw(network, name string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, q := range z.queries {
		if q == network+" "+name {
			return true
		}
	}
	return false
}

// blackhole is an upstream that reads queries and never answers.
func blackhole(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().String()
}

// deadAddr is a loopback address where nothing listens (UDP gets ICMP
// port unreachable, TCP gets RST).
func deadAddr(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// query sends one question to addr over network ("udp"/"tcp"), with EDNS0
// when edns is true.
func query(t testing.TB, network, addr, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(4096, false)
	}
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	resp, _, err := c.Exchange(m, addr)
	require.NoError(t, err)
	require.Equal(t, m.Id, resp.Id)
	return resp
}
