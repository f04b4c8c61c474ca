package xt

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/policy/nft"
)

// Cuts in Linux's ip_tables (see kernel_test.go): which flows are cut,
// and that a cut holds whatever the number of flows.

// established connects from the namespace at ns to a's TCP server and
// checks that it answers.
func established(t *testing.T, ns string, a netip.Addr) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns, "tcp", netip.AddrPortFrom(a, tcpPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// reusePort sets SO_REUSEADDR and SO_REUSEPORT on a socket, so that it
// shares its port with another that sets them.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
	})
	return errors.Join(err, serr)
}

// dialFrom connects from src in the namespace at ns to dst (sharing the
// port with reuse).
func dialFrom(ns string, src, dst netip.AddrPort, reuse bool) (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(src)}
	if reuse {
		d.Control = reusePort
	}
	var c net.Conn
	err := netns.Do(ns, func() (err error) {
		c, err = d.Dial("tcp", dst.String())
		return err
	})
	return c, err
}

// listenIn listens on addr in the namespace at ns (sharing the port with
// reuse) and hands out the connections it accepts.
func listenIn(t *testing.T, ns string, addr netip.AddrPort, reuse bool) <-chan net.Conn {
	t.Helper()
	lc := net.ListenConfig{}
	if reuse {
		lc.Control = reusePort
	}
	var l net.Listener
	err := netns.Do(ns, func() (err error) {
		l, err = lc.Listen(context.Background(), "tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	conns := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	return conns
}

// inbound connects from src in the upstream namespace to port of the
// sandbox, where accepted hands out the connection; the upstream's end
// answers lines (with src). It returns the sandbox's end.
func inbound(t *testing.T, top topology, src netip.Addr, port uint16, accepted <-chan net.Conn) net.Conn {
	t.Helper()
	c, err := dialFrom(top.upstream.Path, netip.AddrPortFrom(src, 0), netip.AddrPortFrom(sandbox4, port), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go serveLines(c)
	select {
	case in := <-accepted:
		t.Cleanup(func() { in.Close() })
		if got, err := roundTrip(in); err != nil || got != src.String() {
			t.Fatalf("inbound from %v: %q, %v", src, got, err)
		}
		return in
	case <-time.After(2 * time.Second):
		t.Fatalf("inbound from %v: not accepted", src)
		return nil
	}
}

// TestKernelCut: Cut finds the established flows to what deny refuses in
// /proc/net and rejects their next packets: the workload's socket is
// reset, the peer's next segment gets a reset back. Allowed flows go on,
// and so do the server's connections: to the agent's guarded port, and
// from the server's address to a listener. A listener on the port of the
// workload's own connection does not keep that connection, nor is a
// connection from another denied peer kept. The rules go once the flows
// are gone.
func TestKernelCut(t *testing.T) {
	top := newTopology(t)
	ns := top.sandbox.Path
	tab := open(t, ns)
	const agentPort, serverPort = tcpPort + 2, 9000
	server := upD
	r := nft.Rules{Enforce: true, GuardPorts: []uint16{agentPort}, IPRules: []nft.IPRule{{Prefix: pfx("10.252.1.0/24"), Allow: true}}}
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	// The agent, and a server of the workload's (execd, a proxied port),
	// which the server connects to; a stranger connects too.
	toAgent := inbound(t, top, server, agentPort, listenIn(t, ns, netip.AddrPortFrom(sandbox4, agentPort), false))
	served := listenIn(t, ns, netip.AddrPortFrom(netip.IPv4Unspecified(), serverPort), false)
	fromServer := inbound(t, top, server, serverPort, served)
	fromStranger := inbound(t, top, upB, serverPort, served)
	// The workload's connections: one of them with a listener on its
	// own port (SO_REUSEPORT), one to the server's address.
	denied, kept, toServer := established(t, ns, upB), established(t, ns, upA), established(t, ns, server)
	shielded, err := dialFrom(ns, netip.AddrPortFrom(sandbox4, 0), netip.AddrPortFrom(upC, tcpPort), true)
	if err != nil {
		t.Fatal(err)
	}
	defer shielded.Close()
	listenIn(t, ns, shielded.LocalAddr().(*net.TCPAddr).AddrPort(), true)
	if _, err := roundTrip(shielded); err != nil {
		t.Fatal(err)
	}

	r.IPRules = append([]nft.IPRule{{Prefix: pfx("10.252.1.3/32")}, {Prefix: pfx("10.252.1.4/32")}, {Prefix: pfx("10.252.1.5/32")}}, r.IPRules...)
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	cut, err := tab.Cut(func(a netip.Addr) bool { return a == upB || a == upC || a == server })
	if err != nil {
		t.Fatal(err)
	}
	if len(cut) != 4 {
		t.Errorf("cut %v, want the 4 flows to %v, %v and %v", cut, upB, upC, server)
	}
	for name, c := range map[string]net.Conn{"denied": denied, "shielded by a listener": shielded, "to the server's address": toServer,
		"from a denied stranger": fromStranger} {
		if _, err := roundTrip(c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the cut flow %s: next exchange %v, want a reset", name, err)
		}
	}
	for name, tc := range map[string]struct {
		c    net.Conn
		want netip.Addr
	}{"allowed": {kept, upA}, "to the agent": {toAgent, server}, "from the server": {fromServer, server}} {
		if got, err := roundTrip(tc.c); err != nil || got != tc.want.String() {
			t.Errorf("the %s flow: %q, %v", name, got, err)
		}
	}
	for _, c := range []net.Conn{denied, shielded, toServer, fromStranger} {
		c.Close()
	}
	deadline := time.Now().Add(cutCheck + 3*time.Second)
	for {
		tab.mu.Lock()
		n := len(tab.cuts)
		tab.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d cut rules left after the flows ended", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKernelCutMany: a cut of more flows than their rules fit (a rule
// each is 200 bytes of a 32 KiB table) still cuts every one of them (by
// their destination), rather than failing and leaving them all alive.
func TestKernelCutMany(t *testing.T) {
	top := newTopology(t)
	ns := top.sandbox.Path
	tab := open(t, ns)
	r := nft.Rules{Enforce: true, IPRules: []nft.IPRule{{Prefix: pfx("10.252.1.0/24"), Allow: true}}}
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 200 {
		conns = append(conns, established(t, ns, upB))
	}
	kept := established(t, ns, upA)
	r.IPRules = append([]nft.IPRule{{Prefix: pfx("10.252.1.3/32")}}, r.IPRules...)
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	cut, err := tab.Cut(func(a netip.Addr) bool { return a == upB })
	if err != nil || len(cut) != len(conns) {
		t.Fatalf("cut %d of %d flows: %v", len(cut), len(conns), err)
	}
	if got := readBack(t, tab.socks[0], v4, "filter").String(); !strings.Contains(got, "-A HYBOX-CUT -d 10.252.1.3/32 -j HYBOX-RESET") {
		t.Errorf("the filter in force:\n%s", got)
	}
	for i, c := range conns {
		if _, err := roundTrip(c); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("cut flow %d: next exchange %v, want a reset", i, err)
		}
	}
	if got, err := roundTrip(kept); err != nil || got != upA.String() {
		t.Errorf("the allowed flow: %q, %v", got, err)
	}
}
