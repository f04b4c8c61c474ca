package xt

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy/nft"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const mark = 0x68796278

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// goldenModels are the cases of the golden files: the tables of a Pod's
// agent under each kind of policy.
var goldenModels = []struct {
	name string
	m    model
}{
	{"unrestricted", model{rules: nft.Rules{BypassMark: mark, GuardPorts: []uint16{44773}},
		local: addrs("10.248.0.5")}},
	{"unrestricted-vault", model{rules: nft.Rules{BypassMark: mark, GuardPorts: []uint16{44773}, RedirectPort: 15001},
		local: addrs("10.248.0.5", "fd00::5")}},
	{"default-deny", model{
		rules: nft.Rules{Enforce: true, BypassMark: mark, GuardPorts: []uint16{44773}, RedirectPort: 15001,
			IPRules: []nft.IPRule{
				{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Allow: true},
				{Prefix: netip.MustParsePrefix("::ffff:10.2.0.0/112"), Allow: false},
				{Prefix: netip.MustParsePrefix("2001:db8::/32"), Allow: true},
			}},
		local:   addrs("10.248.0.5", "fd00::5"),
		learned: addrs("192.0.2.1", "192.0.2.2", "2001:db8:1::1"),
		cuts: []nft.Flow{
			{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("10.248.0.5:40000"), Dst: netip.MustParseAddrPort("192.0.2.9:443")},
			{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("[fd00::5]:40001"), Dst: netip.MustParseAddrPort("[2001:db8:2::1]:443")},
		},
		// Cut by prefix, the server's address inside one excepted.
		cutNets: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:3::/48")},
		servers: addrs("10.248.0.1", "198.51.100.10"),
	}},
	{"default-allow-blocked", model{
		rules:   nft.Rules{Enforce: true, DefaultAllow: true, IPRules: []nft.IPRule{{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Allow: true}}},
		learned: addrs("192.0.2.1"), // takes no rule: the default allows it anyway
		blocked: addrs("198.51.100.7", "2001:db8::7"),
	}},
}

// TestGolden: the four tables of each case, as the bytes of the replace
// and as iptables-save would print them (decoded back from those bytes).
// go test -run TestGolden -update rewrites testdata/.
func TestGolden(t *testing.T) {
	for _, tc := range goldenModels {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for _, f := range families {
				for _, tab := range []*table{tc.m.filter(f), tc.m.nat(f)} {
					blob, err := tab.encode()
					if err != nil {
						t.Fatal(err)
					}
					back, err := decodeReplace(blob, f)
					if err != nil {
						t.Fatalf("%s %s: decode: %v", f, tab.name, err)
					}
					fmt.Fprintf(&b, "# %s %s, %d bytes\n%s%s\n", f, tab.name, len(blob), back, hexDump(blob))
				}
			}
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("%s differs from the tables compiled now (-update rewrites it):\n%s", path, firstDiff(got, string(want)))
			}
		})
	}
}

// hexDump prints b 16 bytes a line, with offsets.
func hexDump(b []byte) string {
	var s strings.Builder
	for off := 0; off < len(b); off += 16 {
		end := min(off+16, len(b))
		fmt.Fprintf(&s, "%04x  %s\n", off, hex.EncodeToString(b[off:end]))
	}
	return s.String()
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got  %q\n want %q", i+1, gl, wl)
		}
	}
	return "(no difference)"
}

// TestLayout: the fixed parts of the encoding are where the kernel's
// structures have them.
func TestLayout(t *testing.T) {
	m := model{rules: nft.Rules{Enforce: true, RedirectPort: 15001}}
	blob, err := m.filter(v4).encode()
	if err != nil {
		t.Fatal(err)
	}
	if got := cString(blob[:32]); got != "filter" {
		t.Errorf("name %q", got)
	}
	if got := ne.Uint32(blob[32:]); got != filterHooks {
		t.Errorf("valid hooks %#x", got)
	}
	if got := ne.Uint32(blob[40:]); int(got) != len(blob)-sizeReplace {
		t.Errorf("size %d of %d", got, len(blob)-sizeReplace)
	}
	// INPUT is its policy alone, an unconditional ACCEPT at offset 0.
	e := blob[sizeReplace:]
	if ne.Uint32(blob[44+4*hookLocalIn:]) != 0 || ne.Uint32(blob[64+4*hookLocalIn:]) != 0 {
		t.Error("INPUT enters and underflows at 0")
	}
	if ne.Uint16(e[88:]) != sizeEntry4 || ne.Uint16(e[90:]) != sizeEntry4+sizeStandard {
		t.Errorf("target offset %d, next offset %d", ne.Uint16(e[88:]), ne.Uint16(e[90:]))
	}
	if v := int32(ne.Uint32(e[sizeEntry4+32:])); v != verdictAccept {
		t.Errorf("verdict %d", v)
	}
	// The table ends with an ERROR entry.
	end := e[len(e)-sizeEntry4-sizeError:]
	if got := cString(end[sizeEntry4+2 : sizeEntry4+31]); got != nameError {
		t.Errorf("last target %q", got)
	}
	nat, err := m.nat(v6).encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeReplace(nat, v6)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(back.String(), "-A HYBOX-PROXY -p tcp -j REDIRECT --to-ports 15001") {
		t.Errorf("IPv6 nat:\n%s", back)
	}
}

// TestEncodeRoundTrip: decoding an encoding and encoding it again gives
// the same bytes.
func TestEncodeRoundTrip(t *testing.T) {
	for _, tc := range goldenModels {
		for _, f := range families {
			for _, tab := range []*table{tc.m.filter(f), tc.m.nat(f)} {
				blob, err := tab.encode()
				if err != nil {
					t.Fatal(err)
				}
				back, err := decodeReplace(blob, f)
				if err != nil {
					t.Fatal(err)
				}
				again, err := back.encode()
				if err != nil {
					t.Fatal(err)
				}
				if string(again) != string(blob) {
					t.Errorf("%s %s %s: the round trip changed the bytes", tc.name, f, tab.name)
				}
			}
		}
	}
}

// TestBudget: a table holds about 175 addresses of one family within
// MaxBlob; past that encode says how big it would be.
func TestBudget(t *testing.T) {
	for _, f := range families {
		m := model{rules: nft.Rules{Enforce: true, BypassMark: mark, GuardPorts: []uint16{44773}, RedirectPort: 15001},
			local: addrs("10.248.0.5", "fd00::5")}
		n := 0
		for ; ; n++ {
			a := netip.AddrFrom4([4]byte{192, 0, byte(n >> 8), byte(n)})
			if f == v6 {
				a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(n >> 8), 15: byte(n)})
			}
			m.learned = append(m.learned, a)
			_, ferr := m.filter(f).encode()
			_, nerr := m.nat(f).encode()
			if err := errors.Join(ferr, nerr); err != nil {
				var be *BudgetError
				if !errors.As(err, &be) || be.Size <= MaxBlob {
					t.Fatalf("%s: %v", f, err)
				}
				break
			}
		}
		t.Logf("%s: %d learned addresses fit", f, n)
		if lo, hi := 150, 215; f == v6 {
			if n < 110 || n > 170 {
				t.Errorf("%s: %d addresses fit, want about 135", f, n)
			}
		} else if n < lo || n > hi {
			t.Errorf("%s: %d addresses fit, want about 180", f, n)
		}
	}
}

// TestEncodeRefuses: what encode cannot express is an error, not a
// broken blob.
func TestEncodeRefuses(t *testing.T) {
	base := func() *table { m := model{rules: nft.Rules{Enforce: true}}; return m.filter(v4) }
	for name, mutate := range map[string]func(*table){
		"jump nowhere": func(t *table) { t.chains[2].rules = append(t.chains[2].rules, rule{target: jump("NOPE")}) },
		"v6 address": func(t *table) {
			t.chains[2].rules = append(t.chains[2].rules, rule{dst: netip.MustParsePrefix("::1/128")})
		},
		"missing hook":   func(t *table) { t.chains = t.chains[1:] },
		"long interface": func(t *table) { t.chains[2].rules = append(t.chains[2].rules, rule{out: "a-very-long-name0"}) },
		"redirect no -p": func(t *table) {
			t.chains[2].rules = append(t.chains[2].rules, rule{target: target{kind: tRedirect, port: 1}})
		},
		"duplicate chain": func(t *table) { t.chains = append(t.chains, t.chains[len(t.chains)-1]) },
	} {
		tab := base()
		mutate(tab)
		if _, err := tab.encode(); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// TestDecodeRefuses: blobs encode never writes are refused.
func TestDecodeRefuses(t *testing.T) {
	m := model{rules: nft.Rules{Enforce: true, BypassMark: mark}}
	good, err := m.filter(v4).encode()
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func([]byte){
		"short":            func(b []byte) {},
		"size":             func(b []byte) { ne.PutUint32(b[40:], 8) },
		"hooks":            func(b []byte) { ne.PutUint32(b[32:], 1) },
		"entries":          func(b []byte) { ne.PutUint32(b[36:], 1) },
		"hook offset":      func(b []byte) { ne.PutUint32(b[44+4*hookLocalOut:], 3) },
		"inverse flags":    func(b []byte) { b[sizeReplace+83] = 1 },
		"next offset":      func(b []byte) { ne.PutUint16(b[sizeReplace+90:], 4) },
		"unknown verdict":  func(b []byte) { ne.PutUint32(b[sizeReplace+sizeEntry4+32:], uint32(0xfffffff0)) },
		"input interface":  func(b []byte) { b[sizeReplace+16] = 'x' },
		"underflow target": func(b []byte) { ret := verdictReturn; ne.PutUint32(b[sizeReplace+sizeEntry4+32:], uint32(ret)) },
	} {
		b := append([]byte(nil), good...)
		if name == "short" {
			b = b[:50]
		}
		mutate(b)
		if _, err := decodeReplace(b, v4); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDecode: decoding never panics, and what decodes encodes to bytes
// that decode to the same table.
func FuzzDecode(f *testing.F) {
	for _, tc := range goldenModels {
		for _, fam := range families {
			for _, tab := range []*table{tc.m.filter(fam), tc.m.nat(fam)} {
				blob, err := tab.encode()
				if err != nil {
					f.Fatal(err)
				}
				f.Add(blob, fam == v6)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, is6 bool) {
		fam := v4
		if is6 {
			fam = v6
		}
		tab, err := decodeReplace(b, fam)
		if err != nil {
			return
		}
		again, err := tab.encode()
		if err != nil {
			var be *BudgetError
			if errors.As(err, &be) {
				return
			}
			t.Fatalf("a decoded table does not encode: %v\n%s", err, tab)
		}
		back, err := decodeReplace(again, fam)
		if err != nil {
			t.Fatalf("an encoded table does not decode: %v\n%s", err, tab)
		}
		if back.String() != tab.String() {
			t.Fatalf("round trip:\n%s\nbecame\n%s", tab, back)
		}
	})
}
