package xt

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy/nft"
)

// recorder stands in for the kernel below a Table: it keeps the tables
// each replace put in force (decoded), fails the replaces it is told to,
// and lists the sockets it is given.
type recorder struct {
	mu     sync.Mutex
	fail   int         // the next fail replaces fail
	tries  []time.Time // when each replace was tried
	tables map[string]*table
	socks  []sock
}

func (r *recorder) replace(_ int, f family, blob []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries = append(r.tries, time.Now())
	if r.fail > 0 {
		r.fail--
		return unix.EIO
	}
	tab, err := decodeReplace(blob, f)
	if err != nil {
		return err
	}
	r.tables[f.String()+" "+tab.name] = tab
	return nil
}

func (r *recorder) list(string) ([]sock, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.socks), nil
}

// table is the table in force, "" before any.
func (r *recorder) table(name string) *table {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tables[name]
}

func (r *recorder) set(fail int, socks []sock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail, r.socks = fail, socks
}

func (r *recorder) triesSince(n int) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tries[n:])
}

// fakeTable is a Table of both families over a recorder, whose namespace
// has the addresses 10.251.0.2 and fd00::2: the logic above the ABI,
// without root.
func fakeTable(t *testing.T) (*Table, *recorder) {
	t.Helper()
	rec := &recorder{tables: map[string]*table{}}
	tab := newTable("fake", slog.New(slog.DiscardHandler))
	for i := range tab.socks {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		tab.socks[i] = fd // never used: the recorder replaces
	}
	tab.sys = sys{replace: rec.replace, sockets: rec.list, addrs: func(string) ([]netip.Addr, error) {
		return addrs("10.251.0.2", "fd00::2"), nil
	}}
	t.Cleanup(func() { tab.Close() })
	return tab, rec
}

// waitFor polls cond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasRule(tab *table, line string) bool {
	return tab != nil && slices.Contains(strings.Split(tab.String(), "\n"), line)
}

func tcpSock(src, dst string, state uint8) sock {
	return sock{proto: unix.IPPROTO_TCP, local: netip.MustParseAddrPort(src), remote: netip.MustParseAddrPort(dst), state: state}
}

// TestRetryFailedReplace: when the replace that drops an expired address
// fails, it is tried again, waiting longer each time, until one
// succeeds; the address is forgotten only then.
func TestRetryFailedReplace(t *testing.T) {
	tab, rec := fakeTable(t)
	if err := tab.Apply(nft.Rules{Enforce: true}, nil); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("192.0.2.1")
	if err := tab.Learn([]netip.Addr{a}, time.Second); err != nil {
		t.Fatal(err)
	}
	const accept = "-A HYBOX-OUT -d 192.0.2.1/32 -j ACCEPT"
	if !hasRule(rec.table("IPv4 filter"), accept) {
		t.Fatalf("the learned address is not allowed:\n%s", rec.table("IPv4 filter"))
	}
	const failures = 3
	start := len(rec.triesSince(0))
	rec.set(failures, nil)
	waitFor(t, nft.MinTTL+expirySlack+5*time.Second, "the expired address is still allowed", func() bool {
		return !hasRule(rec.table("IPv4 filter"), accept)
	})
	tries := rec.triesSince(start)
	if len(tries) != failures+1 {
		t.Errorf("%d tries, want %d failed ones and the one that succeeded", len(tries), failures)
	}
	for i := 1; i < len(tries); i++ {
		if gap, least := tries[i].Sub(tries[i-1]), retryMin<<(i-1); gap < least {
			t.Errorf("try %d came %v after the one before, want at least %v", i, gap, least)
		}
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if _, ok := tab.learned[a]; ok || tab.dirty {
		t.Errorf("after the retry: learned %v, dirty %v", tab.learned, tab.dirty)
	}
}

// TestCutRetried: a cut whose replace fails is not dropped: it is in
// force once a replace succeeds.
func TestCutRetried(t *testing.T) {
	tab, rec := fakeTable(t)
	if err := tab.Apply(nft.Rules{Enforce: true, DefaultAllow: true}, nil); err != nil {
		t.Fatal(err)
	}
	rec.set(2, []sock{tcpSock("10.251.0.2:40000", "192.0.2.9:443", tcpEstablished)})
	cut, err := tab.Cut(func(netip.Addr) bool { return true })
	if !errors.As(err, new(*replaceError)) || len(cut) != 1 {
		t.Fatalf("cut %v, %v; want the flow, and the replace's failure", cut, err)
	}
	const rule = "-A HYBOX-CUT -s 10.251.0.2/32 -d 192.0.2.9/32 -p tcp -m tcp --sport 40000 --dport 443 --tcp-flags RST NONE -j REJECT --reject-with tcp-reset"
	waitFor(t, 5*time.Second, "the cut is not in force", func() bool { return hasRule(rec.table("IPv4 filter"), rule) })
}

// cutBy says what HYBOX-CUT of tab does with the packets of fl: "flow"
// (a rule of its own), "prefix" (a rule for a prefix of its
// destination), or "" (nothing).
func cutBy(tab *table, fl nft.Flow) string {
	for _, c := range tab.chains {
		if c.name != chainCut {
			continue
		}
		for _, r := range c.rules {
			if r.src.IsValid() {
				m := r.matches[0]
				if r.src.Addr() == fl.Src.Addr() && r.dst.Addr() == fl.Dst.Addr() && r.proto == fl.Proto &&
					m.sport[0] == fl.Src.Port() && m.dport[0] == fl.Dst.Port() {
					return "flow"
				}
				continue
			}
			if r.dst.IsValid() && !r.dst.Contains(fl.Dst.Addr()) {
				continue
			}
			if r.target.kind == tReturn {
				return ""
			}
			return "prefix"
		}
	}
	return ""
}

// TestCutFallback: flows whose rules do not fit are cut by their
// destinations, then by ever shorter prefixes, never left alone; the
// server's connections into the namespace go on through every prefix.
func TestCutFallback(t *testing.T) {
	const (
		ourAddr = "10.251.0.2"
		agent   = 44773
	)
	server := netip.MustParseAddr("11.0.0.99")
	// The server's connections: to the agent, and to a listener.
	serverSocks := []sock{
		tcpSock(ourAddr+":44773", "11.0.0.99:50000", tcpEstablished),
		{proto: unix.IPPROTO_TCP, local: netip.MustParseAddrPort("0.0.0.0:9000"), remote: netip.MustParseAddrPort("0.0.0.0:0"), state: tcpListen},
		tcpSock(ourAddr+":9000", "11.0.0.99:50001", tcpEstablished),
	}
	kept := []nft.Flow{
		{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort(ourAddr + ":44773"), Dst: netip.MustParseAddrPort("11.0.0.99:50000")},
		{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort(ourAddr + ":9000"), Dst: netip.MustParseAddrPort("11.0.0.99:50001")},
	}
	flows := func(n int, dst func(i int) netip.AddrPort, src netip.Addr) []sock {
		var out []sock
		for i := range n {
			out = append(out, sock{proto: unix.IPPROTO_TCP, local: netip.AddrPortFrom(src, uint16(20000+i)), remote: dst(i), state: tcpEstablished})
		}
		return out
	}
	our4, our6 := netip.MustParseAddr(ourAddr), netip.MustParseAddr("fd00::2")
	for _, tc := range []struct {
		name  string
		socks []sock
		// want is what cuts the flows to other addresses than the
		// server's: "flow" or "prefix".
		want string
		// bits is the longest prefix a cut may use (-1: any).
		bits int
	}{
		{"few flows", flows(20, func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 443)
		}, our4), "flow", -1},
		{"one destination", flows(300, func(int) netip.AddrPort { return netip.MustParseAddrPort("192.0.2.9:443") }, our4), "prefix", 32},
		{"many destinations", flows(2000, func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(11 + i%100), byte(i / 100), byte(i), 1}), 443)
		}, our4), "prefix", -1},
		{"many IPv6 destinations", flows(1000, func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 4: byte(i >> 8), 5: byte(i), 15: 1}), 443)
		}, our6), "prefix", -1},
		{"flows to the server's address", flows(400, func(int) netip.AddrPort { return netip.AddrPortFrom(server, 443) }, our4), "flow", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, rec := fakeTable(t)
			r := nft.Rules{Enforce: true, GuardPorts: []uint16{agent}}
			rec.set(0, serverSocks)
			if err := tab.Apply(r, nil); err != nil {
				t.Fatal(err)
			}
			// 150 learned addresses, which go early to make room when
			// they must.
			var learned []netip.Addr
			for i := range 150 {
				learned = append(learned, netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}))
			}
			if err := tab.Learn(learned, time.Hour); err != nil {
				t.Fatal(err)
			}
			rec.set(0, slices.Concat(serverSocks, tc.socks))
			cut, err := tab.Cut(func(netip.Addr) bool { return true })
			if err != nil {
				t.Fatalf("cut: %v", err)
			}
			if len(cut) != len(tc.socks) {
				t.Errorf("cut %d flows, want %d", len(cut), len(tc.socks))
			}
			filter := rec.table("IPv4 filter")
			if tc.socks[0].local.Addr().Is6() {
				filter = rec.table("IPv6 filter")
			}
			for _, fl := range kept {
				if got := cutBy(rec.table("IPv4 filter"), fl); got != "" {
					t.Errorf("the server's connection %v is cut by %s", fl, got)
				}
			}
			waiting := 0
			for _, s := range tc.socks {
				fl := nft.Flow{Proto: s.proto, Src: s.local, Dst: s.remote}
				switch got := cutBy(filter, fl); {
				case got == "" && s.remote.Addr() == server:
					waiting++ // too many for the budget: the next round's
				case got == "":
					t.Fatalf("%v is not cut", fl)
				case s.remote.Addr() != server && got != tc.want:
					t.Fatalf("%v is cut by %s, want %s", fl, got, tc.want)
				}
			}
			if waiting > 0 && waiting == len(tc.socks) {
				t.Errorf("none of the flows to the server's address is cut")
			}
			var nets []string
			for _, c := range filter.chains {
				for _, r := range c.rules {
					if c.name == chainCut && r.target.kind == tJump {
						nets = append(nets, fmt.Sprint(r.dst))
						if tc.bits >= 0 && r.dst.Bits() > tc.bits {
							t.Errorf("cut by %v, want at most /%d", r.dst, tc.bits)
						}
					}
				}
			}
			t.Logf("%d flows: %d prefixes %v, %d flows to the server waiting, %d learned addresses left",
				len(tc.socks), len(nets), nets[:min(len(nets), 4)], waiting, len(tab.learned))
		})
	}
}

// TestFloor: the policy's IP rules leave room for the coarsest cut, so
// that the most IP rules Apply takes do not stop a cut of thousands of
// destinations.
func TestFloor(t *testing.T) {
	tab, rec := fakeTable(t)
	r := nft.Rules{Enforce: true, GuardPorts: []uint16{44773}, BypassMark: mark, RedirectPort: 15001}
	n := 0
	for ; ; n++ {
		r.IPRules = append(r.IPRules, nft.IPRule{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}), 32), Allow: true})
		err := tab.Apply(r, nil)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d IPv4 IP rules fit", n)
	if n < 130 || n > 175 {
		t.Errorf("%d IP rules fit, want about 155", n)
	}
	r.IPRules = r.IPRules[:n]
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}
	var socks []sock
	for i := range 3000 {
		socks = append(socks, tcpSock("10.251.0.2:"+fmt.Sprint(10000+i), netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(11 + i%100), byte(i), 0, 1}), 80).String(), tcpEstablished))
	}
	rec.set(0, socks)
	if cut, err := tab.Cut(func(netip.Addr) bool { return true }); err != nil || len(cut) != len(socks) {
		t.Fatalf("cut %d of %d flows: %v", len(cut), len(socks), err)
	}
}
