package egress

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
)

// TestPlainTrust checks when a plaintext request for a bound host gets its
// credential: its own address, the sandbox resolver's answer, or an
// explicit IP/CIDR allow rule; otherwise the refusal says why, in the
// error and in the diagnostics events.
func TestPlainTrust(t *testing.T) {
	e := newEnv(t)
	dst := netip.MustParseAddrPort("192.0.2.7:80")
	for _, c := range []struct {
		name     string
		pol      *policy.Policy
		host     string
		answered bool // the sandbox's resolver answered host with dst
		trusted  bool
		event    string // part of the event recorded ("" = none)
	}{
		{"the address itself", pol(policy.Deny), "192.0.2.7", false, true, ""},
		{"resolver's answer", pol(policy.Deny, "allow api.test"), "api.test", true, true, ""},
		{"forged Host header", pol(policy.Deny, "allow api.test"), "api.test", false, false,
			"no credential added to a plaintext HTTP request for api.test sent to 192.0.2.7:80: the sandbox's resolver did not answer api.test with 192.0.2.7, and no IP or CIDR rule of its policy allows 192.0.2.7"},
		{"CIDR rule", pol(policy.Deny, "allow api.test", "allow 192.0.2.0/24"), "api.test", false, true,
			"credential added: 192.0.2.7 is allowed by rule 1 (allow 192.0.2.0/24)"},
		{"address rule", pol(policy.Deny, "allow 192.0.2.7"), "api.test", false, true, "allowed by rule 0 (allow 192.0.2.7)"},
		{"IP deny rule", pol(policy.Allow, "deny 192.0.2.0/24"), "api.test", false, false, "no credential added"},
		{"default allow is not an explicit rule", pol(policy.Allow), "api.test", false, false, "no credential added"},
		{"no policy", nil, "api.test", false, false, "no credential added"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := e.sandbox(t, Config{Policy: c.pol})
			if c.answered {
				s.mu.Lock()
				s.answered[c.host] = map[netip.Addr]time.Time{dst.Addr(): time.Now().Add(time.Minute)}
				s.mu.Unlock()
			}
			err := s.plainTrust(c.host, dst)
			assert.Equal(t, c.trusted, err == nil, "%v", err)
			events, dropped := s.Events()
			assert.Zero(t, dropped)
			if c.event == "" {
				assert.Empty(t, events)
				return
			}
			require.Len(t, events, 1)
			assert.Contains(t, events[0], c.event)
			assert.Contains(t, events[0], " network credential-proxy: ")
			if err != nil {
				assert.Contains(t, events[0], err.Error())
			}
		})
	}
}

// TestEventsBounded checks that the events keep the latest maxEvents lines
// and count the dropped ones.
func TestEventsBounded(t *testing.T) {
	s := &Controller{}
	for i := range maxEvents + 3 {
		s.events.add("event %d %s", i, strings.Repeat("x", maxEventLine))
	}
	lines, dropped := s.Events()
	assert.Equal(t, 3, dropped)
	require.Len(t, lines, maxEvents)
	assert.Contains(t, lines[0], "event 3 ")
	assert.Len(t, lines[0], maxEventLine)
}
