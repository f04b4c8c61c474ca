package egress

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// zoneText is what the test upstream resolver answers. Only the loopback
// names are ever connected to; the others are decided, never dialled.
const zoneText = `
ok.test.        300 IN A    127.0.0.1
other.test.     300 IN A    127.0.0.1
pub.test.       300 IN A    192.0.2.1
pub.test.       300 IN AAAA 2001:db8::1
mixed.test.     300 IN A    127.0.0.1
mixed.test.     300 IN A    192.0.2.1
ll.test.        300 IN A    169.254.1.1
v6local.test.   300 IN AAAA ::1
x.cdn.test.     300 IN A    192.0.2.9
`

// startZone serves zoneText authoritatively on a random loopback port
// (UDP and TCP) and returns its address.
func startZone(t testing.TB) string {
	t.Helper()
	records := map[string][]dns.RR{}
	zp := dns.NewZoneParser(strings.NewReader(zoneText), "", "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		records[rr.Header().Name] = append(records[rr.Header().Name], rr)
	}
	require.NoError(t, zp.Err())
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		if len(req.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			_ = w.WriteMsg(m)
			return
		}
		q := req.Question[0]
		rrs, known := records[strings.ToLower(q.Name)]
		if !known {
			m.Rcode = dns.RcodeNameError
		}
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})

	var pc net.PacketConn
	var l net.Listener
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	require.NotNil(t, pc, "no loopback port free for both UDP and TCP")
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: l, Handler: handler}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// env is a Manager on the test zone and the loopback servers it reaches.
type env struct {
	m        *Manager
	zone     string
	upstream *tproxy.CA // signs the TLS server's certificates
	http     *recorder  // plain HTTP server
	tls      *recorder  // HTTPS server, a certificate for any name
}

// recorder is a loopback test server that records its requests' headers.
// Routes: /redirect answers 302 to the URL in ?to=; every other path
// answers 200 with its path as body, echoing the request's Authorization
// in the X-Echo header and the X-Echo-Trailer trailer.
type recorder struct {
	*httptest.Server
	port string

	mu   sync.Mutex
	seen []*http.Request
}

func newRecorder(t testing.TB, ca *tproxy.CA) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if ca != nil {
		r.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.Leaf(hello.ServerName)
		}}
		r.StartTLS()
	} else {
		r.Start()
	}
	t.Cleanup(r.Close)
	_, r.port, _ = net.SplitHostPort(r.Listener.Addr().String())
	return r
}

func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.seen = append(r.seen, req.Clone(req.Context()))
	r.mu.Unlock()
	if req.URL.Path == "/redirect" {
		w.Header().Set("Location", req.URL.Query().Get("to"))
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("Trailer", "X-Echo-Trailer")
	w.Header().Set("X-Echo", req.Header.Get("Authorization"))
	io.WriteString(w, req.URL.Path)
	w.Header().Set("X-Echo-Trailer", req.Header.Get("Authorization"))
}

// requests returns the requests received so far.
func (r *recorder) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.seen...)
}

// url is the server's URL for host and path.
func (r *recorder) url(host, path string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, r.port) + path
}

func newEnv(t testing.TB) *env { return newEnvFirewall(t, nil) }

// newEnvFirewall is newEnv with the controllers' firewall programmed
// through fw (nil: NFTables).
func newEnvFirewall(t testing.TB, fw FirewallBackend) *env {
	t.Helper()
	up, err := tproxy.NewCA("hybox egress test upstream")
	require.NoError(t, err)
	e := &env{zone: startZone(t), upstream: up, http: newRecorder(t, nil), tls: newRecorder(t, up)}
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	e.m, err = NewManager(Options{DNSUpstreams: []string{e.zone}, RootCAs: roots, SystemBundle: []byte("# system bundle\n"), Firewall: fw})
	require.NoError(t, err)
	return e
}

// firewalls are the backends the namespace tests run over: nftables, and
// xtables in Linux's own iptables (gVisor's netstack is the cluster
// tests').
var firewalls = []FirewallBackend{NFTables, XTables}

// sandbox returns a controller for cfg, closed when t ends.
func (e *env) sandbox(t testing.TB, cfg Config) *Controller {
	t.Helper()
	s, err := e.m.New("test", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// get makes a GET through s and returns the response with its body read.
func get(t testing.TB, s *Controller, rawURL string) (*http.Response, string, error) {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	require.NoError(t, err)
	resp, err := s.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b), nil
}

// pol builds a policy from "allow x" / "deny y" rules; def is the default
// action ("" denies).
func pol(def policy.Action, rules ...string) *policy.Policy {
	p := &policy.Policy{DefaultAction: def, Egress: []policy.Rule{}}
	for _, r := range rules {
		action, target, _ := strings.Cut(r, " ")
		p.Egress = append(p.Egress, policy.Rule{Action: policy.Action(action), Target: target})
	}
	return p
}
