package xt

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy/nft"
)

// As Linux prints them (and gVisor, which copies the format): 10.251.0.2
// is 0200FB0A on a little-endian host.
const (
	procTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0200FB0A:91FF 0100FB0A:0050 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 0 0 0 0 -1
   1: 00000000:AEE4 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 0 0 0 0 -1
   2: 0200FB0A:AEE4 0100FB0A:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 0 0 0 0 -1
   3: 0100007F:3A99 0200FB0A:9200 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 0 0 0 0 -1
   4: 0200FB0A:9200 0300FB0A:0050 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 0 0 0 0 -1
   5: 0200FB0A:9300 0300FB0A:0050 06 00000000:00000000 00:00000000 00000000     0        0 6 1 0000000000000000 0 0 0 0 -1
   6: 0100007F:9400 0100007F:0035 01 00000000:00000000 00:00000000 00000000     0        0 7 1 0000000000000000 0 0 0 0 -1
   7: 0200FB0A:AEE5 0100FB0A:C351 01 00000000:00000000 00:00000000 00000000     0        0 12 1 0000000000000000 0 0 0 0 -1
   8: 0200FB0A:AEE5 0900FB0A:01BB 02 00000000:00000000 00:00000000 00000000     0        0 13 1 0000000000000000 0 0 0 0 -1
   9: 00000000:9800 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 14 1 0000000000000000 0 0 0 0 -1
  10: 0200FB0A:9800 0300FB0A:01BB 01 00000000:00000000 00:00000000 00000000     0        0 15 1 0000000000000000 0 0 0 0 -1
  11: 0200FB0A:9800 0100FB0A:1F90 01 00000000:00000000 00:00000000 00000000     0        0 16 1 0000000000000000 0 0 0 0 -1
`
	procTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000200FB0A:9500 0000000000000000FFFF00000300FB0A:01BB 01 00000000:00000000 00:00000000 00000000     0        0 8 1 0000000000000000 0 0 0 0 -1
   1: B80D0120000000000000000002000000:9600 B80D0120000000000000000009000000:01BB 02 00000000:00000000 00:00000000 00000000     0        0 9 1 0000000000000000 0 0 0 0 -1
`
	procUDP = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  10: 0200FB0A:9700 0300FB0A:14B4 01 00000000:00000000 00:00000000 00000000     0        0 10 2 0000000000000000 0
  11: 00000000:14B4 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 11 2 0000000000000000 0
`
)

func TestParseProcNet(t *testing.T) {
	tcp, err := parseProcNet([]byte(procTCP), unix.IPPROTO_TCP, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(tcp) != 12 || tcp[0].local != netip.MustParseAddrPort("10.251.0.2:37375") ||
		tcp[0].remote != netip.MustParseAddrPort("10.251.0.1:80") || tcp[0].state != tcpEstablished || tcp[1].state != tcpListen {
		t.Fatalf("tcp: %+v", tcp)
	}
	tcp6, err := parseProcNet([]byte(procTCP6), unix.IPPROTO_TCP, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(tcp6) != 2 || tcp6[0].remote != netip.MustParseAddrPort("10.251.0.3:443") ||
		tcp6[1].remote != netip.MustParseAddrPort("[2001:db8::9]:443") {
		t.Fatalf("tcp6: %+v (mapped addresses come out as IPv4)", tcp6)
	}
	udp, err := parseProcNet([]byte(procUDP), unix.IPPROTO_UDP, false)
	if err != nil {
		t.Fatal(err)
	}
	socks := slices.Concat(tcp, tcp6, udp)
	local := map[netip.Addr]bool{netip.MustParseAddr("10.251.0.2"): true}
	guard := []uint16{44773}
	// 7: 10.251.0.1 connected to the guarded port; 8 is a connection
	// from it being refused.
	if got, want := serverPeers(socks, guard, local), addrs("10.251.0.1"); !slices.Equal(got, want) {
		t.Errorf("server peers %v, want %v", got, want)
	}
	sc := cutScope{local: local, guard: guard, servers: map[netip.Addr]bool{netip.MustParseAddr("10.251.0.1"): true}}
	all := func(netip.Addr) bool { return true }
	flow := func(proto uint8, src, dst string) nft.Flow {
		return nft.Flow{Proto: proto, Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst)}
	}
	want := []nft.Flow{
		// 0: to the server's address, but from a port without a listener.
		flow(unix.IPPROTO_TCP, "10.251.0.2:37375", "10.251.0.1:80"),
		// 2: from the server's address to the listener on 44772: kept.
		// 3: loopback to our own address (a proxy's on 14999): kept.
		// 4: redirected to that proxy, maybe, but nothing proves it (the
		// proxy cuts it; its rule matches nothing). 5: TIME_WAIT.
		// 6: loopback.
		flow(unix.IPPROTO_TCP, "10.251.0.2:37376", "10.251.0.3:80"),
		// 7, 8: on the guarded port: kept.
		// 10: its port has a listener (9), but its peer is no server's.
		flow(unix.IPPROTO_TCP, "10.251.0.2:38912", "10.251.0.3:443"),
		// 11: a listener and the server's address: kept (no socket table
		// tells it from the server's connection to a proxied port).
		flow(unix.IPPROTO_TCP, "10.251.0.2:38144", "10.251.0.3:443"),
		flow(unix.IPPROTO_TCP, "[2001:db8::2]:38400", "[2001:db8::9]:443"),
		flow(unix.IPPROTO_UDP, "10.251.0.2:38656", "10.251.0.3:5300"),
	}
	if got := flowsToCut(socks, sc, all); !slices.Equal(got, want) {
		t.Errorf("flows to cut:\n got  %v\n want %v", got, want)
	}
	// Without the server's address known, a listener shields nothing.
	sc.servers = nil
	if got := flowsToCut(socks, sc, all); !slices.Contains(got, flow(unix.IPPROTO_TCP, "10.251.0.2:44772", "10.251.0.1:50000")) ||
		!slices.Contains(got, flow(unix.IPPROTO_TCP, "10.251.0.2:38912", "10.251.0.1:8080")) ||
		slices.ContainsFunc(got, func(f nft.Flow) bool { return f.Src.Port() == 44773 }) {
		t.Errorf("without servers, flows to cut: %v", got)
	}
	// deny decides.
	got := flowsToCut(socks, sc, func(a netip.Addr) bool {
		return a == netip.MustParseAddr("10.251.0.9") || a == netip.MustParseAddr("2001:db8::9")
	})
	if len(got) != 1 || got[0].Dst.Port() != 443 || !got[0].Dst.Addr().Is6() {
		t.Errorf("deny one address: %v", got)
	}
	for _, bad := range []string{"  0: 0200FB0A:91FF", "  0: 0200FB0A91FF 0100FB0A:0050 01", "  0: 0200FB0A:91FF 0100FB0A:0050 zz", "  0: 0200FB0X:91FF 0100FB0A:0050 01"} {
		if _, err := parseProcNet([]byte(bad), unix.IPPROTO_TCP, false); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzParseProcNet: never panics; whatever parses has valid addresses.
func FuzzParseProcNet(f *testing.F) {
	f.Add([]byte(procTCP), false)
	f.Add([]byte(procTCP6), true)
	f.Add([]byte(procUDP), false)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		socks, err := parseProcNet(b, unix.IPPROTO_TCP, v6)
		if err != nil {
			return
		}
		for _, s := range socks {
			if !s.local.IsValid() || !s.remote.Addr().IsValid() {
				t.Fatalf("%+v", s)
			}
		}
		_ = flowsToCut(socks, cutScope{guard: []uint16{44773}}, func(netip.Addr) bool { return true })
		_ = serverPeers(socks, []uint16{44773}, nil)
	})
}
