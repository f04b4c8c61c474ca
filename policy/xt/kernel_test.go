package xt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/internal/netns/netnstest"
	"github.com/hybox-dev/hybox/policy/nft"
)

// These tests load the tables into Linux's own ip_tables, in throwaway
// network namespaces: the kernel checks the layout at least as strictly
// as gVisor's netstack (gvisor_test.go loads them there), iptables-legacy
// reads them back, and Linux too runs the nat table before the filter on
// output. They need root.

// requireIPTables skips t unless the kernel has legacy iptables.
func requireIPTables(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	if _, err := os.Stat("/proc/net/ip_tables_names"); err != nil {
		t.Skip("needs the kernel's legacy iptables (CONFIG_IP_NF_IPTABLES)")
	}
}

// TestKernelReadsBack: each golden table loads into the kernel, which
// gives back exactly its entries (IPT_SO_GET_ENTRIES, decoded), and
// iptables-legacy-save prints exactly what the golden file says.
func TestKernelReadsBack(t *testing.T) {
	requireIPTables(t)
	save4, err4 := exec.LookPath("iptables-legacy-save")
	save6, err6 := exec.LookPath("ip6tables-legacy-save")
	for _, tc := range goldenModels {
		t.Run(tc.name, func(t *testing.T) {
			ns := netnstest.New(t)
			tab, err := Open(ns.Path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tab.Close()
			for fi, f := range families {
				for _, want := range []*table{tc.m.filter(f), tc.m.nat(f)} {
					blob, err := want.encode()
					if err != nil {
						t.Fatal(err)
					}
					if err := replace(tab.socks[fi], f, blob); err != nil {
						t.Fatalf("%s %s: %v", f, want.name, err)
					}
					got := readBack(t, tab.socks[fi], f, want.name)
					if got.String() != want.String() {
						t.Errorf("%s %s: the kernel has\n%s\nwant\n%s", f, want.name, got, want)
					}
					save, lerr := save4, err4
					if f == v6 {
						save, lerr = save6, err6
					}
					if lerr != nil {
						continue
					}
					out, err := exec.Command("ip", "netns", "exec", ns.Name, save, "-t", want.name).CombinedOutput()
					if err != nil {
						t.Fatalf("%s: %v: %s", save, err, out)
					}
					if got := normalizeSave(string(out)); got != want.String() {
						t.Errorf("%s -t %s prints\n%s\nwant\n%s", save, want.name, got, want)
					}
				}
			}
		})
	}
}

// readBack reads table name of family f from the kernel.
func readBack(t *testing.T, fd int, f family, name string) *table {
	t.Helper()
	info := make([]byte, sizeGetInfo)
	copy(info, name)
	if err := getsockopt(fd, level(f), soGetInfo, info); err != nil {
		t.Fatal(err)
	}
	var entry, under [numHooks]uint32
	for h := range numHooks {
		entry[h] = ne.Uint32(info[36+4*h:])
		under[h] = ne.Uint32(info[56+4*h:])
	}
	e, err := getEntries(fd, level(f), name, ne.Uint32(info[80:]))
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntries(e, name, f, ne.Uint32(info[32:]), ne.Uint32(info[76:]), entry, under)
	if err != nil {
		t.Fatalf("the kernel's %s %s: %v", f, name, err)
	}
	return got
}

var counters = regexp.MustCompile(` \[\d+:\d+\]`)

// normalizeSave drops iptables-save's comments and counters.
func normalizeSave(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		b.WriteString(counters.ReplaceAllString(l, "") + "\n")
	}
	return b.String()
}

// Addresses of the topology: the sandbox namespace has .2 / ::2, the
// upstream namespace the others, on a veth pair.
var (
	sandbox4 = netip.MustParseAddr("10.252.1.2")
	sandbox6 = netip.MustParseAddr("fd00:252:1::2")
	upA      = netip.MustParseAddr("10.252.1.1") // allowed by an IP rule
	upB      = netip.MustParseAddr("10.252.1.3") // denied by an IP rule
	upC      = netip.MustParseAddr("10.252.1.4") // learned
	upD      = netip.MustParseAddr("10.252.1.5") // no rule
	up6A     = netip.MustParseAddr("fd00:252:1::1")
	up6B     = netip.MustParseAddr("fd00:252:1::3")
)

const (
	tcpPort = 8080
	udpPort = 5300
)

type topology struct{ sandbox, upstream netnstest.Namespace }

// newTopology builds sandbox <-veth-> upstream, with a TCP server that
// answers its local address, and UDP echoes, on every upstream address
// (TCP and UDP also on port 53).
func newTopology(t *testing.T) topology {
	t.Helper()
	requireIPTables(t)
	top := topology{sandbox: netnstest.New(t), upstream: netnstest.New(t)}
	s, u := top.sandbox.Name, top.upstream.Name
	netnstest.Run(t, "ip", "-n", s, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", u)
	netnstest.Run(t, "ip", "-n", s, "addr", "add", sandbox4.String()+"/24", "dev", "eth0")
	netnstest.Run(t, "ip", "-n", s, "addr", "add", sandbox6.String()+"/64", "dev", "eth0", "nodad")
	for _, a := range []netip.Addr{upA, upB, upC, upD, up6A, up6B} {
		bits := 24
		if a.Is6() {
			bits = 64
		}
		netnstest.Run(t, "ip", "-n", u, "addr", "add", netip.PrefixFrom(a, bits).String(), "dev", "eth0", "nodad")
	}
	for _, ns := range []string{s, u} {
		netnstest.Run(t, "ip", "-n", ns, "link", "set", "eth0", "addrgenmode", "none")
		netnstest.Run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	}
	for _, port := range []int{tcpPort, 53} {
		l, err := netns.ListenTCP(top.upstream.Path, ":"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go serveLines(c)
			}
		}()
	}
	for _, port := range []int{udpPort, 53} {
		pc, err := netns.ListenUDP(top.upstream.Path, ":"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err4 := dialTCP(top.sandbox.Path, upA, tcpPort)
		_, err6 := dialTCP(top.sandbox.Path, up6A, tcpPort)
		if err4 == nil && err6 == nil {
			return top
		}
		if time.Now().After(deadline) {
			t.Fatalf("the topology never became reachable: %v %v", err4, err6)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveLines answers each line with the connection's local address, and
// keeps the connection until the peer closes it.
func serveLines(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 256)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if n > 0 {
			msg := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String() + "\n"
			if _, err := c.Write([]byte(msg)); err != nil {
				return
			}
		}
	}
}

// dialTCP connects from the namespace at ns to a:port, sends a line and
// returns the answer.
func dialTCP(ns string, a netip.Addr, port uint16) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns, "tcp", netip.AddrPortFrom(a, port).String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	return roundTrip(c)
}

func roundTrip(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// udpEcho sends a datagram from the namespace at ns to a:port and waits
// for the echo.
func udpEcho(ns string, a netip.Addr, port uint16) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns, "udp", netip.AddrPortFrom(a, port).String())
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 16))
	return err
}

func wantAllowed(t *testing.T, ns string, a netip.Addr) {
	t.Helper()
	got, err := dialTCP(ns, a, tcpPort)
	if err != nil || got != a.String() {
		t.Errorf("TCP to %v: %q, %v; want it allowed", a, got, err)
	}
}

func wantRefused(t *testing.T, ns string, a netip.Addr, port uint16) {
	t.Helper()
	if _, err := dialTCP(ns, a, port); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("TCP to %v:%d: %v; want it refused at once", a, port, err)
	}
}

func open(t *testing.T, ns string) *Table {
	t.Helper()
	tab, err := Open(ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tab.Close() })
	return tab
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestKernelPolicy: the policy's IP rules in order, learned addresses
// that expire, blocked ones, DNS off loopback, the default, UDP, the
// guard and the bypass mark, as the filter enforces them; Allows agrees.
func TestKernelPolicy(t *testing.T) {
	top := newTopology(t)
	ns := top.sandbox.Path
	tab := open(t, ns)
	r := nft.Rules{Enforce: true, BypassMark: mark, GuardPorts: []uint16{tcpPort + 1},
		IPRules: []nft.IPRule{{Prefix: pfx("10.252.1.1/32"), Allow: true}, {Prefix: pfx("10.252.1.0/24"), Allow: false},
			{Prefix: pfx("fd00:252:1::1/128"), Allow: true}}}
	if err := tab.Apply(r, []nft.Entry{{Addr: upC, TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	wantAllowed(t, ns, upA)
	wantAllowed(t, ns, up6A)
	wantRefused(t, ns, upB, tcpPort)
	wantRefused(t, ns, upC, tcpPort) // the IP rule denying the /24 comes first
	wantRefused(t, ns, up6B, tcpPort)
	wantRefused(t, ns, upA, 53) // DNS off loopback, even to an allowed address
	if err := udpEcho(ns, upA, 53); err == nil {
		t.Error("UDP DNS to an allowed address passed")
	}
	if err := udpEcho(ns, upA, udpPort); err != nil {
		t.Errorf("UDP to an allowed address: %v", err)
	}
	// Linux fails the send (EPERM), gVisor reports the port unreachable.
	if err := udpEcho(ns, upB, udpPort); !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EPERM) {
		t.Errorf("UDP to a denied address: %v; want it refused", err)
	}
	for _, tc := range []struct {
		dst  netip.AddrPort
		want bool
	}{
		{netip.AddrPortFrom(upA, 443), true}, {netip.AddrPortFrom(upB, 443), false}, {netip.AddrPortFrom(upA, 53), false},
		{netip.AddrPortFrom(upC, 443), false}, {netip.MustParseAddrPort("[::ffff:10.252.1.1]:80"), true},
	} {
		if got := tab.Allows(tc.dst); got != tc.want {
			t.Errorf("Allows(%v) = %v", tc.dst, got)
		}
	}

	// Learned addresses allow what no IP rule decides, until they expire.
	r.IPRules = r.IPRules[:1]
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, ns, upC, tcpPort)
	if err := tab.Learn([]netip.Addr{upC, netip.AddrFrom16(upD.As16())}, time.Second); err != nil {
		t.Fatal(err)
	}
	wantAllowed(t, ns, upC)
	wantAllowed(t, ns, upD)
	if !tab.Allows(netip.AddrPortFrom(upD, 80)) {
		t.Error("Allows a learned address: false")
	}
	time.Sleep(nft.MinTTL + expirySlack + 300*time.Millisecond)
	wantRefused(t, ns, upC, tcpPort)
	if tab.Allows(netip.AddrPortFrom(upD, 80)) {
		t.Error("Allows an expired address: true")
	}

	// Blocked addresses are refused before learned ones, after IP rules.
	r.DefaultAllow = true
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	wantAllowed(t, ns, upD)
	if err := tab.Block([]netip.Addr{upD, upA}, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, ns, upD, tcpPort)
	wantAllowed(t, ns, upA) // its IP rule wins

	// No connection from the guarded port: one on it is always one the
	// agent accepted.
	if c, err := dialFrom(ns, netip.AddrPortFrom(sandbox4, tcpPort+1), netip.AddrPortFrom(upA, tcpPort), false); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a connection from the guarded port: %v, want it refused", err)
		if c != nil {
			c.Close()
		}
	}

	// The guarded port (served on the namespace's address, as the agent
	// serves its control port) is refused to the namespace's own
	// sockets, on loopback too, unless they carry the mark, which also
	// passes the filter.
	guarded := netip.AddrPortFrom(sandbox4, tcpPort+1)
	l, err := netns.ListenTCP(ns, guarded.String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	wantRefused(t, ns, netip.MustParseAddr("127.0.0.1"), tcpPort+1)
	wantRefused(t, ns, sandbox4, tcpPort+1)
	wantRefused(t, ns, upA, tcpPort+1)
	r.DefaultAllow = false
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, ns, upD, tcpPort)
	for _, dst := range []netip.AddrPort{netip.AddrPortFrom(upD, tcpPort), guarded} {
		if err := dialMarked(ns, dst); err != nil {
			t.Errorf("a marked connection to %v: %v", dst, err)
		}
	}
}

// dialMarked connects to dst from the namespace with the bypass mark.
func dialMarked(ns string, dst netip.AddrPort) error {
	d := net.Dialer{Timeout: 2 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark) })
		return errors.Join(err, serr)
	}}
	var c net.Conn
	err := netns.Do(ns, func() (err error) {
		c, err = d.Dial("tcp", dst.String())
		return err
	})
	if err == nil {
		c.Close()
	}
	return err
}

// TestKernelRedirect: allowed TCP goes to the proxy port, which reads the
// original destination; denied TCP is refused by the filter, not
// redirected; loopback and marked connections are not redirected.
func TestKernelRedirect(t *testing.T) {
	top := newTopology(t)
	ns := top.sandbox.Path
	tab := open(t, ns)
	const port = 15001
	l, err := netns.ListenTCP(ns, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dsts := make(chan netip.AddrPort, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dst, err := OriginalDst(c)
			if err != nil {
				dst = netip.AddrPort{}
			}
			dsts <- dst
			_, _ = c.Write([]byte("proxy\n"))
			c.Close()
		}
	}()
	r := nft.Rules{Enforce: true, BypassMark: mark, RedirectPort: port,
		IPRules: []nft.IPRule{{Prefix: pfx("10.252.1.1/32"), Allow: true}}}
	if err := tab.Apply(r, []nft.Entry{{Addr: upC, TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{upA, upC} {
		got, err := dialTCP(ns, a, tcpPort)
		if err != nil || got != "proxy" {
			t.Fatalf("TCP to %v: %q, %v; want the proxy", a, got, err)
		}
		if dst := <-dsts; dst != netip.AddrPortFrom(a, tcpPort) {
			t.Errorf("original destination %v, want %v", dst, netip.AddrPortFrom(a, tcpPort))
		}
	}
	wantRefused(t, ns, upB, tcpPort)
	if err := dialMarked(ns, netip.AddrPortFrom(upB, tcpPort)); err != nil {
		t.Errorf("a marked connection: %v", err)
	}
	select {
	case dst := <-dsts:
		t.Errorf("a marked connection went to the proxy (for %v)", dst)
	default:
	}
}

// TestKernelFull: a Learn that does not fit is refused with ErrFull and
// changes nothing; a Block makes room by dropping learned addresses.
func TestKernelFull(t *testing.T) {
	requireIPTables(t)
	ns := netnstest.New(t)
	tab := open(t, ns.Path)
	if err := tab.Apply(nft.Rules{Enforce: true}, nil); err != nil {
		t.Fatal(err)
	}
	var many []netip.Addr
	for i := range 400 {
		many = append(many, netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}))
	}
	err := tab.Learn(many, time.Hour)
	var be *BudgetError
	if !errors.Is(err, ErrFull) || !errors.As(err, &be) {
		t.Fatalf("learning 400 addresses: %v, want ErrFull", err)
	}
	if len(tab.learned) != 0 || tab.Allows(netip.AddrPortFrom(many[0], 80)) {
		t.Error("a refused Learn left addresses behind")
	}
	if err := tab.Learn(many[:150], time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := tab.Block(many[200:260], time.Hour); err != nil {
		t.Fatalf("blocking when full: %v", err)
	}
	if n := len(tab.learned); n >= 150 || n == 0 {
		t.Errorf("%d learned addresses left, want some dropped for the blocked ones", n)
	}
}

// TestOpenRefuses: Apply before Open's sockets exist, and Learn before
// Apply, say why.
func TestLearnBeforeApply(t *testing.T) {
	requireIPTables(t)
	ns := netnstest.New(t)
	tab := open(t, ns.Path)
	if err := tab.Learn([]netip.Addr{upA}, time.Second); !errors.Is(err, unix.ENOENT) {
		t.Errorf("learn before apply: %v", err)
	}
	tab.Close()
	if err := tab.Apply(nft.Rules{}, nil); err == nil {
		t.Error("apply after close")
	}
}

// BenchmarkLearn: one learned address added to a table holding 150, in
// Linux's ip_tables (compile, encode and replace the tables that change).
func BenchmarkLearn(b *testing.B) {
	netnstest.RequireRoot(b)
	ns := netnstest.New(b)
	tab, err := Open(ns.Path, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tab.Close()
	var learned []nft.Entry
	for i := range 150 {
		learned = append(learned, nft.Entry{Addr: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), TTL: time.Hour})
	}
	if err := tab.Apply(nft.Rules{Enforce: true, BypassMark: mark, GuardPorts: []uint16{44773}, RedirectPort: 15001}, learned); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := tab.Learn([]netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(i % 20)})}, time.Duration(i+1)*time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile: the four tables of a policy with 150 learned
// addresses, encoded.
func BenchmarkCompile(b *testing.B) {
	m := model{rules: nft.Rules{Enforce: true, BypassMark: mark, GuardPorts: []uint16{44773}, RedirectPort: 15001},
		local: addrs("10.248.0.5")}
	for i := range 150 {
		m.learned = append(m.learned, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}))
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range families {
			if _, err := m.filter(f).encode(); err != nil {
				b.Fatal(err)
			}
			if _, err := m.nat(f).encode(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
