package nft_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/internal/netns/netnstest"
	"github.com/hybox-dev/hybox/policy/nft"
)

// Ports served on every upstream address.
const (
	tcpPort = 8080
	udpPort = 5300
	webPort = 80
)

// Addresses of the topology: the sandbox has .2 / ::2, the upstream
// namespace all the others on the other end of a veth pair.
var (
	sandbox4 = netip.MustParseAddr("10.250.1.2")
	sandbox6 = netip.MustParseAddr("fd00:250:1::2")
	up1      = netip.MustParseAddr("10.250.1.1")
	up3      = netip.MustParseAddr("10.250.1.3")
	up4      = netip.MustParseAddr("10.250.1.4")
	up5      = netip.MustParseAddr("10.250.1.5")
	up6a     = netip.MustParseAddr("fd00:250:1::1")
	up6b     = netip.MustParseAddr("fd00:250:1::3")
	upstream = []netip.Addr{up1, up3, up4, up5, up6a, up6b}
)

type topology struct {
	sandbox, upstream netnstest.Namespace
}

// newTopology builds sandbox <-veth-> upstream with TCP greeters (they
// answer their own local address) and UDP echoers on every upstream
// address, including the DNS ports 53 and 853.
func newTopology(t *testing.T) topology {
	t.Helper()
	requireNft(t)
	t.Parallel()
	top := topology{sandbox: netnstest.New(t), upstream: netnstest.New(t)}
	s, u := top.sandbox.Name, top.upstream.Name
	netnstest.Run(t, "ip", "-n", s, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", u)
	netnstest.Run(t, "ip", "-n", s, "addr", "add", sandbox4.String()+"/24", "dev", "eth0")
	netnstest.Run(t, "ip", "-n", s, "addr", "add", sandbox6.String()+"/64", "dev", "eth0", "nodad")
	for _, a := range upstream {
		bits := 24
		if a.Is6() {
			bits = 64
		}
		netnstest.Run(t, "ip", "-n", u, "addr", "add", netip.PrefixFrom(a, bits).String(), "dev", "eth0", "nodad")
	}
	for _, ns := range []string{s, u} {
		// No link-local address: its duplicate address detection would
		// hold IPv6 back for a second.
		netnstest.Run(t, "ip", "-n", ns, "link", "set", "eth0", "addrgenmode", "none")
		netnstest.Run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	}

	for _, port := range []int{tcpPort, webPort, 53, 853} {
		l, err := netns.ListenTCP(top.upstream.Path, ":"+strconv.Itoa(port))
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		go greet(l, "")
	}
	for _, a := range upstream {
		for _, port := range []int{udpPort, 53, 853} {
			pc, err := netns.ListenUDP(top.upstream.Path, netip.AddrPortFrom(a, uint16(port)).String())
			require.NoError(t, err)
			t.Cleanup(func() { pc.Close() })
			go echo(pc)
		}
	}
	// Links come up asynchronously (the kernel activates a device's queue
	// up to a second after link-up, so the first IPv6 SYN is often lost and
	// resent); wait until the sandbox reaches both families before any
	// rule is applied. Tests using a topology run in parallel to overlap
	// this wait.
	require.Eventually(t, func() bool {
		_, err4 := dialTCP(top.sandbox.Path, up1, tcpPort)
		_, err6 := dialTCP(top.sandbox.Path, up6a, tcpPort)
		return err4 == nil && err6 == nil
	}, 5*time.Second, 20*time.Millisecond, "topology never became reachable")
	return top
}

func requireNft(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	// nftables itself is used over netlink; the nft binary is only needed
	// to print the ruleset when a test fails.
	if _, err := os.Stat("/proc/net/netfilter"); err != nil {
		t.Skip("needs netfilter in the kernel")
	}
}

// greet answers every connection with reply, or with its local address
// when reply is empty.
func greet(l net.Listener, reply string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		msg := reply
		if msg == "" {
			msg = c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String()
		}
		_, _ = c.Write([]byte(msg))
		_ = c.Close()
	}
}

func echo(pc net.PacketConn) {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

// dialTCP connects from inside ns and returns the greeting.
func dialTCP(ns string, a netip.Addr, port uint16) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns, "tcp", netip.AddrPortFrom(a, port).String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// udpEcho sends a datagram from inside ns and waits for its echo.
func udpEcho(ns string, a netip.Addr, port uint16) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns, "udp", netip.AddrPortFrom(a, port).String())
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "ping" {
		return fmt.Errorf("echo %q", buf[:n])
	}
	return nil
}

// assertTCPAllowed checks that a connection reaches a itself.
func assertTCPAllowed(t *testing.T, ns string, a netip.Addr) {
	t.Helper()
	got, err := dialTCP(ns, a, tcpPort)
	if assert.NoError(t, err, "tcp to %v must be allowed", a) {
		assert.Equal(t, a.String(), got)
	}
}

// assertTCPRejected checks that a connection is refused at once: a reset
// (ECONNREFUSED), not a silent drop, which would end in the dial's
// timeout instead.
func assertTCPRejected(t *testing.T, ns string, a netip.Addr, port uint16) {
	t.Helper()
	_, err := dialTCP(ns, a, port)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "tcp to %v:%d must be rejected", a, port)
}

// assertUDPRejected checks that a datagram fails with an error, not a
// timeout.
func assertUDPRejected(t *testing.T, ns string, a netip.Addr, port uint16) {
	t.Helper()
	err := udpEcho(ns, a, port)
	require.Error(t, err, "udp to %v:%d must be rejected", a, port)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "udp to %v:%d must fail, not time out", a, port)
}

func open(t *testing.T, ns string) *nft.Table {
	t.Helper()
	tbl, err := nft.Open(ns)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, tbl.Close())
		if t.Failed() {
			out, _ := netnsExec(ns, "nft", "list", "ruleset")
			t.Logf("ruleset:\n%s", out)
		}
	})
	return tbl
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestApplyIPRules(t *testing.T) {
	top := newTopology(t)
	tbl := open(t, top.sandbox.Path)
	tests := []struct {
		name    string
		rules   nft.Rules
		allowed []netip.Addr
		denied  []netip.Addr
	}{
		{
			name:    "single address allowed, default deny",
			rules:   nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.3/32"), Allow: true}}},
			allowed: []netip.Addr{up3},
			denied:  []netip.Addr{up1, up4, up5, up6a, up6b},
		},
		{
			name: "single-address deny before CIDR allow wins",
			rules: nft.Rules{Enforce: true, IPRules: []nft.IPRule{
				{Prefix: pfx("10.250.1.4/32")},
				{Prefix: pfx("10.250.1.0/24"), Allow: true},
			}},
			allowed: []netip.Addr{up1, up3, up5},
			denied:  []netip.Addr{up4, up6a},
		},
		{
			name: "CIDR allow before single-address deny wins",
			rules: nft.Rules{Enforce: true, IPRules: []nft.IPRule{
				{Prefix: pfx("10.250.1.0/24"), Allow: true},
				{Prefix: pfx("10.250.1.4/32")},
			}},
			allowed: []netip.Addr{up1, up3, up4, up5},
			denied:  []netip.Addr{up6a},
		},
		{
			name:    "prefix not on an octet boundary",
			rules:   nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.4/31"), Allow: true}}},
			allowed: []netip.Addr{up4, up5},
			denied:  []netip.Addr{up1, up3},
		},
		{
			name:    "deny rule with default allow",
			rules:   nft.Rules{Enforce: true, DefaultAllow: true, IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.4/32")}, {Prefix: pfx("fd00:250:1::3/128")}}},
			allowed: []netip.Addr{up1, up3, up5, up6a},
			denied:  []netip.Addr{up4, up6b},
		},
		{
			name:    "all of IPv4 allowed leaves IPv6 unlisted and denied",
			rules:   nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("0.0.0.0/0"), Allow: true}}},
			allowed: []netip.Addr{up1, up3, up4, up5},
			denied:  []netip.Addr{up6a, up6b},
		},
		{
			name:    "IPv6 rule",
			rules:   nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("fd00:250:1::3/128"), Allow: true}}},
			allowed: []netip.Addr{up6b},
			denied:  []netip.Addr{up6a, up1},
		},
		{
			name:    "IPv4-mapped prefix applies to IPv4",
			rules:   nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("::ffff:10.250.1.3/128"), Allow: true}}},
			allowed: []netip.Addr{up3},
			denied:  []netip.Addr{up1},
		},
		{
			name:    "not enforced: everything passes",
			rules:   nft.Rules{IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.0/24")}}},
			allowed: upstream,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tbl.Apply(tt.rules, nil))
			for _, a := range tt.allowed {
				assertTCPAllowed(t, top.sandbox.Path, a)
				assert.NoError(t, udpEcho(top.sandbox.Path, a, udpPort), "udp to %v must be allowed", a)
			}
			for _, a := range tt.denied {
				assertTCPRejected(t, top.sandbox.Path, a, tcpPort)
				assertUDPRejected(t, top.sandbox.Path, a, udpPort)
			}
		})
	}
}

func TestDNSOnlyOnLoopback(t *testing.T) {
	top := newTopology(t)
	sb := top.sandbox.Path
	// The in-namespace resolver.
	l, err := netns.ListenTCP(sb, "127.0.0.1:53")
	require.NoError(t, err)
	defer l.Close()
	go greet(l, "resolver")
	pc, err := netns.ListenUDP(sb, "127.0.0.1:53")
	require.NoError(t, err)
	defer pc.Close()
	go echo(pc)

	tbl := open(t, sb)
	// Even an explicit allow does not open DNS off loopback.
	require.NoError(t, tbl.Apply(nft.Rules{Enforce: true, DefaultAllow: true, IPRules: []nft.IPRule{
		{Prefix: pfx("10.250.1.1/32"), Allow: true},
		{Prefix: pfx("fd00:250:1::/64"), Allow: true},
	}}, nil))
	for _, a := range []netip.Addr{up1, up6a} {
		for _, port := range []uint16{53, 853} {
			assertTCPRejected(t, sb, a, port)
			assertUDPRejected(t, sb, a, port)
		}
		assertTCPAllowed(t, sb, a)
	}
	got, err := dialTCP(sb, netip.MustParseAddr("127.0.0.1"), 53)
	require.NoError(t, err)
	assert.Equal(t, "resolver", got)
	assert.NoError(t, udpEcho(sb, netip.MustParseAddr("127.0.0.1"), 53))

	// Unrestricted sandboxes may use any resolver.
	require.NoError(t, tbl.Apply(nft.Rules{}, nil))
	_, err = dialTCP(sb, up1, 53)
	assert.NoError(t, err)
	assert.NoError(t, udpEcho(sb, up6a, 853))
}

func TestLearned(t *testing.T) {
	top := newTopology(t)
	sb := top.sandbox.Path
	tbl := open(t, sb)
	rules := nft.Rules{Enforce: true}

	// Learn before any Apply: the sets do not exist yet.
	err := tbl.Learn([]netip.Addr{up3}, time.Minute)
	assert.ErrorIs(t, err, unix.ENOENT)

	require.NoError(t, tbl.Apply(rules, nil))
	assertTCPRejected(t, sb, up3, tcpPort)
	assertTCPRejected(t, sb, up6b, tcpPort)

	// up3 and up6b expire after the minimum TTL (a zero TTL is raised to
	// it); up4 is learned briefly, then refreshed for a minute.
	start := time.Now()
	require.NoError(t, tbl.Learn([]netip.Addr{up3, up6b}, 0))
	require.NoError(t, tbl.Learn([]netip.Addr{up4}, nft.MinTTL))
	require.NoError(t, tbl.Learn([]netip.Addr{up4, netip.MustParseAddr("::ffff:10.250.1.4")}, time.Minute))
	assertTCPAllowed(t, sb, up3)
	assertTCPAllowed(t, sb, up6b)
	assertTCPAllowed(t, sb, up4)
	assert.NoError(t, udpEcho(sb, up3, udpPort))
	assertTCPRejected(t, sb, up5, tcpPort)

	require.Eventually(t, func() bool {
		_, err := dialTCP(sb, up3, tcpPort)
		return errors.Is(err, syscall.ECONNREFUSED)
	}, 5*time.Second, 50*time.Millisecond, "learned address never expired")
	assert.GreaterOrEqual(t, time.Since(start), nft.MinTTL-100*time.Millisecond, "expired before its TTL")
	assertTCPRejected(t, sb, up6b, tcpPort)
	assertTCPAllowed(t, sb, up4) // refreshed

	assert.Error(t, tbl.Learn([]netip.Addr{{}}, time.Minute), "invalid address")
}

func TestApplyReplacesRulesAndKeepsGivenLearned(t *testing.T) {
	top := newTopology(t)
	sb := top.sandbox.Path
	tbl := open(t, sb)

	require.NoError(t, tbl.Apply(nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.3/32"), Allow: true}}},
		[]nft.Entry{{Addr: up5, TTL: time.Minute}, {Addr: up6b, TTL: time.Minute}}))
	require.NoError(t, tbl.Learn([]netip.Addr{up1}, time.Minute))
	assertTCPAllowed(t, sb, up3)
	assertTCPAllowed(t, sb, up5)
	assertTCPAllowed(t, sb, up6b)
	assertTCPAllowed(t, sb, up1)
	assertTCPRejected(t, sb, up4, tcpPort)

	// The new ruleset drops the old rule and every learned address not
	// handed over again.
	require.NoError(t, tbl.Apply(nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.4/32"), Allow: true}}},
		[]nft.Entry{{Addr: up5, TTL: time.Minute}}))
	assertTCPRejected(t, sb, up3, tcpPort)
	assertTCPAllowed(t, sb, up4)
	assertTCPAllowed(t, sb, up5)
	assertTCPRejected(t, sb, up6b, tcpPort)
	assertTCPRejected(t, sb, up1, tcpPort)

	// A failed Apply leaves the ruleset in force.
	err := tbl.Apply(nft.Rules{Enforce: true, IPRules: []nft.IPRule{{}}}, nil)
	assert.Error(t, err)
	assertTCPAllowed(t, sb, up4)
	assertTCPRejected(t, sb, up3, tcpPort)

	// Remove lifts every restriction; removing twice is fine.
	require.NoError(t, nft.Remove(sb))
	require.NoError(t, nft.Remove(sb))
	assertTCPAllowed(t, sb, up3)
	require.NoError(t, nft.Remove("/run/netns/hybox-nt-does-not-exist"))

	require.NoError(t, tbl.Close())
	assert.ErrorIs(t, tbl.Apply(nft.Rules{}, nil), fs.ErrClosed)
}

func TestRedirect(t *testing.T) {
	top := newTopology(t)
	sb := top.sandbox.Path
	proxy, err := netns.ListenTCP(sb, ":0") // dual stack: 127.0.0.1 and ::1
	require.NoError(t, err)
	defer proxy.Close()
	port := uint16(proxy.Addr().(*net.TCPAddr).Port)
	origs := make(chan netip.AddrPort, 16)
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			ap, err := nft.OriginalDst(c)
			if err != nil {
				_, _ = c.Write([]byte(err.Error()))
			} else {
				origs <- ap
				_, _ = c.Write([]byte("proxy"))
			}
			_ = c.Close()
		}
	}()
	// A local service that must not be redirected.
	local, err := netns.ListenTCP(sb, "127.0.0.1:0")
	require.NoError(t, err)
	defer local.Close()
	go greet(local, "local")
	localPort := uint16(local.Addr().(*net.TCPAddr).Port)

	tbl := open(t, sb)
	for _, enforce := range []bool{true, false} {
		t.Run(fmt.Sprintf("enforce=%v", enforce), func(t *testing.T) {
			require.NoError(t, tbl.Apply(nft.Rules{
				Enforce:      enforce,
				DefaultAllow: true,
				IPRules:      []nft.IPRule{{Prefix: pfx("10.250.1.4/32")}},
				RedirectPort: port,
			}, nil))
			for _, a := range []netip.Addr{up1, up6a} {
				got, err := dialTCP(sb, a, webPort)
				require.NoError(t, err)
				assert.Equal(t, "proxy", got, "dial to %v:80 reaches the proxy", a)
				select {
				case ap := <-origs:
					assert.Equal(t, netip.AddrPortFrom(a, webPort), ap)
				case <-time.After(2 * time.Second):
					t.Fatal("proxy saw no connection")
				}
			}
			got, err := dialTCP(sb, netip.MustParseAddr("127.0.0.1"), localPort)
			require.NoError(t, err)
			assert.Equal(t, "local", got, "loopback is not redirected")
			// UDP is not redirected.
			assert.NoError(t, udpEcho(sb, up1, udpPort))
			if enforce {
				assertTCPRejected(t, sb, up4, webPort) // filtered before NAT
			} else {
				_, err := dialTCP(sb, up4, webPort)
				assert.NoError(t, err)
			}
		})
	}

	// Without a redirect port, connections go upstream again.
	require.NoError(t, tbl.Apply(nft.Rules{}, nil))
	got, err := dialTCP(sb, up1, webPort)
	require.NoError(t, err)
	assert.Equal(t, up1.String(), got)
}

func TestOriginalDstErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	// Without NAT the original destination is the actual one (or unknown
	// when conntrack does not track the connection).
	if ap, err := nft.OriginalDst(c); err == nil {
		assert.Equal(t, c.RemoteAddr().(*net.TCPAddr).AddrPort(), ap)
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_, err = nft.OriginalDst(a)
	assert.ErrorIs(t, err, nft.ErrNotTCP)
}

func TestRulesValidate(t *testing.T) {
	assert.NoError(t, nft.Rules{}.Validate())
	assert.NoError(t, nft.Rules{IPRules: []nft.IPRule{{Prefix: pfx("10.0.0.0/8")}}}.Validate())
	assert.Error(t, nft.Rules{IPRules: []nft.IPRule{{}}}.Validate())
}

// BenchmarkApply measures a typical policy (20 IP rules, 100 learned
// addresses, a redirect): "open" is Open+Apply into a namespace with no
// table, as at sandbox start; "reapply" replaces the ruleset through an open
// Table. Close is not timed: the kernel makes the closing of a netlink socket
// wait for the release of replaced rulesets (an RCU grace period, ~5-15 ms).
func BenchmarkApply(b *testing.B) {
	ns := netnstest.New(b)
	rules := nft.Rules{Enforce: true, RedirectPort: 15001}
	for i := range 20 {
		rules.IPRules = append(rules.IPRules, nft.IPRule{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16), Allow: i%2 == 0})
	}
	var learned []nft.Entry
	for i := range 100 {
		learned = append(learned, nft.Entry{Addr: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), TTL: time.Minute})
	}
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			tbl, err := nft.Open(ns.Path)
			if err != nil {
				b.Fatal(err)
			}
			if err := tbl.Apply(rules, learned); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := tbl.Close(); err != nil {
				b.Fatal(err)
			}
			if err := nft.Remove(ns.Path); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("reapply", func(b *testing.B) {
		tbl, err := nft.Open(ns.Path)
		if err != nil {
			b.Fatal(err)
		}
		defer tbl.Close()
		for b.Loop() {
			if err := tbl.Apply(rules, learned); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLearn measures refreshing one learned address.
func BenchmarkLearn(b *testing.B) {
	ns := netnstest.New(b)
	tbl, err := nft.Open(ns.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer tbl.Close()
	if err := tbl.Apply(nft.Rules{Enforce: true}, nil); err != nil {
		b.Fatal(err)
	}
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	for b.Loop() {
		if err := tbl.Learn(addrs, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// netnsExec runs a command in the namespace at path (for diagnostics).
func netnsExec(path string, args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + path}, args...)...).CombinedOutput()
	return string(out), err
}

// TestConcurrentUse applies and learns from several goroutines, on one
// table and on tables of different namespaces (run with -race).
func TestConcurrentUse(t *testing.T) {
	requireNft(t)
	t.Parallel()
	nss := []netnstest.Namespace{netnstest.New(t), netnstest.New(t)}
	tables := []*nft.Table{open(t, nss[0].Path), open(t, nss[1].Path)}
	rules := nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("192.0.2.0/24"), Allow: true}}, RedirectPort: 15001}
	errs := make(chan error, 64)
	for i := range 8 {
		tbl := tables[i%2]
		go func() {
			for j := range 10 {
				var err error
				if (i+j)%3 == 0 {
					err = tbl.Apply(rules, []nft.Entry{{Addr: netip.MustParseAddr("198.51.100.1"), TTL: time.Minute}})
				} else {
					// Learn fails with ENOENT until the first Apply of its table.
					err = tbl.Learn([]netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(j)})}, time.Minute)
					if errors.Is(err, unix.ENOENT) {
						err = nil
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
	for _, ns := range nss {
		out, err := netnsExec(ns.Path, "nft", "list", "set", "inet", "hybox", "learned4")
		require.NoError(t, err, out)
		assert.Contains(t, out, "198.51.100.1")
	}
}

// lineEcho echoes every line of every connection until the peer closes.
func lineEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// roundTrip writes msg on c and reads it back.
func roundTrip(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

func TestCutEndsDeniedEstablishedFlows(t *testing.T) {
	top := newTopology(t)
	sb, up := top.sandbox.Path, top.upstream.Path
	const echoPort = 9090
	l, err := netns.ListenTCP(up, ":"+strconv.Itoa(echoPort))
	require.NoError(t, err)
	defer l.Close()
	go lineEcho(l)
	// An inbound connection: a server in the sandbox, a client upstream.
	in, err := netns.ListenTCP(sb, ":"+strconv.Itoa(echoPort))
	require.NoError(t, err)
	defer in.Close()
	go lineEcho(in)

	tbl := open(t, sb)
	allow := func(addrs ...netip.Addr) nft.Rules {
		r := nft.Rules{Enforce: true}
		for _, a := range addrs {
			r.IPRules = append(r.IPRules, nft.IPRule{Prefix: netip.PrefixFrom(a, a.BitLen()), Allow: true})
		}
		return r
	}
	require.NoError(t, tbl.Apply(allow(up1, up3, up6a), nil))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dial := func(ns, network string, dst netip.AddrPort) net.Conn {
		c, err := netns.Dial(ctx, ns, network, dst.String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	revoked := dial(sb, "tcp", netip.AddrPortFrom(up1, echoPort))
	revoked6 := dial(sb, "tcp", netip.AddrPortFrom(up6a, echoPort))
	kept := dial(sb, "tcp", netip.AddrPortFrom(up3, echoPort))
	revokedUDP := dial(sb, "udp", netip.AddrPortFrom(up1, udpPort))
	inbound := dial(up, "tcp", netip.AddrPortFrom(sandbox4, echoPort))
	for _, c := range []net.Conn{revoked, revoked6, kept, revokedUDP, inbound} {
		require.NoError(t, roundTrip(c, "before\n"), "%v", c.RemoteAddr())
	}

	// A stricter policy stops new connections, not established ones:
	// the reason Cut exists.
	require.NoError(t, tbl.Apply(allow(up3), nil))
	assertTCPRejected(t, sb, up1, echoPort)
	require.NoError(t, roundTrip(revoked, "still\n"), "established flows pass the filter")

	denied := func(a netip.Addr) bool { return a != up3 }
	cut, err := nft.Cut(sb, denied)
	require.NoError(t, err)
	want := []nft.Flow{
		{Proto: unix.IPPROTO_TCP, Dst: netip.AddrPortFrom(up1, echoPort)},
		{Proto: unix.IPPROTO_TCP, Dst: netip.AddrPortFrom(up6a, echoPort)},
		{Proto: unix.IPPROTO_UDP, Dst: netip.AddrPortFrom(up1, udpPort)},
	}
	var got []nft.Flow
	for _, f := range cut {
		assert.True(t, f.Src.Addr() == sandbox4 || f.Src.Addr() == sandbox6, "source of %v", f)
		f.Src = netip.AddrPort{}
		got = append(got, f)
	}
	assert.ElementsMatch(t, want, got)

	for _, c := range []net.Conn{revoked, revoked6} {
		err := roundTrip(c, "after\n")
		assert.ErrorIs(t, err, syscall.ECONNABORTED, "the socket to %v is destroyed", c.RemoteAddr())
	}
	assert.Error(t, roundTrip(revokedUDP, "after\n"), "the UDP socket to %v is destroyed", revokedUDP.RemoteAddr())
	assert.NoError(t, roundTrip(kept, "after\n"), "an allowed flow is kept")
	assert.NoError(t, roundTrip(inbound, "after\n"), "an inbound flow is kept")

	// Nothing left to cut.
	cut, err = nft.Cut(sb, denied)
	require.NoError(t, err)
	assert.Empty(t, cut)
}

func TestCutEndsRedirectedFlows(t *testing.T) {
	top := newTopology(t)
	sb, up := top.sandbox.Path, top.upstream.Path
	l, err := netns.ListenTCP(up, ":9090")
	require.NoError(t, err)
	defer l.Close()
	go lineEcho(l)
	// A splicing proxy in the sandbox's namespace, dialing from the host:
	// the credential proxy's arrangement.
	proxy, err := netns.ListenTCP(sb, "127.0.0.1:0")
	require.NoError(t, err)
	defer proxy.Close()
	proxyClosed := make(chan struct{}, 1)
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				dst, err := nft.OriginalDst(c)
				if err != nil {
					return
				}
				u, err := netns.Dial(context.Background(), up, "tcp", dst.String())
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
				proxyClosed <- struct{}{}
			}()
		}
	}()
	tbl := open(t, sb)
	r := nft.Rules{Enforce: true, RedirectPort: uint16(proxy.Addr().(*net.TCPAddr).Port),
		IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.1/32"), Allow: true}}}
	require.NoError(t, tbl.Apply(r, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, sb, "tcp", netip.AddrPortFrom(up1, 9090).String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(c, "via proxy\n"))

	r.IPRules = nil
	require.NoError(t, tbl.Apply(r, nil))
	cut, err := nft.Cut(sb, func(netip.Addr) bool { return true })
	require.NoError(t, err)
	require.Len(t, cut, 1)
	assert.Equal(t, netip.AddrPortFrom(up1, 9090), cut[0].Dst, "the flow is known by its original destination")
	assert.ErrorIs(t, roundTrip(c, "after\n"), syscall.ECONNABORTED)
	select {
	case <-proxyClosed:
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy's side of the flow was not reset")
	}
}

// Blocked addresses are rejected after the IP rules and before the
// learned addresses, under a default that allows.
func TestBlocked(t *testing.T) {
	top := newTopology(t)
	sb := top.sandbox.Path
	tbl := open(t, sb)
	ttl := 30 * time.Second
	require.NoError(t, tbl.Apply(nft.Rules{
		Enforce: true, DefaultAllow: true,
		IPRules: []nft.IPRule{{Prefix: pfx("10.250.1.5/32"), Allow: true}},
		Blocked: []nft.Entry{{Addr: up1, TTL: ttl}, {Addr: up5, TTL: ttl}},
	}, []nft.Entry{{Addr: up1, TTL: ttl}}))
	assertTCPRejected(t, sb, up1, tcpPort) // blocked beats learned
	assertTCPAllowed(t, sb, up5)           // an IP rule comes first
	assertTCPAllowed(t, sb, up3)           // the default
	assertTCPAllowed(t, sb, up6a)

	require.NoError(t, tbl.Block([]netip.Addr{up3, up6a}, ttl))
	assertTCPRejected(t, sb, up3, tcpPort)
	assertTCPRejected(t, sb, up6a, tcpPort)
	assertUDPRejected(t, sb, up3, udpPort)

	// Apply replaces the blocked sets too.
	require.NoError(t, tbl.Apply(nft.Rules{Enforce: true, DefaultAllow: true}, nil))
	for _, a := range []netip.Addr{up1, up3, up6a} {
		assertTCPAllowed(t, sb, a)
	}
}

// TestGuardAndBypassMark: the enforcer's own marked connections pass a
// filter that denies everything; nothing of the namespace, marked or not
// but the mark, reaches a guarded port, on loopback or on the namespace's
// own address; a guard needs no filter (Enforce false).
func TestGuardAndBypassMark(t *testing.T) {
	top := newTopology(t)
	const mark, guarded = 0x68796278, 44773
	l, err := netns.ListenTCP(top.sandbox.Path, ":"+strconv.Itoa(guarded))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go greet(l, "control")
	markedDial := func(a netip.Addr, port uint16) (string, error) {
		var c net.Conn
		err := netns.Do(top.sandbox.Path, func() error {
			d := net.Dialer{Timeout: 2 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, mark)
				}); err != nil {
					return err
				}
				return serr
			}}
			var derr error
			c, derr = d.Dial("tcp", netip.AddrPortFrom(a, port).String())
			return derr
		})
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		return string(b), err
	}
	tbl := open(t, top.sandbox.Path)
	for _, enforce := range []bool{true, false} {
		require.NoError(t, tbl.Apply(nft.Rules{Enforce: enforce, BypassMark: mark, GuardPorts: []uint16{guarded}}, nil))
		for _, a := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), sandbox4} {
			assertTCPRejected(t, top.sandbox.Path, a, guarded)
		}
		if enforce {
			assertTCPRejected(t, top.sandbox.Path, up1, tcpPort)
			// DNS off loopback is refused to all but the marked.
			assertTCPRejected(t, top.sandbox.Path, up1, 53)
			got, err := markedDial(up1, 53)
			require.NoError(t, err, "a marked connection passes the filter")
			assert.Equal(t, up1.String(), got)
		} else {
			assertTCPAllowed(t, top.sandbox.Path, up1)
		}
		got, err := markedDial(up1, tcpPort)
		require.NoError(t, err)
		assert.Equal(t, up1.String(), got)
	}
	// Outside the namespace, the guarded port answers.
	got, err := dialTCP(top.upstream.Path, sandbox4, guarded)
	require.NoError(t, err)
	assert.Equal(t, "control", got)
}

// TestEnforceAfterUnrestricted: connections made while a namespace was
// unrestricted (a pool member, a sandbox before its first policy) are
// tracked from the start, so a policy applied later keeps the inbound
// ones, even when the namespace's side sends first (the answer to a
// request that came before the policy): untracked until then, its packet
// would be new to the filter and rejected.
func TestEnforceAfterUnrestricted(t *testing.T) {
	top := newTopology(t)
	sb, up := top.sandbox.Path, top.upstream.Path
	const port = 9091
	l, err := netns.ListenTCP(sb, ":"+strconv.Itoa(port))
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()

	tbl := open(t, sb)
	require.NoError(t, tbl.Apply(nft.Rules{}, nil), "unrestricted")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := netns.Dial(ctx, up, "tcp", netip.AddrPortFrom(sandbox4, port).String())
	require.NoError(t, err)
	defer client.Close()
	server := <-accepted
	defer server.Close()
	_, err = client.Write([]byte("request\n"))
	require.NoError(t, err)
	buf := make([]byte, 8)
	_, err = io.ReadFull(server, buf)
	require.NoError(t, err)

	require.NoError(t, tbl.Apply(nft.Rules{Enforce: true}, nil), "deny everything")
	assertTCPRejected(t, sb, up1, tcpPort)
	_, err = server.Write([]byte("answer\n"))
	require.NoError(t, err)
	_ = client.SetReadDeadline(time.Now().Add(3 * time.Second))
	got := make([]byte, 7)
	_, err = io.ReadFull(client, got)
	require.NoError(t, err, "the answer to a request made while unrestricted")
	assert.Equal(t, "answer\n", string(got))
}
