package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseNormalizes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Policy
	}{
		{
			name: "unset default is deny",
			in:   `{"egress":[]}`,
			want: Policy{DefaultAction: Deny, Egress: []Rule{}},
		},
		{
			name: "missing egress",
			in:   `{"defaultAction":"allow"}`,
			want: Policy{DefaultAction: Allow, Egress: []Rule{}},
		},
		{
			name: "null document",
			in:   `null`,
			want: Policy{DefaultAction: Deny, Egress: []Rule{}},
		},
		{
			name: "case, trailing dot, spaces",
			in:   `{"defaultAction":"ALLOW","egress":[{"action":"Deny","target":" Example.COM. "},{"action":"allow","target":"*.Foo.Example.com"}]}`,
			want: Policy{DefaultAction: Allow, Egress: []Rule{{Action: Deny, Target: "example.com"}, {Action: Allow, Target: "*.foo.example.com"}}},
		},
		{
			name: "ip and cidr canonical forms",
			in: `{"egress":[
				{"action":"allow","target":"10.1.2.3"},
				{"action":"allow","target":"10.1.2.3/8"},
				{"action":"allow","target":"2001:DB8:0:0::1"},
				{"action":"allow","target":"2001:db8::1/32"},
				{"action":"allow","target":"::ffff:192.0.2.1"},
				{"action":"allow","target":"::ffff:192.0.2.0/120"},
				{"action":"allow","target":"::ffff:0:0/80"},
				{"action":"allow","target":"::ffff:0:0/96"}]}`,
			want: Policy{DefaultAction: Deny, Egress: []Rule{
				{Action: Allow, Target: "10.1.2.3"}, {Action: Allow, Target: "10.0.0.0/8"}, {Action: Allow, Target: "2001:db8::1"},
				{Action: Allow, Target: "2001:db8::/32"}, {Action: Allow, Target: "192.0.2.1"}, {Action: Allow, Target: "192.0.2.0/24"},
				{Action: Allow, Target: "::/80"}, {Action: Allow, Target: "0.0.0.0/0"},
			}},
		},
		{
			name: "underscore and single label",
			in:   `{"egress":[{"action":"allow","target":"_srv._tcp.example.com"},{"action":"deny","target":"localhost"}]}`,
			want: Policy{DefaultAction: Deny, Egress: []Rule{{Action: Allow, Target: "_srv._tcp.example.com"}, {Action: Deny, Target: "localhost"}}},
		},
		{
			name: "unknown fields ignored",
			in:   `{"egress":[{"action":"allow","target":"a.io","note":"x"}],"extra":1}`,
			want: Policy{DefaultAction: Deny, Egress: []Rule{{Action: Allow, Target: "a.io"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			again, err := Normalize(got)
			require.NoError(t, err)
			assert.Equal(t, got, again, "Normalize is idempotent")
		})
	}
}

func TestParseErrors(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		name string
		in   string
		want string // exact error message
	}{
		{"bad target", `{"egress":[{"action":"allow","target":"a.com"},{"action":"allow","target":"b.com"},{"action":"deny","target":"exa mple.com"}]}`,
			`egress[2].target "exa mple.com": not a domain, wildcard, IP or CIDR`},
		{"empty target", `{"egress":[{"action":"allow","target":""}]}`, `egress[0].target "": empty target`},
		{"missing target", `{"egress":[{"action":"allow"}]}`, `egress[0].target "": empty target`},
		{"lone star", `{"egress":[{"action":"allow","target":"*"}]}`, `egress[0].target "*": "*" alone is not allowed (use defaultAction)`},
		{"star inside", `{"egress":[{"action":"allow","target":"a.*.com"}]}`,
			`egress[0].target "a.*.com": "*" is only allowed as a whole leading label ("*.example.com")`},
		{"partial star", `{"egress":[{"action":"allow","target":"*foo.com"}]}`,
			`egress[0].target "*foo.com": "*" is only allowed as a whole leading label ("*.example.com")`},
		{"double star", `{"egress":[{"action":"allow","target":"*.*.com"}]}`,
			`egress[0].target "*.*.com": "*" is only allowed as a whole leading label ("*.example.com")`},
		{"star dot only", `{"egress":[{"action":"allow","target":"*."}]}`, `egress[0].target "*.": "*" alone is not allowed (use defaultAction)`},
		{"empty label", `{"egress":[{"action":"allow","target":"a..com"}]}`, `egress[0].target "a..com": empty label`},
		{"two trailing dots", `{"egress":[{"action":"allow","target":"a.com.."}]}`, `egress[0].target "a.com..": empty label`},
		{"long label", `{"egress":[{"action":"allow","target":"` + long63 + `b.com"}]}`,
			`egress[0].target "` + long63 + `b.com": label longer than 63 characters`},
		{"long name", `{"egress":[{"action":"allow","target":"` + strings.Repeat(long63+".", 4) + `com"}]}`,
			`egress[0].target "` + strings.Repeat(long63+".", 4) + `com": longer than 253 characters`},
		{"bad ip", `{"egress":[{"action":"allow","target":"10.0.0.256"}]}`, `egress[0].target "10.0.0.256": not a domain, wildcard, IP or CIDR`},
		{"bad ipv6", `{"egress":[{"action":"allow","target":"2001:db8:::1"}]}`, `egress[0].target "2001:db8:::1": not a valid IP address`},
		{"zone", `{"egress":[{"action":"allow","target":"fe80::1%eth0"}]}`, `egress[0].target "fe80::1%eth0": an IP address with a zone is not allowed`},
		{"bad cidr", `{"egress":[{"action":"allow","target":"10.0.0.0/33"}]}`, `egress[0].target "10.0.0.0/33": not a valid CIDR`},
		{"url", `{"egress":[{"action":"allow","target":"https://a.com/"}]}`, `egress[0].target "https://a.com/": not a domain, wildcard, IP or CIDR`},
		{"port", `{"egress":[{"action":"allow","target":"a.com:443"}]}`, `egress[0].target "a.com:443": not a domain, wildcard, IP or CIDR`},
		{"bad v6 cidr", `{"egress":[{"action":"allow","target":"2001:db8::/129"}]}`, `egress[0].target "2001:db8::/129": not a valid CIDR`},
		{"unicode", `{"egress":[{"action":"allow","target":"bücher.de"}]}`, `egress[0].target "bücher.de": not a domain, wildcard, IP or CIDR`},
		{"bad action", `{"egress":[{"action":"block","target":"a.com"}]}`, `egress[0].action "block": must be "allow" or "deny"`},
		{"missing action", `{"egress":[{"target":"a.com"}]}`, `egress[0].action "": missing; must be "allow" or "deny"`},
		{"bad default", `{"defaultAction":"permit"}`, `defaultAction "permit": must be "allow" or "deny"`},
		{"empty", ``, `egress policy: empty document`},
		{"not json", `{`, `egress policy: malformed JSON at byte 1: unexpected end of JSON input`},
		{"wrong type", `{"egress":{}}`, `egress policy: egress: want an array, got an object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
			assert.ErrorIs(t, err, ErrInvalid)
			var inv *InvalidError
			assert.True(t, errors.As(err, &inv))
		})
	}
}

func TestRuleLimit(t *testing.T) {
	rules := make([]Rule, MaxRules)
	for i := range rules {
		rules[i] = Rule{Action: Allow, Target: "10.0.0.1"}
	}
	_, err := Normalize(Policy{Egress: rules})
	require.NoError(t, err)
	_, err = Normalize(Policy{Egress: append(rules, Rule{Action: Deny, Target: "a.com"})})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "egress: 4097 rules, more than the limit of 4096", err.Error())
}

func TestParseRules(t *testing.T) {
	rules, err := ParseRules([]byte(` [{"action":"ALLOW","target":"A.com."},{"action":"deny","target":"10.0.0.0/8"}]`))
	require.NoError(t, err)
	assert.Equal(t, []Rule{{Action: Allow, Target: "a.com"}, {Action: Deny, Target: "10.0.0.0/8"}}, rules)

	rules, err = ParseRules([]byte(`[]`))
	require.NoError(t, err)
	assert.NotNil(t, rules)
	assert.Empty(t, rules)

	for in, want := range map[string]string{
		`{"action":"allow","target":"a.com"}`: `egress rules: want a JSON array of rules`,
		`null`:                                `egress rules: want a JSON array of rules`,
		`[{"action":"allow","target":"a.com"},{"action":"x"}]`: `rules[1].action "x": must be "allow" or "deny"`,
		`[{"action":"allow","target":"a b"}]`:                  `rules[0].target "a b": not a domain, wildcard, IP or CIDR`,
		`[{"action":"allow"`:                                   `egress rules: malformed JSON at byte 18: unexpected end of JSON input`,
	} {
		_, err := ParseRules([]byte(in))
		require.Error(t, err, in)
		assert.Equal(t, want, err.Error(), in)
		assert.ErrorIs(t, err, ErrInvalid, in)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	b, err := json.Marshal(Policy{})
	require.NoError(t, err)
	assert.JSONEq(t, `{}`, string(b), "an empty default and no rules are omitted")

	n, err := Normalize(Policy{})
	require.NoError(t, err)
	b, err = json.Marshal(&n)
	require.NoError(t, err)
	assert.JSONEq(t, `{"defaultAction":"deny","egress":[]}`, string(b), "a normalized policy has egress [] and an explicit default")

	in := `{"defaultAction":"allow","egress":[{"action":"deny","target":"*.example.com"},{"action":"allow","target":"10.0.0.0/8"},{"action":"deny","target":"2001:db8::/32"},{"action":"allow","target":"example.com"}]}`
	p, err := Parse([]byte(in))
	require.NoError(t, err)
	b, err = json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, in, string(b))
	p2, err := Parse(b)
	require.NoError(t, err)
	assert.Equal(t, p, p2)
}

func TestPatch(t *testing.T) {
	base := Policy{DefaultAction: Deny, Egress: []Rule{
		{Action: Allow, Target: "a.com"}, {Action: Deny, Target: "b.com"}, {Action: Allow, Target: "10.0.0.0/8"}, {Action: Allow, Target: "c.com"},
	}}
	orig := append([]Rule(nil), base.Egress...)
	tests := []struct {
		name  string
		rules []Rule
		want  []Rule
	}{
		{"nothing", nil, base.Egress},
		{"new rules go first in order",
			[]Rule{{Action: Deny, Target: "x.com"}, {Action: Allow, Target: "y.com"}},
			[]Rule{{Action: Deny, Target: "x.com"}, {Action: Allow, Target: "y.com"}, {Action: Allow, Target: "a.com"}, {Action: Deny, Target: "b.com"}, {Action: Allow, Target: "10.0.0.0/8"}, {Action: Allow, Target: "c.com"}}},
		{"same target replaced and moved",
			[]Rule{{Action: Allow, Target: "c.com"}, {Action: Allow, Target: "b.com"}},
			[]Rule{{Action: Allow, Target: "c.com"}, {Action: Allow, Target: "b.com"}, {Action: Allow, Target: "a.com"}, {Action: Allow, Target: "10.0.0.0/8"}}},
		{"targets compared normalized",
			[]Rule{{Action: Deny, Target: "A.COM."}, {Action: Deny, Target: "10.1.2.3/8"}},
			[]Rule{{Action: Deny, Target: "A.COM."}, {Action: Deny, Target: "10.1.2.3/8"}, {Action: Deny, Target: "b.com"}, {Action: Allow, Target: "c.com"}}},
		{"repeated new target keeps first",
			[]Rule{{Action: Deny, Target: "z.com"}, {Action: Allow, Target: "z.com"}},
			[]Rule{{Action: Deny, Target: "z.com"}, {Action: Allow, Target: "a.com"}, {Action: Deny, Target: "b.com"}, {Action: Allow, Target: "10.0.0.0/8"}, {Action: Allow, Target: "c.com"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Patch(base, tt.rules)
			assert.Equal(t, Deny, got.DefaultAction)
			assert.Equal(t, tt.want, got.Egress)
			assert.Equal(t, orig, base.Egress, "input not modified")
		})
	}
	// Wildcard and apex are different targets.
	got := Patch(Policy{Egress: []Rule{{Action: Allow, Target: "example.com"}}}, []Rule{{Action: Deny, Target: "*.example.com"}})
	assert.Equal(t, []Rule{{Action: Deny, Target: "*.example.com"}, {Action: Allow, Target: "example.com"}}, got.Egress)
}

func TestRemove(t *testing.T) {
	base := Policy{DefaultAction: Allow, Egress: []Rule{
		{Action: Deny, Target: "a.com"}, {Action: Deny, Target: "*.a.com"}, {Action: Deny, Target: "10.0.0.0/8"}, {Action: Deny, Target: "2001:db8::1"}, {Action: Deny, Target: "a.com"},
	}}
	orig := append([]Rule(nil), base.Egress...)
	got := Remove(base, []string{"A.com.", "10.9.9.9/8", "2001:DB8:0::1", "unknown.org", ""})
	assert.Equal(t, Policy{DefaultAction: Allow, Egress: []Rule{{Action: Deny, Target: "*.a.com"}}}, got)
	assert.Equal(t, orig, base.Egress, "input not modified")

	got = Remove(base, nil)
	assert.Equal(t, base, got)
	got = Remove(Policy{}, []string{"a.com"})
	assert.NotNil(t, got.Egress)
	assert.Empty(t, got.Egress)
}

func TestTargetKey(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":     "example.com",
		"*.Example.com":    "*.example.com",
		"::ffff:10.0.0.1":  "10.0.0.1",
		"10.0.0.1/8":       "10.0.0.0/8",
		" Not Valid. ":     "not valid",
		"2001:0db8:0::0/3": "2000::/3",
	} {
		assert.Equal(t, want, TargetKey(in), in)
	}
}
