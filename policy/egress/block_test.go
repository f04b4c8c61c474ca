package egress

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
)

type blockCall struct {
	name  string
	addrs []netip.Addr
}

// blockingSandbox returns a controller for p whose OnBlock calls arrive on
// the returned channel.
func blockingSandbox(t *testing.T, e *env, p *policy.Policy) (*Controller, chan blockCall) {
	t.Helper()
	calls := make(chan blockCall, 16)
	s := e.sandbox(t, Config{Policy: p, OnBlock: func(name string, addrs []netip.Addr) {
		calls <- blockCall{name, addrs}
	}})
	return s, calls
}

func waitBlock(t *testing.T, calls chan blockCall) blockCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no addresses were blocked")
		return blockCall{}
	}
}

// Under default allow, the addresses of a name a deny rule names are
// blocked as soon as the policy is set: reaching them by address fails.
func TestBlockDeniedNamesAddresses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pub4, pub6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	s, calls := blockingSandbox(t, e, pol(policy.Allow, "deny pub.test"))
	c := waitBlock(t, calls)
	assert.Equal(t, "pub.test", c.name)
	assert.ElementsMatch(t, []netip.Addr{pub4, pub6}, c.addrs)

	for _, a := range []netip.Addr{pub4, pub6} {
		_, err := s.allowedAddrs(ctx, a.String())
		require.ErrorIs(t, err, policy.ErrDenied, "%v", a)
		assert.ErrorContains(t, err, "an address of pub.test) denied by rule 0 (deny pub.test)")
		assert.False(t, s.allowsLocked(s.Policy(), a), "an established connection to %v is cut", a)
	}
	other := netip.MustParseAddr("192.0.2.77")
	_, err := s.allowedAddrs(ctx, other.String())
	assert.NoError(t, err, "other addresses follow the default")

	// An IP rule that allows the address comes first.
	require.NoError(t, s.SetPolicy(pol(policy.Allow, "allow 192.0.2.1", "deny pub.test")))
	waitBlock(t, calls) // resolved again after the change
	_, err = s.allowedAddrs(ctx, pub4.String())
	assert.NoError(t, err)
	_, err = s.allowedAddrs(ctx, pub6.String())
	assert.ErrorIs(t, err, policy.ErrDenied)

	// Without the deny rule the addresses are free again.
	require.NoError(t, s.SetPolicy(pol(policy.Allow, "deny other.test")))
	_, err = s.allowedAddrs(ctx, pub6.String())
	assert.NoError(t, err)
	assert.Equal(t, "other.test", waitBlock(t, calls).name)
}

// A name denied by a wildcard is resolved when the sandbox asks for it,
// and its addresses blocked.
func TestBlockOnDemand(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, calls := blockingSandbox(t, e, pol(policy.Allow, "deny *.cdn.test"))
	_, err := s.allowedAddrs(ctx, "x.cdn.test")
	require.ErrorIs(t, err, policy.ErrDenied)
	c := waitBlock(t, calls)
	assert.Equal(t, "x.cdn.test", c.name)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.9")}, c.addrs)
	_, err = s.allowedAddrs(ctx, "192.0.2.9")
	assert.ErrorContains(t, err, "an address of x.cdn.test) denied by rule 0 (deny *.cdn.test)")

	// Asked again, it is not resolved again while blocked.
	_, err = s.allowedAddrs(ctx, "x.cdn.test")
	require.ErrorIs(t, err, policy.ErrDenied)
	select {
	case c := <-calls:
		t.Fatalf("resolved again: %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
}

// Under default deny nothing is blocked and nothing is resolved.
func TestNoBlockingUnderDefaultDeny(t *testing.T) {
	e := newEnv(t)
	s, calls := blockingSandbox(t, e, pol(policy.Deny, "allow ok.test", "deny pub.test"))
	_, err := s.allowedAddrs(context.Background(), "x.cdn.test")
	require.ErrorIs(t, err, policy.ErrDenied)
	s.mu.Lock()
	started := s.kick != nil
	s.mu.Unlock()
	assert.False(t, started, "no resolver of denied names")
	select {
	case c := <-calls:
		t.Fatalf("blocked under default deny: %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestDeniedNames(t *testing.T) {
	c, err := policy.Compile(*pol(policy.Allow, "allow *.evil.test", "deny a.evil.test", "deny evil.test",
		"deny *.bad.test", "deny 10.0.0.0/8", "deny 192.0.2.1", "allow ok.test"))
	require.NoError(t, err)
	assert.Equal(t, []string{"evil.test"}, deniedNames(c), "exact names the policy denies: not wildcards, IPs, or names an earlier rule allows")
}

// Names a wildcard denies are resolved on demand, but no more than
// maxBlocked of them are remembered: a workload asking for endless names
// cannot grow the controller without bound.
func TestOnDemandIsBounded(t *testing.T) {
	e := newEnv(t)
	s, _ := blockingSandbox(t, e, pol(policy.Allow, "deny *.cdn.test"))
	s.blockMu.Lock()
	future := time.Now().Add(time.Hour)
	for i := range maxBlocked {
		s.resolved[fmt.Sprintf("n%d.cdn.test", i)] = future
	}
	s.blockMu.Unlock()
	s.onDenied("x.cdn.test")
	s.blockMu.Lock()
	n := len(s.resolved)
	_, asked := s.resolved["x.cdn.test"]
	s.blockMu.Unlock()
	assert.Equal(t, maxBlocked, n)
	assert.False(t, asked, "no lookup while the map is full")
}
