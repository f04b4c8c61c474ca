package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustCompile(t testing.TB, def Action, rules ...Rule) *Compiled {
	t.Helper()
	c, err := Compile(Policy{DefaultAction: def, Egress: rules})
	require.NoError(t, err)
	return c
}

func TestNameMatching(t *testing.T) {
	c := mustCompile(t, Deny,
		Rule{Action: Allow, Target: "example.com"},           // 0
		Rule{Action: Deny, Target: "*.example.com"},          // 1
		Rule{Action: Allow, Target: "api.example.com"},       // 2: shadowed by 1
		Rule{Action: Allow, Target: "*.Trusted.ORG."},        // 3
		Rule{Action: Deny, Target: "bad.trusted.org"},        // 4: shadowed by 3
		Rule{Action: Deny, Target: "*.x.trusted.org"},        // 5: shadowed by 3
		Rule{Action: Allow, Target: "*.pypi.org"},            // 6
		Rule{Action: Deny, Target: "10.0.0.0/8"},             // 7
		Rule{Action: Allow, Target: "10.1.2.3"},              // 8: shadowed by 7
		Rule{Action: Allow, Target: "2001:db8::/32"},         // 9
		Rule{Action: Deny, Target: "files.pythonhosted.org"}, // 10
		Rule{Action: Allow, Target: "*.pythonhosted.org"},    // 11
		Rule{Action: Allow, Target: "::ffff:192.0.2.0/120"},  // 12: stored as 192.0.2.0/24
	)
	tests := []struct {
		name  string
		allow bool
		index int
	}{
		{"example.com", true, 0},
		{"EXAMPLE.com.", true, 0},
		{"www.example.com", false, 1},
		{"api.example.com", false, 1},
		{"a.b.c.example.com", false, 1},
		{"notexample.com", false, -1},
		{"example.com.evil.net", false, -1},
		{"trusted.org", false, -1}, // wildcard does not cover the apex
		{"bad.trusted.org", true, 3},
		{"deep.x.trusted.org", true, 3},
		{"files.pythonhosted.org", false, 10},
		{"other.pythonhosted.org", true, 11},
		{"pypi.org", false, -1},
		{"upload.pypi.org", true, 6},
		{"org", false, -1},
		{"", false, -1},
		{".", false, -1},
		// IP literals are decided by IP rules only.
		{"10.1.2.3", false, 7},
		{"10.1.2.3.", false, 7},
		{"11.0.0.1", false, -1},
		{"2001:DB8::5", true, 9},
		{"[2001:db8::5]", true, 9},
		{"::ffff:10.0.0.1", false, 7},
		{"192.0.2.77", true, 12},
		{"fe80::1%eth0", false, -1},
		// All-numeric names that are not IPs are plain names.
		{"10.0.0.256", false, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := c.Name(tt.name)
			assert.Equal(t, tt.allow, d.Allow, d.Reason())
			assert.Equal(t, tt.index, d.Index, d.Reason())
			if d.Index >= 0 {
				assert.Equal(t, c.Policy().Egress[d.Index], d.Rule)
			} else {
				assert.Equal(t, Rule{Action: Deny}, d.Rule)
			}
		})
	}
}

func TestAddrMatching(t *testing.T) {
	c := mustCompile(t, Allow,
		Rule{Action: Deny, Target: "10.0.0.0/8"},        // 0
		Rule{Action: Allow, Target: "10.1.2.3"},         // 1: shadowed by 0
		Rule{Action: Allow, Target: "192.168.1.1"},      // 2
		Rule{Action: Deny, Target: "192.168.0.0/16"},    // 3
		Rule{Action: Deny, Target: "example.com"},       // 4: names never match addresses
		Rule{Action: Deny, Target: "2001:db8::/32"},     // 5
		Rule{Action: Allow, Target: "2001:db8:1::1"},    // 6: shadowed by 5
		Rule{Action: Deny, Target: "::1"},               // 7
		Rule{Action: Deny, Target: "::ffff:172.16.0.1"}, // 8: stored as 172.16.0.1
	)
	tests := []struct {
		addr  string
		allow bool
		index int
	}{
		{"10.1.2.3", false, 0},
		{"10.255.255.255", false, 0},
		{"11.0.0.0", true, -1},
		{"192.168.1.1", true, 2},
		{"192.168.1.2", false, 3},
		{"::ffff:192.168.1.1", true, 2}, // mapped treated as IPv4
		{"::ffff:10.0.0.1", false, 0},
		{"2001:db8:1::1", false, 5},
		{"2001:db9::1", true, -1},
		{"::1", false, 7},
		{"127.0.0.1", true, -1}, // IPv4 loopback is not ::1
		{"172.16.0.1", false, 8},
		{"::ffff:172.16.0.1", false, 8},
		{"fe80::1%eth0", true, -1},
		{"2001:db8::1%eth0", false, 5}, // zone ignored
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			d := c.Addr(netip.MustParseAddr(tt.addr))
			assert.Equal(t, tt.allow, d.Allow, d.Reason())
			assert.Equal(t, tt.index, d.Index, d.Reason())
		})
	}
	d := c.Addr(netip.Addr{})
	assert.Equal(t, Decision{Allow: true, Index: -1, Rule: Rule{Action: Allow}}, d, "invalid address gets the default")

	// An IPv4 rule does not match IPv6 space beyond the mapped range.
	c = mustCompile(t, Deny, Rule{Action: Allow, Target: "0.0.0.0/0"})
	assert.True(t, c.Addr(netip.MustParseAddr("::ffff:8.8.8.8")).Allow)
	assert.False(t, c.Addr(netip.MustParseAddr("2001:4860::8888")).Allow)
}

func TestIPRules(t *testing.T) {
	c := mustCompile(t, Deny,
		Rule{Action: Allow, Target: "a.com"}, Rule{Action: Deny, Target: "10.0.0.0/8"}, Rule{Action: Allow, Target: "*.b.com"}, Rule{Action: Allow, Target: "::ffff:1.2.3.4"}, Rule{Action: Deny, Target: "2001:db8::/32"})
	assert.Equal(t, []IPRule{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Allow: false, Index: 1},
		{Prefix: netip.MustParsePrefix("1.2.3.4/32"), Allow: true, Index: 3},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Allow: false, Index: 4},
	}, c.IPRules())
	r := c.IPRules()
	r[0].Allow = true
	assert.False(t, c.IPRules()[0].Allow, "IPRules returns a copy")
	assert.True(t, c.HasNameRules())
	assert.False(t, mustCompile(t, Deny, Rule{Action: Allow, Target: "1.1.1.1"}).HasNameRules())
}

func TestNilCompiled(t *testing.T) {
	var c *Compiled
	d := c.Name("anything.example")
	assert.Equal(t, Decision{Allow: true, Index: -1}, d)
	assert.Equal(t, "allowed: no policy", d.Reason())
	assert.Equal(t, d, c.Addr(netip.MustParseAddr("10.0.0.1")))
	assert.Equal(t, ModeAllowAll, c.Mode())
	assert.True(t, c.DefaultAllow())
	assert.Nil(t, c.IPRules())
	assert.False(t, c.HasNameRules())
	assert.Equal(t, Policy{Egress: []Rule{}}, c.Policy())
	assert.NoError(t, d.Err("x"))
}

func TestMode(t *testing.T) {
	tests := []struct {
		def   Action
		rules []Rule
		want  string
	}{
		{Allow, nil, ModeAllowAll},
		{Allow, []Rule{{Action: Allow, Target: "a.com"}}, ModeAllowAll},
		{Allow, []Rule{{Action: Deny, Target: "a.com"}}, ModeEnforcing},
		{"", nil, ModeDenyAll},
		{Deny, []Rule{{Action: Deny, Target: "a.com"}}, ModeDenyAll},
		{Deny, []Rule{{Action: Allow, Target: "10.0.0.0/8"}}, ModeEnforcing},
	}
	for _, tt := range tests {
		c := mustCompile(t, tt.def, tt.rules...)
		assert.Equal(t, tt.want, c.Mode(), "%s %v", tt.def, tt.rules)
		assert.Equal(t, tt.def == Allow, c.DefaultAllow())
	}
}

func TestCompileInvalid(t *testing.T) {
	_, err := Compile(Policy{Egress: []Rule{{Action: Allow, Target: "ok.com"}, {Action: Allow, Target: "not ok"}}})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, `egress[1].target "not ok": not a domain, wildcard, IP or CIDR`, err.Error())
}

func TestCompiledPolicyIsCopy(t *testing.T) {
	in := Policy{Egress: []Rule{{Action: Allow, Target: "A.com"}}}
	c, err := Compile(in)
	require.NoError(t, err)
	assert.Equal(t, "A.com", in.Egress[0].Target, "input not modified")
	p := c.Policy()
	assert.Equal(t, Policy{DefaultAction: Deny, Egress: []Rule{{Action: Allow, Target: "a.com"}}}, p)
	p.Egress[0].Target = "b.com"
	assert.True(t, c.Name("a.com").Allow)
	assert.Equal(t, "a.com", c.Policy().Egress[0].Target)
}

func TestReasonAndDeniedError(t *testing.T) {
	c := mustCompile(t, Deny, Rule{Action: Allow, Target: "example.com"}, Rule{Action: Deny, Target: "b.com"}, Rule{Action: Deny, Target: "*.example.com"})
	assert.Equal(t, "allowed by rule 0 (allow example.com)", c.Name("example.com").Reason())
	assert.Equal(t, "denied by rule 2 (deny *.example.com)", c.Name("x.example.com").Reason())
	assert.Equal(t, "denied by the default action (deny)", c.Name("other.net").Reason())
	assert.Equal(t, "allowed by the default action (allow)", mustCompile(t, Allow).Name("x").Reason())
	assert.Equal(t, "denied by rule 1 (deny b.com)", fmt.Sprint(c.Name("B.com")))

	err := c.Name("x.example.com").Err("x.example.com")
	require.Error(t, err)
	assert.Equal(t, "egress to x.example.com denied by rule 2 (deny *.example.com)", err.Error())
	assert.ErrorIs(t, err, ErrDenied)
	wrapped := fmt.Errorf("dial: %w", err)
	assert.ErrorIs(t, wrapped, ErrDenied)
	var de *DeniedError
	require.True(t, errors.As(wrapped, &de))
	assert.Equal(t, 2, de.Decision.Index)
	assert.NoError(t, c.Name("example.com").Err("example.com"))
	assert.Equal(t, "egress to 10.0.0.1 denied by the default action (deny)",
		c.Addr(netip.MustParseAddr("10.0.0.1")).Err("10.0.0.1").Error())
}

func TestLongNames(t *testing.T) {
	c := mustCompile(t, Allow, Rule{Action: Deny, Target: "*.example.com"})
	long := strings.Repeat("a.", 200) + "Example.com"
	d := c.Name(long)
	assert.False(t, d.Allow, "a wildcard covers names longer than 253 bytes too")
	assert.Equal(t, 0, d.Index)
}

func TestNameAndAddrDoNotAllocate(t *testing.T) {
	c := benchPolicy(t)
	addr := netip.MustParseAddr("203.0.113.9")
	mapped := netip.MustParseAddr("::ffff:203.0.113.9")
	for _, name := range []string{"www.Host42.example.com.", "unknown.name.test", "10.20.30.40", "2001:db8::1", "1password.com"} {
		allocs := testing.AllocsPerRun(100, func() { _ = c.Name(name) })
		assert.Zero(t, allocs, name)
	}
	allocs := testing.AllocsPerRun(100, func() { _ = c.Addr(addr); _ = c.Addr(mapped) })
	assert.Zero(t, allocs)
}

func TestConcurrentUse(t *testing.T) {
	c := benchPolicy(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				_ = c.Name(fmt.Sprintf("h%d.host%d.example.com", i, i%100))
				_ = c.Addr(netip.AddrFrom4([4]byte{10, byte(g), byte(i), 1}))
			}
		}()
	}
	wg.Wait()
}
