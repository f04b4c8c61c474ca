package egress

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
)

// allowsLocked decides the connections a policy change keeps: by IP rule,
// else by the names the address was answered for (past their TTL), else
// by the default.
func TestAllowsEstablished(t *testing.T) {
	s := &Controller{seen: map[netip.Addr][]string{}}
	api := netip.MustParseAddr("10.0.0.1")
	shared := netip.MustParseAddr("10.0.0.2")
	direct := netip.MustParseAddr("10.0.0.3")
	s.rememberLocked(api, "api.test")
	s.rememberLocked(shared, "cdn.test")
	s.rememberLocked(shared, "api.test")

	for _, tc := range []struct {
		name string
		pol  *policy.Policy
		want map[netip.Addr]bool
	}{
		{"name allowed", pol(policy.Deny, "allow api.test"),
			map[netip.Addr]bool{api: true, shared: true, direct: false}},
		{"another name allowed", pol(policy.Deny, "allow cdn.test"),
			map[netip.Addr]bool{api: false, shared: true, direct: false}},
		{"name denied under default allow", pol(policy.Allow, "deny api.test"),
			map[netip.Addr]bool{api: false, shared: true, direct: true}},
		{"wildcard", pol(policy.Deny, "allow *.test"),
			map[netip.Addr]bool{api: true, shared: true, direct: false}},
		{"an IP rule decides before names", pol(policy.Deny, "deny 10.0.0.2", "allow api.test", "allow cdn.test"),
			map[netip.Addr]bool{api: true, shared: false, direct: false}},
		{"CIDR allows what no name does", pol(policy.Deny, "allow 10.0.0.0/8"),
			map[netip.Addr]bool{api: true, shared: true, direct: true}},
		{"deny all", pol(policy.Deny),
			map[netip.Addr]bool{api: false, shared: false, direct: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := policy.Compile(*tc.pol)
			require.NoError(t, err)
			for a, want := range tc.want {
				assert.Equal(t, want, s.allowsLocked(c, a), "%v", a)
				mapped := netip.AddrFrom16(a.As16())
				assert.Equal(t, want, s.allowsLocked(c, mapped), "%v", mapped)
			}
		})
	}
}

func TestRememberIsBounded(t *testing.T) {
	s := &Controller{seen: map[netip.Addr][]string{}}
	a := netip.MustParseAddr("10.0.0.1")
	for i := range 3 * maxSeenNames {
		s.rememberLocked(a, fmt.Sprintf("n%d.test", i))
		s.rememberLocked(a, fmt.Sprintf("n%d.test", i)) // no duplicate
	}
	names := s.seen[a]
	require.Len(t, names, maxSeenNames)
	assert.Equal(t, fmt.Sprintf("n%d.test", 3*maxSeenNames-1), names[len(names)-1], "the newest name is kept")

	for i := range maxSeen + 10 {
		b := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		s.rememberLocked(b, "x.test")
	}
	assert.Len(t, s.seen, maxSeen)
}
