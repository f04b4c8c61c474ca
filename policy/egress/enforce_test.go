package egress

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/internal/netns/netnstest"
	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// queryNS asks the resolver at DNSAddr inside the namespace at nsPath for
// name's A records, over network (udp or tcp).
func queryNS(t *testing.T, nsPath, network, name string) (*dns.Msg, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, nsPath, network, DNSAddr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	co := &dns.Conn{Conn: c}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	if err := co.WriteMsg(q); err != nil {
		return nil, err
	}
	return co.ReadMsg()
}

// TestEnforce needs root: it opens the sandbox's sockets in a throwaway
// network namespace and installs its firewall there, with each backend.
func TestEnforce(t *testing.T) {
	for _, fw := range firewalls {
		t.Run(fw.Name(), func(t *testing.T) { testEnforce(t, fw) })
	}
}

func testEnforce(t *testing.T, fw FirewallBackend) {
	ns := netnstest.New(t) // skips unless root
	e := newEnvFirewall(t, fw)

	type learnCall struct {
		name  string
		addrs []netip.Addr
	}
	var mu sync.Mutex
	var learned []learnCall
	onLearn := func(name string, addrs []netip.Addr) {
		mu.Lock()
		defer mu.Unlock()
		learned = append(learned, learnCall{name, addrs})
	}
	learnedCalls := func() []learnCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]learnCall(nil), learned...)
	}

	v := vault.New()
	_, err := v.Create(vault.CreateRequest{
		Credentials: []vault.Credential{{Name: "token", Source: vault.Source{Value: vault.NewSecret(secret)}}},
		Bindings: []vault.Binding{{Name: "ok", Match: vault.Match{Hosts: []string{"ok.test"}},
			Auth: vault.Auth{Type: vault.AuthBearer, Credential: "token"}}},
	}, func(string) error { return nil })
	require.NoError(t, err)
	ca, err := tproxy.NewCA("hybox egress test sandbox")
	require.NoError(t, err)
	s, err := e.m.New("enforce", Config{Policy: pol(policy.Deny, "allow ok.test"), Vault: v, CA: ca, OnLearn: onLearn})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
		}
	})

	check := func(t *testing.T, network string) {
		t.Helper()
		m, err := queryNS(t, ns.Path, network, "other.test")
		require.NoError(t, err)
		assert.Equal(t, dns.RcodeNameError, m.Rcode, "a denied name gets NXDOMAIN")
		assert.Empty(t, m.Answer)

		before := len(learnedCalls())
		m, err = queryNS(t, ns.Path, network, "ok.test")
		require.NoError(t, err)
		require.Equal(t, dns.RcodeSuccess, m.Rcode)
		require.Len(t, m.Answer, 1)
		a, ok := m.Answer[0].(*dns.A)
		require.True(t, ok, "answer %v", m.Answer[0])
		assert.Equal(t, "127.0.0.1", a.A.String(), "answered from the upstream zone")
		calls := learnedCalls()
		require.Len(t, calls, before+1, "OnLearn fires before the answer is returned")
		assert.Equal(t, "ok.test", calls[before].name)
		assert.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, calls[before].addrs)
	}

	require.NoError(t, s.Enforce(context.Background(), ns.Path))
	t.Run("udp", func(t *testing.T) { check(t, "udp") })
	t.Run("tcp", func(t *testing.T) { check(t, "tcp") })

	// A policy change reaches the DNS proxy at once.
	require.NoError(t, s.SetPolicy(pol(policy.Deny, "allow other.test")))
	m, err := queryNS(t, ns.Path, "udp", "ok.test")
	require.NoError(t, err)
	assert.Equal(t, dns.RcodeNameError, m.Rcode)
	require.NoError(t, s.SetPolicy(pol(policy.Deny, "allow ok.test")))

	// Enforce again (a restore) opens the sockets again.
	require.NoError(t, s.Enforce(context.Background(), ns.Path))
	t.Run("again", func(t *testing.T) { check(t, "udp") })

	// The credential proxy listens while the sandbox is served.
	proxyAddr := "127.0.0.1:" + strconv.Itoa(ProxyPort)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns.Path, "tcp", proxyAddr)
	require.NoError(t, err, "the credential proxy listens")
	c.Close()

	// Close releases every socket: nothing answers, and they can be bound
	// again.
	require.NoError(t, s.Close())
	closed = true
	for _, addr := range []string{DNSAddr, proxyAddr} {
		_, err = netns.Dial(ctx, ns.Path, "tcp", addr)
		assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial %s after Close: %v", addr, err)
		l, err := netns.ListenTCP(ns.Path, addr)
		require.NoError(t, err, "listen %s after Close", addr)
		l.Close()
	}
	pc, err := netns.ListenUDP(ns.Path, DNSAddr)
	require.NoError(t, err, "the DNS proxy's UDP socket is released")
	pc.Close()

	err = s.Enforce(context.Background(), ns.Path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "closed")
}
