package policy

import (
	"net/netip"
	"strings"
)

// kind is what a rule target denotes.
type kind uint8

const (
	kindDomain   kind = iota + 1 // exact host name
	kindWildcard                 // "*.suffix": strict subdomains of suffix
	kindPrefix                   // IP address (full-length prefix) or CIDR
)

// Limits on domain targets (RFC 1035 presentation form, without the root dot).
const (
	maxNameLen  = 253
	maxLabelLen = 63
)

const reasonNotATarget = "not a domain, wildcard, IP or CIDR"

// target is a parsed, normalized rule target.
type target struct {
	kind   kind
	text   string       // normalized form, as stored in the policy
	suffix string       // kindWildcard: the domain after "*."
	prefix netip.Prefix // kindPrefix
}

// parseTarget normalizes raw. On failure it returns a non-empty reason that
// says what is wrong, for an error message.
func parseTarget(raw string) (target, string) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return target{}, "empty target"
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if addr, _, _ := strings.Cut(s, "/"); looksLikeIP(addr) {
				return target{}, "not a valid CIDR"
			}
			return target{}, reasonNotATarget
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		return target{kind: kindPrefix, text: p.String(), prefix: p}, ""
	}
	if strings.Contains(s, ":") || isDigitsAndDots(s) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			if strings.Contains(s, ":") && looksLikeIP(s) {
				return target{}, "not a valid IP address"
			}
			return target{}, reasonNotATarget
		}
		if a.Zone() != "" {
			return target{}, "an IP address with a zone is not allowed"
		}
		a = a.Unmap()
		return target{kind: kindPrefix, text: a.String(), prefix: netip.PrefixFrom(a, a.BitLen())}, ""
	}

	name := strings.TrimSuffix(strings.ToLower(s), ".")
	if name == "*" {
		return target{}, `"*" alone is not allowed (use defaultAction)`
	}
	if len(name) > maxNameLen {
		return target{}, "longer than 253 characters"
	}
	domain, wildcard := strings.CutPrefix(name, "*.")
	if reason := checkDomain(domain); reason != "" {
		return target{}, reason
	}
	if wildcard {
		return target{kind: kindWildcard, text: name, suffix: domain}, ""
	}
	return target{kind: kindDomain, text: name}, ""
}

// checkDomain validates a lowercase domain without its trailing dot: labels
// of 1 to 63 letters, digits, hyphens or underscores, not all numeric (that
// would be a malformed IP address).
func checkDomain(d string) string {
	if d == "" {
		return reasonNotATarget
	}
	allNumeric := true
	for label := range strings.SplitSeq(d, ".") {
		switch {
		case label == "":
			return "empty label"
		case len(label) > maxLabelLen:
			return "label longer than 63 characters"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c == '-', c == '_':
				allNumeric = false
			case c >= '0' && c <= '9':
			case c == '*':
				return `"*" is only allowed as a whole leading label ("*.example.com")`
			default:
				return reasonNotATarget
			}
		}
	}
	if allNumeric {
		return reasonNotATarget
	}
	return ""
}

func isDigitsAndDots(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// looksLikeIP reports whether s is made of the characters of an IP address
// (hex digits, colons, dots), to choose an error message.
func looksLikeIP(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':' || c == '.') {
			return false
		}
	}
	return true
}
