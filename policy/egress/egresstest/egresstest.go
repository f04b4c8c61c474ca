// Package egresstest gives egress tests a small private internet: an
// "upstream" network namespace joined to the host by a veth pair, with
// HTTP, HTTPS, DNS and DNS-over-HTTPS servers listening inside it, and an
// authoritative DNS zone on the host's loopback that names them. Container
// sandboxes reach the upstream namespace through the host's routing, wasm
// guests through the server's own requests; nothing leaves the machine.
package egresstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/hybox-dev/hybox/internal/netns"
)

// Net is a running upstream network.
type Net struct {
	// Subnet is the upstream network, 10.233.N.0/24.
	Subnet netip.Prefix
	// Allowed, Denied, Bound and Other are upstream addresses: the tests'
	// names resolve to them (see Zone).
	Allowed, Denied, Bound, Other netip.Addr
	// DNSAddr is the authoritative zone on the host's loopback: give it
	// to the server as its DNS upstream.
	DNSAddr string
	// CAPEM is the upstream servers' CA; CAFile holds it on disk.
	CAPEM  []byte
	CAFile string
	Roots  *x509.CertPool
	// NSPath is the upstream namespace.
	NSPath string

	mu       sync.Mutex
	requests []Request
}

// Request is what an upstream HTTP(S) server saw.
type Request struct {
	Scheme, Host, Method, Path string
	Header                     http.Header
}

// Names the zone answers, and what they resolve to.
const (
	// AllowedName resolves to Allowed.
	AllowedName = "allowed.test"
	// DeniedName resolves to Denied.
	DeniedName = "denied.test"
	// BoundName resolves to Bound (the tests bind a credential to it).
	BoundName = "api.bound.test"
	// WildApex is wild.test (Other); every *.wild.test resolves to Allowed.
	WildApex = "wild.test"
	// AliasName is a CNAME to DeniedName.
	AliasName = "alias.test"
)

// SecretEcho is the response header in which upstream servers echo the
// Authorization header they received (to test redaction).
const SecretEcho = "X-Echo-Authorization"

// Start builds the network and its servers; t.Cleanup removes them. It
// needs root (namespaces, veth, routes).
func Start(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: egress tests build a network namespace, a veth pair and routes")
	}
	n := mrand.IntN(200) + 20
	suffix := fmt.Sprintf("%x", mrand.Uint32())
	ns := "hybox-up-" + suffix
	hostIf, peerIf := "hyu"+suffix, "hyp"+suffix
	sub := netip.MustParsePrefix(fmt.Sprintf("10.233.%d.0/24", n))
	ip := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{10, 233, byte(n), i}) }
	nt := &Net{Subnet: sub, Allowed: ip(1), Denied: ip(2), Bound: ip(3), Other: ip(4), NSPath: "/run/netns/" + ns}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	run("ip", "link", "add", hostIf, "type", "veth", "peer", "name", peerIf, "netns", ns)
	run("ip", "addr", "add", ip(254).String()+"/24", "dev", hostIf)
	run("ip", "link", "set", hostIf, "up")
	for _, a := range []netip.Addr{nt.Allowed, nt.Denied, nt.Bound, nt.Other} {
		run("ip", "-n", ns, "addr", "add", a.String()+"/24", "dev", peerIf)
	}
	run("ip", "-n", ns, "addr", "add", "fd00:233::1/64", "dev", peerIf, "nodad")
	run("ip", "-n", ns, "link", "set", peerIf, "up")
	run("ip", "-n", ns, "link", "set", "lo", "up")
	run("ip", "-n", ns, "route", "add", "default", "via", ip(254).String())
	run("sysctl", "-qw", "net.ipv4.ip_forward=1")

	nt.makeCA(t)
	nt.serveDNS(t)
	for _, a := range []netip.Addr{nt.Allowed, nt.Denied, nt.Bound, nt.Other} {
		nt.serveHTTP(t, a, false)
		nt.serveHTTP(t, a, true)
	}
	nt.serveAltDNS(t)
	return nt
}

// Requests returns what upstream servers have seen so far.
func (n *Net) Requests() []Request {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Request(nil), n.requests...)
}

// makeCA makes the upstream CA and writes it to a file.
func (n *Net) makeCA(t testing.TB) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hybox test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	n.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	n.Roots = x509.NewCertPool()
	n.Roots.AddCert(ca)
	n.CAFile = filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(n.CAFile, n.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "upstream"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames:    []string{AllowedName, DeniedName, BoundName, WildApex, "*." + WildApex, AliasName},
		IPAddresses: []net.IP{n.Allowed.AsSlice(), n.Denied.AsSlice(), n.Bound.AsSlice(), n.Other.AsSlice()},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	upstreamCert = tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
}

var upstreamCert tls.Certificate

// zone answers the tests' names.
func (n *Net) zone(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	qs := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qs.Name, "."))
	a := func(owner string, addr netip.Addr) {
		hdr := dns.RR_Header{Name: dns.Fqdn(owner), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: addr.AsSlice()})
	}
	var target netip.Addr
	switch {
	case name == AllowedName:
		target = n.Allowed
	case name == DeniedName:
		target = n.Denied
	case name == BoundName:
		target = n.Bound
	case name == WildApex:
		target = n.Other
	case strings.HasSuffix(name, "."+WildApex):
		target = n.Allowed
	case name == AliasName:
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: dns.Fqdn(AliasName), Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 30}, Target: dns.Fqdn(DeniedName)})
		if qs.Qtype == dns.TypeA {
			a(DeniedName, n.Denied)
		}
		_ = w.WriteMsg(m)
		return
	default:
		m.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(m)
		return
	}
	if qs.Qtype == dns.TypeA {
		a(name, target)
	}
	_ = w.WriteMsg(m)
}

// serveDNS starts the authoritative zone on the host's loopback.
func (n *Net) serveDNS(t testing.TB) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	n.DNSAddr = fmt.Sprintf("127.0.0.1:%d", port)
	us := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(n.zone)}
	ts := &dns.Server{Listener: l, Handler: dns.HandlerFunc(n.zone)}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })
}

// serveAltDNS starts a resolver inside the upstream namespace on Other:53
// that answers every name (a workload trying to bypass its DNS proxy).
func (n *Net) serveAltDNS(t testing.TB) {
	t.Helper()
	addr := net.JoinHostPort(n.Other.String(), "53")
	pc, err := netns.ListenUDP(n.NSPath, addr)
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) == 1 {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: n.Denied.AsSlice()})
		}
		_ = w.WriteMsg(m)
	})
	s := &dns.Server{PacketConn: pc, Handler: h}
	go func() { _ = s.ActivateAndServe() }()
	t.Cleanup(func() { _ = s.Shutdown() })
}

// serveHTTP starts an echo server on addr:80 (or :443 with TLS) inside the
// upstream namespace. It answers JSON describing the request, echoes the
// Authorization header in SecretEcho, and serves /dns-query like a DoH
// endpoint would.
func (n *Net) serveHTTP(t testing.TB, addr netip.Addr, useTLS bool) {
	t.Helper()
	port, scheme := "80", "http"
	if useTLS {
		port, scheme = "443", "https"
	}
	l, err := netns.ListenTCP(n.NSPath, net.JoinHostPort(addr.String(), port))
	if err != nil {
		t.Fatal(err)
	}
	if useTLS {
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{upstreamCert}, MinVersion: tls.VersionTLS12})
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.requests = append(n.requests, Request{Scheme: scheme, Host: r.Host, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()})
		n.mu.Unlock()
		if v := r.Header.Get("Authorization"); v != "" {
			w.Header().Set(SecretEcho, v)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"upstream": addr.String(), "scheme": scheme, "host": r.Host, "path": r.URL.Path,
		})
	})
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
}
