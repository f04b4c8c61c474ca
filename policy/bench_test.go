package policy

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchPolicy is a realistic 100-rule policy: exact names, wildcards, IPv4
// and IPv6 CIDRs and addresses, interleaved.
func benchPolicy(tb testing.TB) *Compiled {
	tb.Helper()
	var rules []Rule
	for i := 0; i < 25; i++ {
		rules = append(rules,
			Rule{Action: Allow, Target: fmt.Sprintf("api.host%d.example.com", i)},
			Rule{Action: Deny, Target: fmt.Sprintf("*.host%d.example.com", i*4)},
			Rule{Action: Allow, Target: fmt.Sprintf("10.%d.0.0/16", i)},
			Rule{Action: Deny, Target: fmt.Sprintf("2001:db8:%x::/48", i)},
		)
	}
	c, err := Compile(Policy{DefaultAction: Deny, Egress: rules})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func BenchmarkName(b *testing.B) {
	c := benchPolicy(b)
	for _, name := range []string{"api.host7.example.com", "www.Host40.example.com.", "a.b.c.unknown.test", "10.20.30.40"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.Name(name)
			}
		})
	}
}

func BenchmarkAddr(b *testing.B) {
	c := benchPolicy(b)
	for _, s := range []string{"10.0.1.1", "10.24.1.1", "203.0.113.1", "2001:db8:18::1", "::ffff:10.3.0.1"} {
		a := netip.MustParseAddr(s)
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.Addr(a)
			}
		})
	}
}
