package policy

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// Modes reported by Compiled.Mode (the "mode" field of GET /policy).
const (
	ModeAllowAll  = "allow_all"
	ModeDenyAll   = "deny_all"
	ModeEnforcing = "enforcing"
)

// ErrDenied is matched (errors.Is) by every *DeniedError.
var ErrDenied = errors.New("egress denied")

// Compiled is a policy ready for matching. It is immutable and safe for
// concurrent use. A nil *Compiled means "no policy": everything is allowed.
type Compiled struct {
	policy       Policy
	defaultAllow bool
	exact        map[string]int32 // domain → lowest rule index
	wild         map[string]int32 // wildcard suffix (after "*.") → lowest rule index
	ip           []IPRule         // IP and CIDR rules in policy order
	v4           []v4Rule         // the IPv4 ones, for matching
	v6           []v6Rule         // the IPv6 ones, for matching
	allows       bool             // some rule allows
	denies       bool             // some rule denies
}

// IPRule is an IP or CIDR rule of a compiled policy. A single address is a
// full-length prefix; IPv4-mapped IPv6 rules are stored as IPv4.
type IPRule struct {
	Prefix netip.Prefix
	Allow  bool
	// Index is the rule's index in Policy.Egress.
	Index int
}

// Decision is the verdict for one destination.
type Decision struct {
	Allow bool
	// Index is the deciding rule's index in Policy.Egress, or -1 when the
	// default action decided (or there is no policy).
	Index int
	// Rule is the deciding rule. For the default action it holds only the
	// Action; with no policy at all it is the zero Rule.
	Rule Rule
}

// Compile validates and normalizes p (see Normalize) and builds its matcher.
//
// # Errors
// An *InvalidError (matching ErrInvalid) when p is invalid.
func Compile(p Policy) (*Compiled, error) {
	p, err := Normalize(p)
	if err != nil {
		return nil, err
	}
	c := &Compiled{
		policy:       p,
		defaultAllow: p.DefaultAction == Allow,
		exact:        make(map[string]int32),
		wild:         make(map[string]int32),
	}
	for i, r := range p.Egress {
		t, _ := parseTarget(r.Target) // valid: normalized above
		allow := r.Action == Allow
		c.allows = c.allows || allow
		c.denies = c.denies || !allow
		switch t.kind {
		case kindDomain:
			if _, seen := c.exact[t.text]; !seen {
				c.exact[t.text] = int32(i)
			}
		case kindWildcard:
			if _, seen := c.wild[t.suffix]; !seen {
				c.wild[t.suffix] = int32(i)
			}
		case kindPrefix:
			c.ip = append(c.ip, IPRule{Prefix: t.prefix, Allow: allow, Index: i})
			c.addPrefix(t.prefix, i)
		}
	}
	return c, nil
}

// Policy returns a copy of the normalized policy; the zero Policy for nil.
func (c *Compiled) Policy() Policy {
	if c == nil {
		return Policy{Egress: []Rule{}}
	}
	p := c.policy
	p.Egress = append([]Rule{}, c.policy.Egress...)
	return p
}

// Mode is ModeAllowAll for nil or a default-allow policy without deny
// rules, ModeDenyAll for a default-deny policy without allow rules, and
// ModeEnforcing otherwise.
func (c *Compiled) Mode() string {
	switch {
	case c == nil || c.defaultAllow && !c.denies:
		return ModeAllowAll
	case !c.defaultAllow && !c.allows:
		return ModeDenyAll
	}
	return ModeEnforcing
}

// DefaultAllow reports whether unmatched traffic is allowed (true for nil).
func (c *Compiled) DefaultAllow() bool { return c == nil || c.defaultAllow }

// IPRules returns the IP and CIDR rules in policy order (a copy).
func (c *Compiled) IPRules() []IPRule {
	if c == nil {
		return nil
	}
	return append([]IPRule(nil), c.ip...)
}

// HasNameRules reports whether any domain or wildcard rule exists.
func (c *Compiled) HasNameRules() bool {
	return c != nil && (len(c.exact) > 0 || len(c.wild) > 0)
}

// Name decides egress to a host name. Matching ignores ASCII case and one
// trailing dot. An IP literal (optionally in brackets) is decided like Addr.
// Otherwise domain and wildcard rules apply (the lowest matching index wins)
// and IP/CIDR rules do not. Name does not allocate for names up to 253
// bytes.
func (c *Compiled) Name(name string) Decision {
	if c == nil {
		return Decision{Allow: true, Index: -1}
	}
	name = strings.TrimSuffix(name, ".")
	if a, ok := ipLiteral(name); ok {
		return c.Addr(a)
	}
	if len(c.exact) == 0 && len(c.wild) == 0 {
		return c.byDefault()
	}
	var buf [maxNameLen]byte
	var b []byte
	if len(name) <= len(buf) {
		b = buf[:len(name)]
	} else {
		b = make([]byte, len(name)) // cannot match a rule exactly, but a wildcard may
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b[i] = ch
	}

	best := int32(-1)
	if i, ok := c.exact[string(b)]; ok {
		best = i
	}
	if len(c.wild) > 0 {
		for i := 0; i < len(b); i++ {
			if b[i] != '.' {
				continue
			}
			if w, ok := c.wild[string(b[i+1:])]; ok && (best < 0 || w < best) {
				best = w
			}
		}
	}
	if best < 0 {
		return c.byDefault()
	}
	return c.byRule(int(best))
}

// Addr decides egress to an address using the IP and CIDR rules in order
// (an IPv4-mapped IPv6 address is treated as IPv4; a zone is ignored);
// without a match the default action decides. It does not allocate.
func (c *Compiled) Addr(a netip.Addr) Decision {
	if c == nil {
		return Decision{Allow: true, Index: -1}
	}
	a = a.Unmap()
	switch {
	case a.Is4():
		b := a.As4()
		x := binary.BigEndian.Uint32(b[:])
		for _, r := range c.v4 {
			if x&r.mask == r.net {
				return c.byRule(int(r.index))
			}
		}
	case a.Is6():
		b := a.As16()
		hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
		for _, r := range c.v6 {
			if hi&r.maskHi == r.netHi && lo&r.maskLo == r.netLo {
				return c.byRule(int(r.index))
			}
		}
	}
	return c.byDefault()
}

// v4Rule and v6Rule are IP rules as integers and masks, for matching.
type v4Rule struct {
	net, mask uint32
	index     int32
}

type v6Rule struct {
	netHi, netLo, maskHi, maskLo uint64
	index                        int32
}

// addPrefix records a masked prefix for matching.
func (c *Compiled) addPrefix(p netip.Prefix, index int) {
	bits := p.Bits()
	if p.Addr().Is4() {
		b := p.Addr().As4()
		mask := ^uint32(0) << (32 - bits) // bits == 0: shift by 32 gives 0
		c.v4 = append(c.v4, v4Rule{net: binary.BigEndian.Uint32(b[:]) & mask, mask: mask, index: int32(index)})
		return
	}
	b := p.Addr().As16()
	var maskHi, maskLo uint64
	switch {
	case bits >= 64:
		maskHi, maskLo = ^uint64(0), ^uint64(0)<<(128-bits)
	default:
		maskHi = ^uint64(0) << (64 - bits)
	}
	c.v6 = append(c.v6, v6Rule{
		netHi: binary.BigEndian.Uint64(b[:8]) & maskHi, netLo: binary.BigEndian.Uint64(b[8:]) & maskLo,
		maskHi: maskHi, maskLo: maskLo, index: int32(index),
	})
}

func (c *Compiled) byRule(i int) Decision {
	r := c.policy.Egress[i]
	return Decision{Allow: r.Action == Allow, Index: i, Rule: r}
}

func (c *Compiled) byDefault() Decision {
	return Decision{Allow: c.defaultAllow, Index: -1, Rule: Rule{Action: c.policy.DefaultAction}}
}

// ipLiteral parses name as an IP address ("10.0.0.1", "::1", "[::1]"); it
// does not allocate for names that are not IP literals.
func ipLiteral(name string) (netip.Addr, bool) {
	if len(name) > 2 && name[0] == '[' && name[len(name)-1] == ']' {
		name = name[1 : len(name)-1]
	}
	if name == "" || !strings.Contains(name, ":") && !isDigitsAndDots(name) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(name)
	return a, err == nil
}

// Reason explains the decision for logs and error messages: "allowed by
// rule 0 (allow example.com)", "denied by rule 2 (deny *.example.com)",
// "denied by the default action (deny)" or "allowed: no policy".
func (d Decision) Reason() string {
	verb := "denied"
	if d.Allow {
		verb = "allowed"
	}
	switch {
	case d.Index >= 0:
		return verb + " by rule " + strconv.Itoa(d.Index) + " (" + string(d.Rule.Action) + " " + d.Rule.Target + ")"
	case d.Rule.Action == "":
		return verb + ": no policy"
	}
	return verb + " by the default action (" + string(d.Rule.Action) + ")"
}

// String is Reason.
func (d Decision) String() string { return d.Reason() }

// Err returns nil when d allows, else a *DeniedError for target.
func (d Decision) Err(target string) error {
	if d.Allow {
		return nil
	}
	return &DeniedError{Target: target, Decision: d}
}

// DeniedError reports egress refused by the policy. It matches ErrDenied.
type DeniedError struct {
	// Target is the destination as the caller named it (host or address).
	Target   string
	Decision Decision
}

// Error is e.g. "egress to example.com denied by rule 2 (deny *.example.com)".
func (e *DeniedError) Error() string {
	return "egress to " + e.Target + " " + e.Decision.Reason()
}

// Is reports whether target is ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }
