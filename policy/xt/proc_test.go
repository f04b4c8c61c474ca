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
	if len(tcp) != 7 || tcp[0].local != netip.MustParseAddrPort("10.251.0.2:37375") ||
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
	all := func(netip.Addr) bool { return true }
	got := flowsToCut(socks, local, 0, all)
	want := []nft.Flow{
		{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("10.251.0.2:37375"), Dst: netip.MustParseAddrPort("10.251.0.1:80")},
		// 2: from the listening port 44772: inbound, kept.
		// 3: loopback to our own address: kept. 5: TIME_WAIT. 6: loopback.
		{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("10.251.0.2:37376"), Dst: netip.MustParseAddrPort("10.251.0.3:80")},
		{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("10.251.0.2:38144"), Dst: netip.MustParseAddrPort("10.251.0.3:443")},
		{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("[2001:db8::2]:38400"), Dst: netip.MustParseAddrPort("[2001:db8::9]:443")},
		{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("10.251.0.2:38656"), Dst: netip.MustParseAddrPort("10.251.0.3:5300")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("flows to cut:\n got  %v\n want %v", got, want)
	}
	// A connection the proxy on 14999 (0x3A99) holds is the proxy's to cut.
	got = flowsToCut(socks, local, 0x3A99, all)
	if slices.ContainsFunc(got, func(f nft.Flow) bool { return f.Src.Port() == 0x9200 }) {
		t.Errorf("a proxied connection is cut by rule: %v", got)
	}
	// deny decides.
	got = flowsToCut(socks, local, 0, func(a netip.Addr) bool { return a == netip.MustParseAddr("10.251.0.1") })
	if len(got) != 1 || got[0].Dst.Port() != 80 {
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
		_ = flowsToCut(socks, nil, 15001, func(netip.Addr) bool { return true })
	})
}
