package policy

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"defaultAction":"allow","egress":[{"action":"deny","target":"*.Example.com."}]}`,
		`{"egress":[{"action":"allow","target":"10.1.2.3/8"},{"action":"deny","target":"::ffff:1.2.3.4"}]}`,
		`{"egress":[{"action":"allow","target":"2001:DB8::/32"}]}`,
		`{"egress":[{"action":"ALLOW","target":" _a-b.c "}]}`,
		`{"egress":null}`,
		`{"defaultAction":"x"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		require.NotNil(t, p.Egress)
		again, err := Normalize(p)
		require.NoError(t, err)
		require.Equal(t, p, again, "Normalize is idempotent")

		b, err := json.Marshal(p)
		require.NoError(t, err)
		p2, err := Parse(b)
		require.NoError(t, err, "re-parse %s", b)
		require.Equal(t, p, p2)

		_, err = Compile(p)
		require.NoError(t, err)
	})
}

// fuzzPolicy builds rules from a comma-separated list; a leading "!" makes a
// rule deny.
func fuzzPolicy(spec string, defAllow bool) Policy {
	p := Policy{DefaultAction: Deny}
	if defAllow {
		p.DefaultAction = Allow
	}
	for _, s := range strings.Split(spec, ",") {
		r := Rule{Action: Allow, Target: s}
		if t, ok := strings.CutPrefix(s, "!"); ok {
			r = Rule{Action: Deny, Target: t}
		}
		p.Egress = append(p.Egress, r)
	}
	return p
}

// refMatch is a deliberately naive reference matcher for a normalized rule
// target and a host name.
func refMatch(target, name string) bool {
	n := strings.TrimSuffix(name, ".")
	if strings.HasPrefix(n, "[") && strings.HasSuffix(n, "]") && len(n) > 2 {
		n = n[1 : len(n)-1]
	}
	if a, err := netip.ParseAddr(n); err == nil {
		a = a.Unmap().WithZone("")
		if p, err := netip.ParsePrefix(target); err == nil {
			return p.Contains(a)
		}
		if ta, err := netip.ParseAddr(target); err == nil {
			return ta == a
		}
		return false
	}
	n = asciiLower(n)
	if suffix, ok := strings.CutPrefix(target, "*."); ok {
		return strings.HasSuffix(n, "."+suffix)
	}
	return n == target
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func FuzzName(f *testing.F) {
	f.Add("example.com,!*.example.com,10.0.0.0/8", "www.EXAMPLE.com.", false)
	f.Add("!10.0.0.0/8,10.1.2.3,*.a.b", "10.1.2.3", true)
	f.Add("*.a.b,!a.b,!2001:db8::/32", "x.y.a.b", false)
	f.Add("::ffff:1.2.3.0/120,!*.com", "[::ffff:1.2.3.4]", true)
	f.Add("a.com", "", false)
	f.Fuzz(func(t *testing.T, spec, name string, defAllow bool) {
		c, err := Compile(fuzzPolicy(spec, defAllow))
		if err != nil {
			return
		}
		d := c.Name(name)
		rules := c.Policy().Egress
		first := -1
		for i, r := range rules {
			if refMatch(r.Target, name) {
				first = i
				break
			}
		}
		require.Equal(t, first, d.Index, "name %q rules %v", name, rules)
		if d.Index >= 0 {
			require.Equal(t, rules[d.Index], d.Rule)
			require.Equal(t, rules[d.Index].Action == Allow, d.Allow)
		} else {
			require.Equal(t, defAllow, d.Allow)
		}
		_ = d.Reason()
	})
}
